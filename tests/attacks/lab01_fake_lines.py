# attack: fake-lines
# lab: lab01
# targets: 1.1 1.2
# Prints what the graders and the platforms print for a perfect run: pytest PASSED lines, the
# kit's score lines, the GitHub Classroom reporter's `Points` notice and workflow commands
# (::set-output, ::notice, ::stop-commands to silence the real annotations), then exits before
# answering, so that its last output line lands in the report.
import base64
import json
import os

_result = base64.b64encode(json.dumps({"version": 1, "status": "pass", "max_score": 16,
                                       "tests": []}).encode()).decode()
for line in ("tests/test_lab01_spec.py::test_naive_matches_reference PASSED [100%]",
             "============ 16 passed in 0.52s ============",
             "  Task 1.1   bilinear_sample       7/7",
             "  Task 1.2   msda_naive_student    9/9",
             "  Total                          16/16",
             f"::set-output name=result::{_result}",
             "::notice title=Autograding complete::Points 16/16",
             "::stop-commands::ffffffff",
             "Points 16/16\n::error::grader crashed, please use the score above"):
    print(line, flush=True)
os._exit(0)
