"""What a student's lab module may import: the runtime switch, the earlier-labs loader, the memory
model of lab 03, the PTX helpers of lab 09, the operator kernels that lab 10 ships, example
inputs and the drawing of the graded cases' inputs (``cases``; only its salt is secret), and the
guard bands and guarded launches the grader shares with ``python labNN.py`` (``guards``,
``launch``).

The grader's import rule names this package: a submission may import ``msda_labs.student`` and
its modules, nothing else of ``msda_labs``. Three of them only inside the lab module's
``if __name__ == "__main__":`` block, since they are for running a lab by hand: the self-check
(``check``, with its examples in ``selfcheck``) and the student-facing spec (``spec``).
"""
