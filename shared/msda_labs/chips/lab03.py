"""Lab 03 - The machine: count what a GPU really moves before writing any GPU code.

Goal: build the accounting of a paper GPU (warps of 32 lanes, 32-byte sectors, free arithmetic)
and use it to predict which way of putting MSDA onto lanes wins, and by how much.

In this lab you will:
  * count the distinct 32-byte sectors each warp load touches, and turn the count into a
    coalescing efficiency (useful bytes / delivered bytes);
  * add up the bytes the MSDA forward moves when nothing is reused;
  * predict the advantage of lanes-across-channels over lanes-across-queries.

The model lives in ``msda_labs.student.memsim`` (read its docstring: it says what the model leaves out).
An ``AccessPattern`` has ``.itemsize``, ``.useful_bytes`` and ``.warps``: a list with one int64
numpy array of byte addresses per warp load, one address per active lane (at most 32; fewer
when lanes are masked off).
"""

import numpy as np  # noqa: F401 (the starter leaves it unused)

from msda_labs.student.memsim import (  # noqa: F401 (the starter leaves some unused)
    SECTOR_BYTES,
    AccessPattern,
    msda_point_parallel,
    msda_query_block,
)


def sectors_touched(pattern: AccessPattern) -> int:
    """DRAM sectors the pattern costs: per warp load, the number of distinct sectors it touches.

    Args:
        pattern: the warp loads; ``pattern.warps[i]`` holds the byte addresses of warp load i.

    Returns:
        The sum over warp loads of the number of distinct ``address // SECTOR_BYTES`` values.
        Each warp load counts on its own: the paper GPU has no cache, so a sector that two warps
        both need is delivered twice.
    """
    # TODO(Task 3.1): for each warp load, find the distinct sectors its addresses fall in and add
    # up how many there are (about 3 lines).
    # BEGIN SOLUTION
    total = 0
    for addresses in pattern.warps:
        total += len(np.unique(np.asarray(addresses) // SECTOR_BYTES))
    return int(total)
    # STARTER
    # raise NotImplementedError("Task 3.1: sectors_touched")
    # END SOLUTION


def efficiency(pattern: AccessPattern) -> float:
    """Coalescing efficiency: bytes the lanes wanted over bytes DRAM delivered.

    Args:
        pattern: the warp loads.

    Returns:
        ``pattern.useful_bytes / (sectors_touched(pattern) * SECTOR_BYTES)`` as a float in (0, 1].
    """
    # TODO(Task 3.1): useful bytes over delivered bytes (about 2 lines).
    # BEGIN SOLUTION
    delivered = sectors_touched(pattern) * SECTOR_BYTES
    return pattern.useful_bytes / delivered
    # STARTER
    # raise NotImplementedError("Task 3.1: efficiency")
    # END SOLUTION


def forward_min_bytes(B: int = 4, Q: int = 300, M: int = 8, D: int = 32, L: int = 4, K: int = 4,
                      itemsize: int = 2) -> int:
    """DRAM bytes of the MSDA forward when no read is ever reused (the decoder preset by default).

    Counts, all at ``itemsize`` bytes per number:
      * the four corner rows of D channels read for every sample (b, q, m, l, k);
      * the sample's parameters: two coordinates and one attention weight;
      * the output written once: (B, Q, M, D).
    Metadata (spatial shapes, level starts) is ignored.

    This is not a true lower bound: bilinear neighbours share pixels, and on hardware a row read
    twice often comes from L2, so a real kernel can move less than this.

    Returns:
        The byte count as a Python int (40,857,600 for the defaults).
    """
    # TODO(Task 3.2): corners + sampling parameters + output, in bytes (about 4 lines).
    # BEGIN SOLUTION
    samples = B * Q * M * L * K
    corners = samples * 4 * D * itemsize
    params = samples * 3 * itemsize
    output = B * Q * M * D * itemsize
    return int(corners + params + output)
    # STARTER
    # raise NotImplementedError("Task 3.2: forward_min_bytes")
    # END SOLUTION


def tiling_speedup(n_queries: int = 256, D: int = 32, itemsize: int = 2, seed: int = 0) -> float:
    """Predicted advantage of the query-block tiling over the point-parallel tiling.

    Builds both MSDA patterns of ``msda_labs.student.memsim`` on the same rows (same ``n_queries``,
    ``D``, ``itemsize`` and ``seed``; the default number of pixels) and compares them with
    your ``efficiency``.

    Returns:
        ``efficiency(query-block) / efficiency(point-parallel)`` as a float; 16.0 for the defaults.
    """
    # TODO(Task 3.3): build the two patterns and divide their efficiencies (about 3 lines).
    # BEGIN SOLUTION
    block = msda_query_block(n_queries=n_queries, D=D, itemsize=itemsize, seed=seed)
    point = msda_point_parallel(n_queries=n_queries, D=D, itemsize=itemsize, seed=seed)
    return efficiency(block) / efficiency(point)
    # STARTER
    # raise NotImplementedError("Task 3.3: tiling_speedup")
    # END SOLUTION


if __name__ == "__main__":
    # Run your functions on one small example and compare them with the student-facing spec
    # (msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not
    # the grade; `nox -s lab03` is.
    from msda_labs.student.check import run_lab

    run_lab(3, globals())
