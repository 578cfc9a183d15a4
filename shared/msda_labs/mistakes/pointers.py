"""Known mistakes of lab 02 (tensors are pointers): wrong flat offsets, wrong overflow rules.

:data:`FLAT_INDEX` holds wrong formulas for the flat offset of ``value[b, s, m, d]`` in a
contiguous (B, S, M, D) tensor, each a function of ``(b, s, m, d, S, M, D, *, offset)``: the
judge passes the right offset as ``offset``, so that a mistake that agrees with the right answer
wherever it is small (an offset wrapped around int32) is stated from it, and no entry of this
catalogue, which lab 02's template ships, answers Task 2.1. :data:`OVERFLOW`
holds wrong rules for "does the last offset ``i = B * S * M * D - 1`` overflow int32?", each a
predicate of ``i``. A grader names one when a submission's answers all agree with it.
"""

from __future__ import annotations

from msda_labs.mistakes.registry import Catalogue

__all__ = ["FLAT_INDEX", "INT32_MAX", "OVERFLOW"]

INT32_MAX = 2**31 - 1
FLAT_INDEX = Catalogue("flat index")
OVERFLOW = Catalogue("int32 overflow rule")


@FLAT_INDEX.register("no_batch_term", "the batch term b * S left out: every batch would read "
                                      "batch 0's memory")
def no_batch_term(b, s, m, d, S, M, D, *, offset):
    return (s * M + m) * D + d


@FLAT_INDEX.register("heads_channels_swapped", "m and d swapped: within a row of value the D "
                                               "channels of one head are contiguous, heads come "
                                               "one after another (m * D + d)")
def heads_channels_swapped(b, s, m, d, S, M, D, *, offset):
    return ((b * S + s) * D + d) * M + m


@FLAT_INDEX.register("row_of_d", "a row of value is M * D numbers long, not D: (b * S + s) must "
                                 "be multiplied by M * D")
def row_of_d(b, s, m, d, S, M, D, *, offset):
    return (b * S + s) * D + m * D + d


@FLAT_INDEX.register("heads_before_pixels", "the axes taken in the order (b, m, s, d): value is "
                                            "(B, S, M, D), so the pixel s comes before the head m "
                                            "and a row of value holds all M heads of one pixel")
def heads_before_pixels(b, s, m, d, S, M, D, *, offset):
    return ((b * M + m) * S + s) * D + d


@FLAT_INDEX.register("int32_wrap", "an offset wrapped around int32: it was computed in 32-bit "
                                   "integers, which hold at most 2**31 - 1; Python ints (or int64) "
                                   "never wrap")
def int32_wrap(b, s, m, d, S, M, D, *, offset):
    return (offset + 2**31) % 2**32 - 2**31


_UNSIGNED = "the unsigned limit 2**32 - 1: int32 is signed and holds at most 2**31 - 1"


@OVERFLOW.register("count_not_offset", "an off-by-one at the boundary (>= where > belongs, or the "
                                       "element count compared instead of the last offset): a "
                                       "tensor of exactly 2**31 elements has last offset 2**31 - "
                                       "1 = 2,147,483,647, the largest int32, so it still fits")
def count_not_offset(i):
    return i >= INT32_MAX


@OVERFLOW.register("past_2_31", "an off-by-one the other way: the largest int32 is 2**31 - 1, so "
                                "a last offset of 2**31 already overflows")
def past_2_31(i):
    return i > 2**31


@OVERFLOW.register("unsigned", _UNSIGNED)
def unsigned(i):
    return i > 2**32 - 1


@OVERFLOW.register("unsigned_at_limit", _UNSIGNED)
def unsigned_at_limit(i):
    return i >= 2**32 - 1


@OVERFLOW.register("unsigned_past_2_32", _UNSIGNED)
def unsigned_past_2_32(i):
    return i > 2**32


@OVERFLOW.register("int64_limit", "the int64 limit: the question is whether offsets fit in 32 "
                                  "bits")
def int64_limit(i):
    return i > 2**63 - 1
