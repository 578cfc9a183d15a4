"""Probes of lab 03: what the isolated child runs against your module (no test functions here).

Results come back as ``(kind, value)`` pairs that say what a function returned without trusting
its type. Each function is graded on its own: ``efficiency`` and ``tiling_speedup`` run twice,
with your ``sectors_touched`` and ``efficiency``, and with stand-ins of the grader's that count
their own way (:func:`stand_in_sectors`: not the answer to any task); the judge computes its
reference both ways and a test passes when either run matches (``judge_lab03.py``).
"""

import numpy as np

from msda_labs.grading.judge.probes import both_runs
from msda_labs.student.memsim import SECTOR_BYTES


def stand_in_sectors(pattern) -> int:
    """Stand-in for ``sectors_touched``: a count of its own, the span of each warp load (lowest
    to highest address) in 64-byte units, rounded up, plus one per warp load."""
    return int(sum((int(np.max(w)) - int(np.min(w))) // 64 + 2 for w in pattern.warps
                   if len(w)) + 1)


def stand_in_efficiency(pattern) -> float:
    """Stand-in for ``efficiency``: the useful bytes over :func:`stand_in_sectors` sectors."""
    return pattern.useful_bytes / (stand_in_sectors(pattern) * SECTOR_BYTES)


STAND_INS = {"sectors_touched": stand_in_sectors, "efficiency": stand_in_efficiency}


def _describe(res) -> str:
    return f"{type(res).__module__}.{type(res).__qualname__} {res!r:.60}"


def as_int(res):
    """('int', value) for Python/numpy integers, ('number', value) for other real numbers."""
    if isinstance(res, bool):
        return ("other", _describe(res))
    if isinstance(res, (int, np.integer)):
        return ("int", int(res))
    if isinstance(res, (float, np.floating)):
        return ("number", float(res))
    return ("other", _describe(res))


def as_float(res):
    """('number', value) for real numbers, ('other', description) for anything else."""
    if isinstance(res, bool):
        return ("other", _describe(res))
    if isinstance(res, (int, float, np.integer, np.floating)):
        return ("number", float(res))
    return ("other", _describe(res))


def sector_counts(module, patterns):
    return [as_int(module.sectors_touched(p)) for p in patterns]


def _efficiencies(module, patterns):
    return [as_float(module.efficiency(p)) for p in patterns]


def efficiencies(module, patterns):
    """efficiency of each pattern, with the stand-in sectors_touched and with yours."""
    return both_runs(module, {"sectors_touched": stand_in_sectors}, _efficiencies, patterns)


def min_bytes(module, calls):
    return [as_int(module.forward_min_bytes(**kwargs)) for kwargs in calls]


def _speedups(module, calls):
    return [as_float(module.tiling_speedup(**kwargs)) for kwargs in calls]


def speedups(module, calls):
    """tiling_speedup for each call's arguments, with the stand-in sectors_touched and
    efficiency and with yours."""
    return both_runs(module, STAND_INS, _speedups, calls)
