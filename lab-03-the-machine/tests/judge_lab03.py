"""Judge side of lab 03: grading ``efficiency`` and ``tiling_speedup`` apart from the functions
they are built on.

The child runs each twice in one request (``probes_lab03``): with ``sectors_touched`` (and
``efficiency``) replaced by stand-ins that count their own way (not the answer to any task), and
with your own. The judge computes its reference both ways: with the stand-ins (here), and with
the spec (``msda_labs.truth.memory``). A test passes when either run matches its reference, so a
bug costs points once, and no ground truth reaches the child.
"""

from probes_lab03 import stand_in_efficiency

from msda_labs.grading.judge import probes
from msda_labs.student import memsim

__all__ = ["STAND_IN_NOTE", "expect_either", "stand_in_speedup"]

STAND_IN_NOTE = ("graded with the grader's stand-in sectors_touched and efficiency in place of "
                 "yours, so that a bug in those counts in their own task only")


def stand_in_speedup(n_queries=256, D=32, itemsize=2, seed=0) -> float:
    """What ``tiling_speedup`` computes with the stand-in ``efficiency``."""
    block = memsim.msda_query_block(n_queries=n_queries, D=D, itemsize=itemsize, seed=seed)
    point = memsim.msda_point_parallel(n_queries=n_queries, D=D, itemsize=itemsize, seed=seed)
    return stand_in_efficiency(block) / stand_in_efficiency(point)


def expect_either(result, check_stand_in, check_own) -> None:
    """The stand-in run passes ``check_stand_in`` or your own run ``check_own``
    (:func:`msda_labs.grading.judge.probes.expect_either`)."""
    probes.expect_either(result, check_stand_in, check_own, note=STAND_IN_NOTE)
