"""The statistics of a speed verdict (msda_labs.grading.speed.speedstats) and how the judge uses
them (msda_labs.grading.judge.speedjudge): the order of the alternating rounds, the bootstrap
interval of a ratio, and a verdict whose interval holds its threshold measured again. No GPU, no
child: the
rounds are generated, the measurement is a stand-in."""

import statistics
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msda_labs.grading.judge import speedjudge
from msda_labs.grading.speed.speedstats import (
    Limit,
    Timed,
    alternation,
    bootstrap_ratio,
    per_call_us,
    straddles,
)

N = 16
SETTINGS = settings(max_examples=40, derandomize=True, deadline=None)


def test_alternation_is_abab_with_every_name_once_a_cycle():
    order = alternation(["yours"], ["noop", "reference", "chip"], 3)
    assert order == [("student", "yours"), ("clean", "noop"), ("clean", "reference"),
                     ("clean", "chip")] * 3


@SETTINGS
@given(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=3, unique=True),
       st.lists(st.sampled_from("uvwxyz"), min_size=0, max_size=3, unique=True),
       st.integers(1, 9))
def test_alternation_never_runs_two_student_cycles_without_the_clean_calls(student, clean,
                                                                           cycles):
    order = alternation(student, clean, cycles)
    assert len(order) == cycles * (len(student) + len(clean))
    for k in range(cycles):
        cycle = order[k * (len(student) + len(clean)):(k + 1) * (len(student) + len(clean))]
        assert [name for side, name in cycle if side == "student"] == list(student)
        assert [name for side, name in cycle if side == "clean"] == list(clean)


def _rounds(us_per_call: float, jitter_us: float, count: int, seed: int) -> list[float]:
    """Round times in seconds: ``N`` calls of ``us_per_call`` plus a 3 ms protocol overhead,
    with uniform noise of +-``jitter_us`` a call."""
    import random

    rng = random.Random(seed)
    return [(3000 + N * (us_per_call + rng.uniform(-jitter_us, jitter_us))) / 1e6
            for _ in range(count)]


@SETTINGS
@given(st.floats(20, 2000), st.floats(20, 2000), st.floats(0, 30), st.integers(0, 10 ** 6))
def test_the_interval_holds_the_ratio_of_the_medians(num_us, den_us, jitter, seed):
    noop = _rounds(0, jitter, 9, seed)
    parts = {"yours": Timed(_rounds(num_us, jitter, 9, seed + 1), noop),
             "reference": Timed(_rounds(den_us, jitter, 9, seed + 2), noop)}
    limit = Limit("yours", "reference", 1.0)
    times = {name: per_call_us(t.rounds, t.noop, N) for name, t in parts.items()}
    lo, hi = bootstrap_ratio(parts, limit, N, seed=1)
    ratio = limit.ratio(times)
    assert lo <= hi
    # The point estimate lies within (or at the edge of) its own interval.
    assert lo - 1e-9 <= ratio <= hi + 1e-9 or hi == float("inf")
    # Without noise the interval is the ratio itself.
    if jitter == 0:
        assert hi - lo == pytest.approx(0, abs=1e-9)


def test_the_interval_is_the_same_for_the_same_rounds_and_seed():
    noop = _rounds(0, 20, 9, 1)
    parts = {"yours": Timed(_rounds(50, 20, 9, 2), noop),
             "chip": Timed(_rounds(50, 20, 9, 3), noop)}
    limit = Limit("yours", "chip", 3.0, ideal=1.0)
    assert bootstrap_ratio(parts, limit, N, seed=7) == bootstrap_ratio(parts, limit, N, seed=7)


def test_the_interval_narrows_when_the_noise_is_small_against_the_work():
    """The same noise a call, kernels ten times longer: a ratio's interval ten times narrower
    (relative to the ratio), which is why the trials time sizes where the work dominates."""
    def width(us):
        noop = _rounds(0, 30, 9, 11)
        parts = {"yours": Timed(_rounds(us, 30, 9, 12), noop),
                 "chip": Timed(_rounds(us, 30, 9, 13), noop)}
        lo, hi = bootstrap_ratio(parts, Limit("yours", "chip", 3.0, ideal=1.0), N, seed=0)
        return hi - lo

    assert width(300) < width(30) / 4


def test_a_ratio_with_a_subtracted_forward_uses_the_difference():
    noop = [3e-3] * 5
    parts = {"yours": Timed([3e-3 + N * 10e-6] * 5, noop),
             "reference": Timed([3e-3 + N * 100e-6] * 5, noop),
             "reference_forward": Timed([3e-3 + N * 60e-6] * 5, noop)}
    limit = Limit("yours", "reference", 1.0, minus="reference_forward")
    lo, hi = bootstrap_ratio(parts, limit, N)
    assert lo == pytest.approx(0.25) and hi == pytest.approx(0.25)


@pytest.mark.parametrize(("interval", "limit", "expected"), [
    ((0.8, 0.95), Limit("a", "b", 1.0), False), ((0.9, 1.1), Limit("a", "b", 1.0), True),
    ((1.2, 1.4), Limit("a", "b", 1.0), False), ((1.4, 1.6), Limit("a", "b", 1.5, True), True),
    ((3.0, 40.0), Limit("a", "b", 1.5, True), False)])
def test_straddles(interval, limit, expected):
    assert straddles(interval, limit) is expected


def test_margin_reads_the_way_left_to_the_threshold():
    assert Limit("a", "b", 3.0, ideal=1.0).margin(2.0) == pytest.approx(0.5)
    assert Limit("a", "b", 1.0).margin(0.25) == pytest.approx(0.75)
    assert Limit("a", "b", 1.5, at_least=True, ideal=3.0).margin(35.0) > 1
    assert Limit("a", "b", 1.0).margin(1.2) < 0


# -- the judge: a straddling verdict is measured again, a clear one is not ---------------------
def _fake_measure(queue: list):
    """A stand-in for one measurement: the next rounds of ``queue`` for "yours" and "chip"."""
    def measure(submission, spec, checker, present, rounds, timeout):
        yours, chip = queue.pop(0)
        noop = [3e-3] * len(yours)
        phases = {"before": {"noop": noop, "chip": chip}, "between": {}, "after": {}}
        return {"student": {"yours": yours}, "child_noop": [noop, noop], "phases": phases}
    return measure


def _judge(monkeypatch, queue, repeat: int = 1):
    calls = []
    measure = _fake_measure(queue)

    def counted(*args, **kwargs):
        calls.append(1)
        return measure(*args, **kwargs)

    monkeypatch.setattr(speedjudge, "_measure", counted)
    monkeypatch.setattr(speedjudge, "device_bandwidth_gbs", lambda: None)
    spec = speedjudge.forward_spec(types.SimpleNamespace(
        shapes=((4, 4),), B=1, Q=2, M=1, D=2, K=1, loc_lo=0.0, loc_hi=1.0), "float32",
        fn="msda_forward", n=N)
    records = []
    fake = types.SimpleNamespace(job=types.SimpleNamespace(speed_repeat=repeat, timeout=5),
                                 record_speed=records.append)
    measured = speedjudge.judge_speed(fake, spec, truth=None, close=None,
                                      baselines={"chip": lambda *a: None}, rounds=5,
                                      limits=[Limit("yours", "chip", 3.0, ideal=1.0)])
    return measured, len(calls), records


def _round_times(us: list[float]) -> list[float]:
    return [3e-3 + N * u / 1e6 for u in us]


def test_a_clear_verdict_is_measured_once(monkeypatch):
    queue = [(_round_times([50, 52, 49, 51, 50]), _round_times([50, 51, 50, 49, 52]))]
    measured, calls, records = _judge(monkeypatch, queue)
    assert calls == 1 and measured["attempts"] == 1
    (verdict,) = measured["verdicts"]
    assert verdict["passes"] and not verdict["straddles"]
    assert verdict["interval"][0] <= verdict["value"] <= verdict["interval"][1]
    assert records[0]["verdicts"] == measured["verdicts"]


def test_a_straddling_verdict_is_measured_again_on_pooled_rounds(monkeypatch):
    """Rounds whose ratio's interval holds 3 are measured again; once the pooled rounds are
    clear, the judge stops, and the rounds of both measurements count."""
    noisy = (_round_times([40, 400, 45, 380, 42]), _round_times([30, 20, 140, 25, 120]))
    clear = (_round_times([50] * 5), _round_times([50] * 5))
    measured, calls, _ = _judge(monkeypatch, [noisy, clear, clear])
    assert calls >= 2
    assert measured["rounds"] == 5 * calls
    assert not measured["verdicts"][0]["straddles"] or calls == speedjudge.RETRIES + 1


def test_the_retries_are_bounded(monkeypatch):
    noisy = (_round_times([40, 400, 45, 380, 42]), _round_times([30, 20, 140, 25, 120]))
    measured, calls, _ = _judge(monkeypatch, [noisy] * 10)
    assert calls == speedjudge.RETRIES + 1 == measured["attempts"]


def test_a_repeat_keeps_every_trial(monkeypatch):
    queue = [(_round_times([50] * 5), _round_times([50] * 5))] * 3
    measured, calls, records = _judge(monkeypatch, queue, repeat=3)
    assert calls == 3 and len(records) == 3
    assert all(r["status"] == "timed" for r in records)


def test_the_baseline_counts_at_its_fastest_phase():
    """A child that loads the device while it is not timed slows the rounds that alternate
    with its own: the baseline then counts at its clean phase."""
    noop = [3e-3] * 5
    samples = {"student": {"yours": _round_times([50] * 5)}, "child_noop": [noop, noop],
               "phases": {"before": {"noop": noop, "chip": _round_times([50] * 5)},
                          "between": {"noop": noop, "chip": _round_times([500] * 5)},
                          "after": {"noop": noop, "chip": _round_times([55] * 5)}}}
    _, per_call, _ = speedjudge._estimate(samples, N, ["yours"], {"chip": None})
    assert per_call["chip"] == pytest.approx(50)
    assert statistics.median(samples["phases"]["between"]["chip"]) > 0
