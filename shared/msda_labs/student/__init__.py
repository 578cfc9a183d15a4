"""What a student's lab module may import: the runtime switch, the earlier-labs loader, the memory
model of lab 03, the PTX helpers of lab 09, the operator kernels that lab 10 ships, example
inputs and the drawing of the graded cases' inputs (``cases``; only its salt is secret).

The grader's import rule names this package: a submission may import ``msda_labs.student`` and
its modules, nothing else of ``msda_labs``.
"""
