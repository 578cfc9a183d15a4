"""Grading tests of lab 03 (the machine). Run them with `nox -s lab03`.

The child runs your functions through ``probes_lab03.py``; the judge compares with the sector
counts below (checked in the kit's tests against an independent count), the minimum bytes of
``msda_labs.truth.traffic`` and the tiling advantage of ``truth_lab03.py`` (recorded in a template
repository), and names a familiar mistake from ``msda_labs.mistakes.memory``.
``efficiency`` and ``tiling_speedup`` are graded apart from the functions they build on: each runs
with stand-ins for those and with yours, and passes when either run matches (``judge_lab03.py``).
"""

import math

import numpy as np
import pytest
from judge_lab03 import expect_either, stand_in_speedup
from probes_lab03 import efficiencies, min_bytes, sector_counts, speedups, stand_in_sectors
from truth_lab03 import tiling_speedup

from msda_labs.mistakes.memory import BYTES, EFFICIENCY, SECTORS
from msda_labs.student import memsim
from msda_labs.student.memsim import SECTOR_BYTES, AccessPattern
from msda_labs.truth.traffic import DEFAULT_SIZES, forward_bytes

TASKS = {"3.1": "sectors_touched, efficiency", "3.2": "forward_min_bytes",
         "3.3": "tiling_speedup"}


def _handmade() -> AccessPattern:
    """Four warp loads: scattered lanes, a fully masked warp, a pair across a sector edge, and a
    full contiguous warp."""
    warps = [np.array([0, 4, 64, 68, 1000]), np.array([], dtype=np.int64), np.array([28, 32]),
             4096 + 4 * np.arange(32)]
    return AccessPattern("handmade", 4, [w.astype(np.int64) for w in warps])


# (id, pattern builder, exact sector count). The counts were worked out by hand where the pattern
# is regular and are checked against an independent count in the kit's tests/test_memsim.py.
PATTERNS = {
    "contiguous_fp32": (lambda: memsim.contiguous(1024, itemsize=4), 128),
    "contiguous_fp16": (lambda: memsim.contiguous(1024, itemsize=2), 64),
    "strided_x2": (lambda: memsim.strided(2), 256),
    "strided_x4": (lambda: memsim.strided(4), 512),
    "strided_x16": (lambda: memsim.strided(16), 1024),
    "strided_x3_fp16_offset": (lambda: memsim.strided(3, n=50, itemsize=2, base=6), 11),
    "random_gather": (lambda: memsim.random_gather(), 1024),
    "random_gather_4KiB": (lambda: memsim.random_gather(span_bytes=4096), 904),
    "query_block": (lambda: memsim.msda_query_block(), 512),
    "point_parallel": (lambda: memsim.msda_point_parallel(), 8192),
    "contiguous_100_lanes": (lambda: memsim.contiguous(100, itemsize=4), 13),
    "handmade": (_handmade, 9),
    "query_block_D40": (lambda: memsim.msda_query_block(300, D=40, itemsize=2, seed=3), 1049),
    "point_parallel_D40": (lambda: memsim.msda_point_parallel(300, D=40, itemsize=2, seed=3),
                           12000),
}


# -- Task 3.1 ----------------------------------------------------------------------------------

def _check_sectors(submission, ids, what):
    patterns = [PATTERNS[i][0]() for i in ids]
    res = submission.run(sector_counts, patterns)
    refs = [PATTERNS[i][1] for i in ids]
    # A mistake is named when it alone explains every count of this test, else when it alone
    # explains the first wrong one: several mistakes coincide on a single fp32 pattern (128-byte
    # lines and addresses divided by 4 first), and naming one of them would be a guess.
    everywhere = [m.why for m in SECTORS.entries()
                  if all(got == m.plant(p) for (_, got), p in zip(res, patterns))]
    for (kind, got), ref, p in zip(res, refs, patterns):
        where = f"{what}: sectors_touched({p!r})"
        if kind == "other":
            raise AssertionError(f"{where} must return an int, got {got}")
        if got == ref:
            continue
        msg = f"{where} = {_count(got)}, expected {ref}"
        here = [m.why for m in SECTORS.entries() if m.plant(p) != ref and got == m.plant(p)]
        named = [e for e in everywhere if e in here]
        named = named if len(named) == 1 else here
        if len(named) == 1:
            msg += f"; this is exactly the count of {named[0]}"
        raise AssertionError(msg)


@pytest.mark.task("3.1", points=2)
def test_sectors_touched_coalesced_and_strided(submission):
    _check_sectors(submission, ("contiguous_fp32", "contiguous_fp16", "strided_x2", "strided_x4",
                                "strided_x16", "strided_x3_fp16_offset"),
                   "contiguous and strided reads")


@pytest.mark.task("3.1", points=1)
def test_sectors_touched_random_gathers(submission):
    _check_sectors(submission, ("random_gather", "random_gather_4KiB"),
                   "random gathers (the 4 KiB one has lanes sharing sectors)")


@pytest.mark.task("3.1", points=1)
def test_sectors_touched_counts_each_warp_load(submission):
    _check_sectors(submission, ("query_block", "point_parallel"),
                   "the MSDA tilings (point-parallel warps re-read sectors of earlier warps)")


@pytest.mark.task("3.1", points=1)
def test_sectors_touched_masked_lanes(submission):
    _check_sectors(submission, ("contiguous_100_lanes", "handmade", "query_block_D40",
                                "point_parallel_D40"),
                   "partial and masked warps, rows not aligned to sectors")


def _count(value) -> str:
    """A count as a student reads it: whole numbers in full (63,761,152, not 6.37612e+07)."""
    if isinstance(value, (int, np.integer)) or (isinstance(value, float) and value.is_integer()):
        return f"{int(value):,}"
    return f"{value:g}"


def _results(run, n: int, what: str) -> list:
    if not isinstance(run, list) or len(run) != n:
        raise AssertionError(f"{what}: {n} results expected, got {type(run).__name__}")
    return run


def _check_efficiency(submission, ids, what):
    patterns = [PATTERNS[i][0]() for i in ids]
    res = submission.run(efficiencies, patterns)

    def against(sectors_of):
        def check(run):
            for (kind, got), pid, p in zip(_results(run, len(ids), what), ids, patterns):
                sectors = sectors_of(pid, p)
                ref = p.useful_bytes / (sectors * SECTOR_BYTES)
                where = f"{what}: efficiency({p!r})"
                if kind == "other":
                    raise AssertionError(f"{where} must return a float, got {got}")
                if math.isclose(got, ref, rel_tol=1e-12):
                    continue
                msg = (f"{where} = {got:.6g}, expected {ref:.6g} = {p.useful_bytes} useful "
                       f"bytes / ({sectors} sectors * {SECTOR_BYTES} bytes)")
                for mistake in EFFICIENCY.entries():
                    value = mistake.plant(p, sectors)
                    if not math.isclose(value, ref) and math.isclose(got, value, rel_tol=1e-9):
                        msg += f"; this is exactly {mistake.why}"
                        break
                raise AssertionError(msg)

        return check

    expect_either(res, against(lambda pid, p: stand_in_sectors(p)),
                  against(lambda pid, p: PATTERNS[pid][1]))


@pytest.mark.task("3.1", points=1)
def test_efficiency_exact(submission):
    _check_efficiency(submission, ("contiguous_fp32", "strided_x2", "strided_x4", "strided_x16",
                                   "point_parallel"), "whole warps")


@pytest.mark.task("3.1", points=1)
def test_efficiency_masked_lanes(submission):
    _check_efficiency(submission, ("contiguous_100_lanes", "handmade", "query_block_D40"),
                      "partial and masked warps")


# -- Task 3.2 ----------------------------------------------------------------------------------

def _check_bytes(submission, calls, what):
    res = submission.run(min_bytes, calls)
    for (kind, got), kwargs in zip(res, calls):
        args = {**DEFAULT_SIZES, **kwargs}
        corners, params, output = forward_bytes(**args)
        ref = corners + params + output
        shown = ", ".join(f"{k}={v}" for k, v in kwargs.items())
        where = f"{what}: forward_min_bytes({shown})"
        if kind == "other":
            raise AssertionError(f"{where} must return an int, got {got}")
        if got == ref:
            continue
        msg = (f"{where} = {got:,.0f}, expected {ref:,} = corners {corners:,} + parameters "
               f"{params:,} + output {output:,}")
        for mistake in BYTES.entries():
            if mistake.plant(**args) != ref and got == mistake.plant(**args):
                msg += f"; this is exactly {mistake.why}"
                break
        raise AssertionError(msg)


@pytest.mark.task("3.2", points=1)
def test_forward_min_bytes_decoder_preset(submission):
    _check_bytes(submission, [{}], "the decoder preset (the defaults)")


@pytest.mark.task("3.2", points=2)
def test_forward_min_bytes_away_from_defaults(submission):
    calls = [{"itemsize": 4},
             {"B": 1, "Q": 1, "M": 1, "D": 1, "L": 1, "K": 1, "itemsize": 1},
             {"B": 2, "Q": 7, "M": 3, "D": 33, "L": 3, "K": 5, "itemsize": 2},
             {"B": 1, "Q": 13, "M": 2, "D": 17, "L": 1, "K": 1, "itemsize": 4},
             {"B": 8, "Q": 900, "M": 8, "D": 32, "L": 4, "K": 4, "itemsize": 2}]
    _check_bytes(submission, calls, "other sizes and item sizes")


@pytest.mark.task("3.2", points=1)
def test_forward_min_bytes_returns_an_int(submission):
    calls = [{}, {"D": 33, "itemsize": 4}]
    for (kind, got), kwargs in zip(submission.run(min_bytes, calls), calls):
        if kind != "int":
            shown = f"the float {got!r}" if kind == "number" else got
            args = ", ".join(f"{k}={v}" for k, v in kwargs.items())
            raise AssertionError(f"forward_min_bytes({args}) must return an int (bytes are "
                                 f"whole), got {shown}")
    # The type earns its point only with the right count: an int that ignores the sizes is not.
    _check_bytes(submission, calls, "an int, and the right one")


# -- Task 3.3 ----------------------------------------------------------------------------------

def _check_speedups(submission, calls, what):
    res = submission.run(speedups, calls)

    def against(speedup):
        def check(run):
            for (kind, got), kwargs in zip(_results(run, len(calls), what), calls):
                ref = speedup(**kwargs)
                shown = ", ".join(f"{k}={v}" for k, v in kwargs.items())
                where = f"{what}: tiling_speedup({shown})"
                if kind == "other":
                    raise AssertionError(f"{where} must return a float, got {got}")
                if math.isclose(got, ref, rel_tol=1e-9):
                    continue
                msg = f"{where} = {got:.6g}, expected {ref:.6g}"
                if got and math.isclose(1 / got, ref, rel_tol=1e-9):
                    msg += ("; this is a ratio upside down: point-parallel over query-block, "
                            "where the advantage of query-block is efficiency(query-block) / "
                            "efficiency(point)")
                elif math.isclose(got, speedup(), rel_tol=1e-9):
                    msg += ("; this is a hard-coded answer: the answer for the defaults, whatever "
                            "the arguments; build the patterns from the arguments")
                raise AssertionError(msg)

        return check

    # The truth of every call (and of the defaults, which name a hard-coded answer) is taken
    # before either check runs, whichever run passes: a template holds it recorded for exactly
    # these calls.
    truth = {tuple(sorted(kw.items())): tiling_speedup(**kw) for kw in [*calls, {}]}
    expect_either(res, against(stand_in_speedup),
                  against(lambda **kw: truth[tuple(sorted(kw.items()))]))


@pytest.mark.task("3.3", points=1)
def test_tiling_speedup_defaults(submission):
    # The defaults' answer (16.0) earns this point only from a function that follows its
    # arguments: the same call at D = 8, whose answer is 8.0, comes with it.
    _check_speedups(submission, [{}, {"D": 8}], "fp16, D = 32 (then D = 8), 256 queries")


@pytest.mark.task("3.3", points=2)
def test_tiling_speedup_away_from_defaults(submission):
    calls = [{"itemsize": 4}, {"n_queries": 1024}, {"n_queries": 300, "D": 40, "seed": 3},
             {"n_queries": 100, "D": 24, "itemsize": 4, "seed": 1}]
    _check_speedups(submission, calls, "other sizes")
