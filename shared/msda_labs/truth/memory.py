"""Ground truth for lab 03 (the machine): sector counts, efficiency, the forward's minimum bytes
and the advantage of a query-block tiling, on the paper GPU of ``msda_labs.student.memsim`` (no
cache: every warp load pays for the distinct 32-byte sectors its addresses fall in).
"""

from __future__ import annotations

import numpy as np

from msda_labs.student import memsim
from msda_labs.student.memsim import SECTOR_BYTES, AccessPattern

__all__ = ["DEFAULT_SIZES", "efficiency", "forward_bytes", "sectors_touched", "tiling_speedup"]

# forward_min_bytes' defaults: the decoder preset.
DEFAULT_SIZES = {"B": 4, "Q": 300, "M": 8, "D": 32, "L": 4, "K": 4, "itemsize": 2}


def sectors_touched(pattern: AccessPattern) -> int:
    """Distinct 32-byte sectors per warp load, summed over the warp loads."""
    return int(sum(len(np.unique(np.asarray(w) // SECTOR_BYTES)) for w in pattern.warps))


def efficiency(pattern: AccessPattern) -> float:
    """Useful bytes over the bytes the sectors deliver."""
    return pattern.useful_bytes / (sectors_touched(pattern) * SECTOR_BYTES)


def forward_bytes(B, Q, M, D, L, K, itemsize) -> tuple[int, int, int]:
    """The MSDA forward's minimum traffic in bytes: (corner rows, sampling parameters, output).

    Each of the B * Q * M * L * K samples reads four corner rows of D channels and three numbers
    (x, y, weight); the (B, Q, M, D) output is written once.
    """
    samples = B * Q * M * L * K
    return samples * 4 * D * itemsize, samples * 3 * itemsize, B * Q * M * D * itemsize


def tiling_speedup(n_queries=256, D=32, itemsize=2, seed=0) -> float:
    """efficiency(query-block tiling) / efficiency(point-parallel tiling)."""
    block = memsim.msda_query_block(n_queries=n_queries, D=D, itemsize=itemsize, seed=seed)
    point = memsim.msda_point_parallel(n_queries=n_queries, D=D, itemsize=itemsize, seed=seed)
    return efficiency(block) / efficiency(point)
