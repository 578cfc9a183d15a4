"""The grader: the grading flow (session), one stage of one lab here (stage_run), isolation
(executor, zygote), the pytest plugin and what a test sees of a submission, comparisons,
results, renderers, the integrity of a lab's grading files.

Lab tests import the comparisons from here::

    from msda_labs.grading import expect_close, expect_equal
"""

from msda_labs.grading.compare import describe_value, expect_close, expect_equal, expect_tensor

__all__ = ["expect_close", "expect_equal", "expect_tensor", "describe_value"]
