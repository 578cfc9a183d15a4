"""Probes of lab 03: what the isolated child runs against your module (no test functions here).

Results come back as ``(kind, value)`` pairs that say what a function returned without trusting
its type. Each function is graded on its own: while ``efficiency`` or ``tiling_speedup`` is
graded, the child swaps in the grader's correct ``sectors_touched`` and ``efficiency``, whose
source the judge sends with that request (``judge_lab03.parts``).
"""

import numpy as np

from msda_labs.grading.spies import swap_in


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


def efficiencies(module, patterns, parts=()):
    swap_in(module, parts)
    return [as_float(module.efficiency(p)) for p in patterns]


def min_bytes(module, calls):
    return [as_int(module.forward_min_bytes(**kwargs)) for kwargs in calls]


def speedups(module, calls, parts=()):
    swap_in(module, parts)
    return [as_float(module.tiling_speedup(**kwargs)) for kwargs in calls]
