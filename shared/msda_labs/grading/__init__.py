"""The grader: isolation (executor, zygote), the pytest plugin, comparisons, results, renderers.

Lab tests import the comparisons from here::

    from msda_labs.grading import expect_close, expect_equal
"""

from msda_labs.grading.compare import describe_value, expect_close, expect_equal, expect_tensor

__all__ = ["expect_close", "expect_equal", "expect_tensor", "describe_value"]
