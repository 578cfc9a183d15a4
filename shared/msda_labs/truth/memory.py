"""Ground truth for lab 03 (the machine): sector counts, efficiency, the forward's minimum bytes
and the advantage of a query-block tiling, on the paper GPU of ``msda_labs.student.memsim`` (no
cache: every warp load pays for the distinct 32-byte sectors its addresses fall in).

The sector counts answer lab 03's own Task 3.1, so lab 03's template carries none of this module
(its tests take the values they need from ``tests/truth_lab03.py``,
:mod:`msda_labs.grading.judge.owntruth`); the minimum bytes live in :mod:`.traffic`.
"""

from __future__ import annotations

import numpy as np

from msda_labs.student import memsim
from msda_labs.student.memsim import SECTOR_BYTES, AccessPattern
from msda_labs.truth.traffic import DEFAULT_SIZES, forward_bytes

__all__ = ["DEFAULT_SIZES", "efficiency", "forward_bytes", "sectors_touched", "tiling_speedup"]


def sectors_touched(pattern: AccessPattern) -> int:
    """Distinct 32-byte sectors per warp load, summed over the warp loads."""
    return int(sum(len(np.unique(np.asarray(w) // SECTOR_BYTES)) for w in pattern.warps))


def efficiency(pattern: AccessPattern) -> float:
    """Useful bytes over the bytes the sectors deliver."""
    return pattern.useful_bytes / (sectors_touched(pattern) * SECTOR_BYTES)


def tiling_speedup(n_queries=256, D=32, itemsize=2, seed=0) -> float:
    """efficiency(query-block tiling) / efficiency(point-parallel tiling)."""
    block = memsim.msda_query_block(n_queries=n_queries, D=D, itemsize=itemsize, seed=seed)
    point = memsim.msda_point_parallel(n_queries=n_queries, D=D, itemsize=itemsize, seed=seed)
    return efficiency(block) / efficiency(point)
