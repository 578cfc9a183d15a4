"""msda_labs: the runtime, ground truth, reference solutions ("chips"), grader and classroom
tooling of the MSDA Triton course kit.

The package is arranged by who may use each part (docs/architecture.md draws the layers):

- ``msda_labs.student``: the only part a student's lab module may import (the grader's import
  rule names it); the chips of earlier labs come through ``msda_labs.student.earlier.load``.
- ``msda_labs.truth`` and ``msda_labs.mistakes``: the ground truth, the graded cases and the
  wrong versions that the tests must reject. Grader only.
- ``msda_labs.course``: the manifest and the ladder of rules.
- ``msda_labs.grading``, ``msda_labs.gpu``, ``msda_labs.classroom``: the grader, where a stage
  runs, and the classroom tooling; ``msda_labs.cli`` is the command line on top of them.
- ``msda_labs.errors``: ``KitError``, the one error base (the command line exits 2 with it).
- ``msda_labs.authoring``: tools for the people who write the course.
- ``msda_labs.chips``: the reference solution of every lab.
"""

__version__ = "0.1.0"
