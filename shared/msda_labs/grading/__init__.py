"""The grader: isolation (executor, zygote), the pytest plugin, comparisons, results, renderers.

Lab tests import from here::

    from msda_labs.grading import expect_close, expect_equal, variants_for
"""

from msda_labs.grading.compare import describe_value, expect_close, expect_equal, expect_tensor
from msda_labs.grading.mistakes import msda_variants, pixel_reads, pixel_variants

__all__ = [
    "expect_close", "expect_equal", "expect_tensor", "describe_value", "msda_variants",
    "pixel_reads", "pixel_variants",
]
