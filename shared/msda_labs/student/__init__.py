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

RUN_BY_HAND = ("msda_labs.student.check", "msda_labs.student.spec", "msda_labs.student.selfcheck")
"""Student modules for running a lab by hand (``python labNN.py``): the self-check and the
student-facing spec. A lab module may import them only inside ``if __name__ == "__main__":``; a
graded function that hands its work to the spec must earn nothing, and a grading worker never
holds them (the import rule of ``msda_labs.grading`` and the zygote's child guard)."""
