# attack: coding-thread
# lab: lab02
# task: 2.2
# encoding: utf-7
# hidden: ../watch/lab02_thread_hides_work.py
# rule-tests: test_flat_msda_reads_only_flat_views test_flat_msda_index_math_in_int64
# rule-tests: test_flat_msda_loops_only_over_levels_and_points
# The lab's chip, with the watch attack "a thread hides the work" (hidden:) hidden in a comment
# that a `# -*- coding: utf-7 -*-` first line turns into code: read as UTF-8 the block is one
# comment line, read as UTF-7 (as Python compiles the file) it is the module's flat_msda. The
# same block in plain text loses the rules (tests/attacks/watch/).
