"""Known mistakes of lab 03 (the machine): wrong sector counts, efficiencies and byte counts.

Each catalogue entry computes what a submission with that mistake returns, from the same inputs
as the ground truth (:mod:`msda_labs.truth.memory`); a grader names the one a wrong answer equals.
"""

from __future__ import annotations

import math

import numpy as np

from msda_labs.mistakes.registry import Catalogue
from msda_labs.student import memsim
from msda_labs.student.memsim import SECTOR_BYTES, AccessPattern
from msda_labs.truth.traffic import forward_bytes

__all__ = ["BYTES", "EFFICIENCY", "SECTORS"]

SECTORS = Catalogue("sector count")  # (pattern) -> count
EFFICIENCY = Catalogue("efficiency")  # (pattern, correct sector count) -> efficiency
BYTES = Catalogue("forward bytes")  # (B, Q, M, D, L, K, itemsize) -> bytes


def _warps(p: AccessPattern):
    return [np.asarray(w) for w in p.warps]


@SECTORS.register("per_lane", "one sector per active lane: lanes whose addresses fall in the "
                              "same 32-byte sector share it, so count distinct sectors")
def per_lane(p):
    return sum(len(w) for w in _warps(p))


@SECTORS.register("whole_pattern", "distinct sectors counted over the whole pattern instead of "
                                   "per warp load: the paper GPU has no cache, so every warp load "
                                   "pays for its own sectors")
def whole_pattern(p):
    warps = _warps(p)
    every = np.concatenate(warps) if warps else np.array([], dtype=np.int64)
    return len(np.unique(every // SECTOR_BYTES))


@SECTORS.register("perfect_coalescing", "the bytes each warp wanted divided by 32: that assumes "
                                        "perfect coalescing; count the sectors the addresses "
                                        "actually fall in")
def perfect_coalescing(p):
    return sum(math.ceil(len(w) * p.itemsize / SECTOR_BYTES) for w in _warps(p))


@SECTORS.register("element_addresses", "addresses divided by the item size first: pattern.warps "
                                       "already holds byte addresses")
def element_addresses(p):
    return sum(len(np.unique(w // p.itemsize // SECTOR_BYTES)) for w in _warps(p))


@SECTORS.register("span", "the span of each warp: every sector from its lowest address to its "
                          "highest, the gaps between its lanes too; count only the sectors the "
                          "addresses fall in")
def span(p):
    return sum(int(w.max() // SECTOR_BYTES - w.min() // SECTOR_BYTES) + 1
               for w in _warps(p) if len(w))


@SECTORS.register("cache_lines", "128-byte cache lines instead of 32-byte sectors")
def cache_lines(p):
    return sum(len(np.unique(w // 128)) for w in _warps(p))


@EFFICIENCY.register("full_warps", "every warp counted as 32 active lanes: masked lanes want "
                                   "nothing, use pattern.useful_bytes")
def full_warps(p, sectors):
    return len(p.warps) * memsim.WARP_SIZE * p.itemsize / (sectors * SECTOR_BYTES)


@EFFICIENCY.register("upside_down", "delivered over useful, upside down")
def upside_down(p, sectors):
    return (sectors * SECTOR_BYTES) / p.useful_bytes


@EFFICIENCY.register("sectors_not_bytes", "useful bytes over sectors: multiply the sectors by "
                                          "SECTOR_BYTES")
def sectors_not_bytes(p, sectors):
    return p.useful_bytes / sectors


@EFFICIENCY.register("integer_division", "an integer division (//): it rounds every efficiency "
                                         "below 1 down to 0; divide with /")
def integer_division(p, sectors):
    return float(p.useful_bytes // (sectors * SECTOR_BYTES))


@BYTES.register("hard_coded", "the decoder preset's answer hard-coded: the count must follow the "
                              "arguments")
def hard_coded(B, Q, M, D, L, K, itemsize):
    return 40_857_600


@BYTES.register("one_row", "one row per sample: bilinear reads four corner rows")
def one_row(B, Q, M, D, L, K, itemsize):
    corners, params, output = forward_bytes(B, Q, M, D, L, K, itemsize)
    return corners // 4 + params + output


@BYTES.register("corner_as_number", "a corner counted as one number: each corner row holds D "
                                    "channels")
def corner_as_number(B, Q, M, D, L, K, itemsize):
    _, params, output = forward_bytes(B, Q, M, D, L, K, itemsize)
    return B * Q * M * L * K * 4 * itemsize + params + output


@BYTES.register("no_parameters", "the sampling parameters left out: each sample reads 2 "
                                 "coordinates and 1 weight")
def no_parameters(B, Q, M, D, L, K, itemsize):
    corners, _, output = forward_bytes(B, Q, M, D, L, K, itemsize)
    return corners + output


@BYTES.register("no_weight", "the attention weight left out: each sample reads 2 coordinates and "
                             "1 weight")
def no_weight(B, Q, M, D, L, K, itemsize):
    corners, _, output = forward_bytes(B, Q, M, D, L, K, itemsize)
    return corners + B * Q * M * L * K * 2 * itemsize + output


@BYTES.register("no_output", "the output left out: (B, Q, M, D) is written once")
def no_output(B, Q, M, D, L, K, itemsize):
    corners, params, _ = forward_bytes(B, Q, M, D, L, K, itemsize)
    return corners + params


@BYTES.register("numbers_not_bytes", "numbers counted instead of bytes: multiply by itemsize")
def numbers_not_bytes(B, Q, M, D, L, K, itemsize):
    return sum(forward_bytes(B, Q, M, D, L, K, itemsize)) // itemsize
