"""The paper GPU of lab 03: a deliberately small model of how a GPU reads memory.

The model has three premises, and nothing else:

* a **warp** is ``WARP_SIZE`` = 32 lanes that issue one load each at the same instant;
* DRAM delivers whole **sectors** of ``SECTOR_BYTES`` = 32 bytes: a warp's load costs one sector
  per *distinct* sector its lanes' addresses fall in, however few bytes of each it wanted;
* arithmetic is free: time is bytes moved divided by bandwidth.

An :class:`AccessPattern` is a list of warp loads, each the array of **byte** addresses of the
lanes that are active in it (32 of them, or fewer when lanes are masked off, e.g. in a partial
last warp). The generators below build the patterns lab 03 studies: contiguous, strided and random
reads, and the two ways of laying the MSDA forward's gathers onto lanes.

What the model leaves out, on purpose (each would make a real GPU do *better* or *differently*
than the count says):

* caches: no L1 or L2, so a sector fetched by one warp is fetched again by the next warp that
  wants it (on hardware, neighbouring warps often hit in L2 instead of DRAM);
* granularity above the sector (128-byte cache lines, DRAM pages and bursts);
* misaligned elements: every element is assumed to sit inside one sector (addresses are
  multiples of the item size, as they are for aligned tensors);
* latency, occupancy, how many loads are in flight, and shared-memory bank conflicts;
* the bilinear structure of MSDA: the MSDA generators read one pixel row per query, not the four
  corners of L * K samples.

So the numbers it gives are what an ideal machine without caches would move. They predict the
*direction* and rough size of a design choice, not a measured time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "SECTOR_BYTES",
    "WARP_SIZE",
    "AccessPattern",
    "from_elements",
    "contiguous",
    "strided",
    "random_gather",
    "msda_query_block",
    "msda_point_parallel",
]

SECTOR_BYTES = 32
WARP_SIZE = 32


@dataclass
class AccessPattern:
    """A sequence of warp loads.

    Attributes:
        name: what the pattern is, for tables and messages.
        itemsize: bytes each active lane reads (2 for fp16, 4 for fp32).
        warps: one int64 array of byte addresses per warp load; its length is the number of
            active lanes (at most ``WARP_SIZE``).
    """

    name: str
    itemsize: int
    warps: list[np.ndarray] = field(default_factory=list)

    @property
    def lanes(self) -> int:
        """Active lanes summed over all warp loads."""
        return sum(len(w) for w in self.warps)

    @property
    def useful_bytes(self) -> int:
        """Bytes the lanes asked for: active lanes times ``itemsize``."""
        return self.lanes * self.itemsize

    def __repr__(self) -> str:
        return (f"AccessPattern({self.name!r}, itemsize={self.itemsize}, "
                f"{len(self.warps)} warps, {self.lanes} active lanes)")


def _warps_of(addresses: np.ndarray) -> list[np.ndarray]:
    """Cut a flat array of byte addresses into consecutive warps of WARP_SIZE lanes."""
    addresses = np.asarray(addresses, dtype=np.int64)
    return [addresses[i:i + WARP_SIZE] for i in range(0, len(addresses), WARP_SIZE)]


def from_elements(name: str, elements, itemsize: int, base: int = 0) -> AccessPattern:
    """A pattern where lane ``i`` (counting across warps) reads element ``elements[i]``.

    Args:
        name: the pattern's name.
        elements: (n,) element indices; lanes are grouped into warps of 32 in order, so a
            length that is not a multiple of 32 leaves the last warp partly masked.
        itemsize: bytes per element.
        base: byte address of element 0.
    """
    elements = np.asarray(elements, dtype=np.int64)
    return AccessPattern(name, itemsize, _warps_of(base + elements * itemsize))


def contiguous(n: int = 1024, itemsize: int = 4, base: int = 0) -> AccessPattern:
    """Lane i reads element i: the best case."""
    return from_elements("contiguous", np.arange(n), itemsize, base)


def strided(stride_elems: int, n: int = 1024, itemsize: int = 4, base: int = 0) -> AccessPattern:
    """Lane i reads element ``i * stride_elems`` (e.g. one column of a row-major matrix)."""
    return from_elements(f"strided x{stride_elems}", np.arange(n) * stride_elems, itemsize, base)


def random_gather(n: int = 1024, span_bytes: int = 64 << 20, itemsize: int = 4,
                  seed: int = 0) -> AccessPattern:
    """Lane i reads a uniformly random element of a buffer of ``span_bytes`` bytes."""
    rng = np.random.default_rng(seed)
    elements = rng.integers(0, span_bytes // itemsize, size=n)
    return from_elements("random gather", elements, itemsize)


def _query_rows(n_queries: int, n_pixels: int, seed: int) -> np.ndarray:
    """The pixel row each query reads: uniformly random, the way sampling points scatter."""
    return np.random.default_rng(seed).integers(0, n_pixels, size=n_queries)


def msda_query_block(n_queries: int = 256, D: int = 32, itemsize: int = 2,
                     n_pixels: int = 100_000, seed: int = 0) -> AccessPattern:
    """MSDA gathers with lanes across channels: each query's row is read by its own warp(s).

    The value tensor is seen as ``n_pixels`` rows of ``D`` channels (row r starts at byte
    ``r * D * itemsize``). For every query, lane j of a warp reads channel j of that query's
    row; a row of more than 32 channels takes several warps, one of fewer leaves lanes masked.
    """
    rows = _query_rows(n_queries, n_pixels, seed)
    row_bytes = D * itemsize
    warps = []
    for row in rows:
        for c0 in range(0, D, WARP_SIZE):
            channels = np.arange(c0, min(c0 + WARP_SIZE, D))
            warps.append(row * row_bytes + channels * itemsize)
    return AccessPattern("query-block tiling", itemsize, warps)


def msda_point_parallel(n_queries: int = 256, D: int = 32, itemsize: int = 2,
                        n_pixels: int = 100_000, seed: int = 0) -> AccessPattern:
    """MSDA gathers with lanes across queries: lane j serves query j of a group of 32.

    The same rows as :func:`msda_query_block` for the same seed (so the same useful bytes). For
    every group of 32 queries and every channel d, one warp load: lane j reads channel d of query
    j's row. A last group of fewer than 32 queries leaves lanes masked.
    """
    rows = _query_rows(n_queries, n_pixels, seed)
    row_bytes = D * itemsize
    warps = []
    for g0 in range(0, n_queries, WARP_SIZE):
        group = rows[g0:g0 + WARP_SIZE]
        for d in range(D):
            warps.append(group * row_bytes + d * itemsize)
    return AccessPattern("point-parallel tiling", itemsize, warps)
