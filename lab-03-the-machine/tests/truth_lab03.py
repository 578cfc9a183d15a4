"""Lab 03's ground truth, on the judge's side: every expected value lab 03's tests take from the
kit's truth, and nothing else of it.

The sector counts of ``msda_labs.truth.memory`` answer Task 3.1, so lab 03's template repository
carries neither this file nor that module: the export writes in its place a module that looks up
what these functions gave on the calls the tests make (``truth_lab03.pt``, recorded by
``python scripts/record_truth.py lab03``; :mod:`msda_labs.grading.judge.owntruth`).
"""

from msda_labs.grading.judge.owntruth import judged
from msda_labs.truth import memory

__all__ = ["tiling_speedup"]
# The kit modules that answer a task of lab 03: the export leaves them (and every module that
# imports them) out of lab 03's template.
ANSWERING_MODULES = ("msda_labs/truth/memory.py",)

_judged = judged(__file__, "lab03")


@_judged
def tiling_speedup(**kwargs) -> float:
    """efficiency(query-block tiling) / efficiency(point-parallel tiling) for these arguments."""
    return memory.tiling_speedup(**kwargs)
