"""The statistics of a speed verdict on the judge's clock: per-call times from rounds, a
bootstrap interval of a ratio of two such times, the order in which the student's rounds and
the baselines' rounds alternate, and whether a verdict must be measured again.

A round is the wall time of ``n`` calls on the judge's clock
(:mod:`msda_labs.grading.judge.speedjudge`); a time per call is ``(median round - median no-op
round) / n``. A ratio of two such times (yours over a baseline's, or one of your launches over
another) is what a speed test grades against a threshold. Its interval comes from resampling every
set of rounds with replacement (a seeded numpy generator: the same samples give the same interval),
recomputing the ratio of medians on each draw, and reading the central quantiles. A verdict whose
interval holds the threshold is not decided by noise: the judge measures again (:func:`straddles`),
a bounded number of times, and decides on the pooled rounds.

Pure functions on lists of seconds: the kit's own tests drive them without a GPU.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Limit", "Timed", "per_call_us", "bootstrap_ratio", "straddles", "alternation",
           "BOOTSTRAP_DRAWS", "LEVEL"]

BOOTSTRAP_DRAWS = 2000
LEVEL = 0.95  # the interval's coverage


@dataclass(frozen=True)
class Limit:
    """What a speed test grades: ``times[num] / (times[den] - times[minus])`` at most
    ``limit`` (or at least, with ``at_least``). ``ideal`` is the ratio a submission as good as
    the baseline reads (1 against the same code, 0 where any fast kernel is far below the limit);
    the *margin* of a ratio is the share of the way from ``ideal`` to ``limit`` still left."""

    num: str
    den: str
    limit: float
    minus: str | None = None
    at_least: bool = False
    ideal: float = 0.0

    @property
    def name(self) -> str:
        den = f"({self.den} - {self.minus})" if self.minus else self.den
        return f"{self.num} / {den}"

    def ratio(self, times: Mapping[str, float]) -> float:
        den = times[self.den] - (times[self.minus] if self.minus else 0.0)
        return times[self.num] / den if den > 0 else float("inf")

    def holds(self, ratio: float) -> bool:
        return ratio >= self.limit if self.at_least else ratio <= self.limit

    def margin(self, ratio: float) -> float:
        """1 at the ideal, 0 at the limit, below 0 past it."""
        span = self.limit - self.ideal
        return 1.0 - (ratio - self.ideal) / span if span else 0.0


def per_call_us(rounds: Sequence[float], noop: Sequence[float] | float, n: int) -> float:
    """``(median round - median no-op round) / n`` in microseconds (``noop``: its rounds, or
    its median)."""
    base = noop if isinstance(noop, (int, float)) else statistics.median(noop)
    return (statistics.median(rounds) - base) / n * 1e6


@dataclass(frozen=True)
class Timed:
    """The rounds behind one time per call: its own and the no-op rounds subtracted."""

    rounds: Sequence[float]
    noop: Sequence[float]


def _draw_medians(rng: np.random.Generator, samples: Sequence[float], draws: int) -> np.ndarray:
    data = np.asarray(samples, dtype=float)
    if data.size == 0:
        raise ValueError("no rounds to resample")
    picks = rng.integers(0, data.size, size=(draws, data.size))
    return np.median(data[picks], axis=1)


def bootstrap_ratio(parts: Mapping[str, Timed], limit: Limit, n: int, *, seed: int = 0,
                    draws: int = BOOTSTRAP_DRAWS, level: float = LEVEL) -> tuple[float, float]:
    """The ``level`` interval of ``limit.ratio`` over the per-call times of ``parts`` (its
    ``num``, ``den`` and ``minus``), every set of rounds resampled with replacement."""
    rng = np.random.default_rng(seed)
    per_call = {}
    for name in {limit.num, limit.den, *([limit.minus] if limit.minus else [])}:
        timed = parts[name]
        per_call[name] = (_draw_medians(rng, timed.rounds, draws)
                          - _draw_medians(rng, timed.noop, draws)) / n * 1e6
    den = per_call[limit.den] - (per_call[limit.minus] if limit.minus else 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(den > 0, per_call[limit.num] / np.where(den > 0, den, 1.0), np.inf)
    tail = (1.0 - level) / 2
    lo, hi = np.quantile(ratios, [tail, 1.0 - tail], method="inverted_cdf")
    return float(lo), float(hi)


def straddles(interval: tuple[float, float], limit: Limit) -> bool:
    """The interval holds the threshold: the verdict would be decided by noise."""
    lo, hi = interval
    return lo <= limit.limit <= hi


def alternation(student: Sequence[str], clean: Sequence[str], cycles: int) -> list[tuple]:
    """The order of the timed rounds while the student's child lives: ``cycles`` times, one
    round of each of the student's variants, then one round of each clean call (the no-op and
    the baselines), so that drift over the trial hits both sides alike (ABAB...). Entries:
    ``("student" | "clean", name)``."""
    order: list[tuple] = []
    for _ in range(cycles):
        order += [("student", name) for name in student]
        order += [("clean", name) for name in clean]
    return order
