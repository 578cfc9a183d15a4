"""The speed helper lab tests call: the judge's checks on a timing, and the timing's shape."""

import math
import sys

import pytest
import torch

from msda_labs.gpu.speed import DEFAULT_LIMIT, check_speed, chip_function, race, speed_line


def _timing(yours=30.0, base=20.0, **extra):
    ratio = yours / base if isinstance(base, float) and isinstance(yours, float) else None
    data = {"yours_us": yours, "baseline_us": base, "ratio": ratio, "method": "cuda-graph",
            "reps": 30, "baseline": "chip", "device": "NVIDIA H200", "flushed_l2": True}
    data.update(extra)
    return data


class _Session:
    def __init__(self):
        self.notes = []


class _Submission:
    def __init__(self):
        self._session = _Session()


def test_within_the_limit_passes_and_the_ratio_is_reported():
    sub = _Submission()
    line = check_speed(_timing(), what="msda_forward on the decoder preset", submission=sub)
    assert sub._session.notes == [line]
    for part in ("yours 30.0 us", "the chip's 20.0 us", "1.50x its time", f"{DEFAULT_LIMIT:g}x",
                 "median of 30 cuda-graph runs", "L2 flushed", "NVIDIA H200"):
        assert part in line, line


def test_too_slow_fails_with_the_numbers_and_still_notes_them():
    sub = _Submission()
    with pytest.raises(AssertionError) as info:
        check_speed(_timing(yours=400.0), what="msda_forward", submission=sub)
    message = str(info.value)
    assert message.startswith("too slow: speed of msda_forward: yours 400.0 us"), message
    assert "20.00x its time (passes up to 3x" in message
    assert sub._session.notes and sub._session.notes[0] in message
    check_speed(_timing(yours=400.0), what="msda_forward", limit=25)  # a looser limit


@pytest.mark.parametrize("bad", [None, 3.5, {"yours_us": 1.0}, _timing(method="guess"),
                                 _timing(yours=float("nan")), _timing(yours=-1.0),
                                 _timing(yours=0.0), _timing(base="fast")])
def test_malformed_timings_fail(bad):
    with pytest.raises(AssertionError, match="not timed"):
        check_speed(bad, what="x")


def test_a_fast_wrong_answer_earns_nothing():
    timing = _timing(yours=1.0, yours_out=torch.zeros(4), baseline_out=torch.ones(4))
    with pytest.raises(AssertionError, match="checked against the chip before timing"):
        check_speed(timing, what="msda_forward", dtype=torch.float32)
    timing["yours_out"] = torch.ones(4)
    check_speed(timing, what="msda_forward", dtype=torch.float32)


def test_no_baseline_is_a_failure_unless_allowed():
    timing = _timing(base=None, baseline=None)
    with pytest.raises(AssertionError, match="no baseline"):
        check_speed(timing, what="x")
    assert "no baseline to compare with" in check_speed(timing, what="x", require_baseline=False)


def test_race_without_cuda_falls_back_to_wall_clock_and_says_so():
    if torch.cuda.is_available():
        pytest.skip("checks the fallback used where there is no CUDA device")
    x = torch.arange(1000, dtype=torch.float32)
    measured = race(lambda: x * 2, lambda: torch.mul(x, 2), reps=5, warmup=1)
    assert measured["method"] == "wall-clock" and measured["device"] == "cpu"
    assert measured["yours_us"] > 0 and measured["baseline_us"] > 0
    assert math.isclose(measured["ratio"], measured["yours_us"] / measured["baseline_us"])
    assert torch.equal(measured["yours_out"], x * 2)
    assert "plumbing only" in speed_line(measured, what="x")
    alone = race(lambda: x * 2, None, reps=3, warmup=0, outputs=False)
    assert alone["ratio"] is None and "yours_out" not in alone


def test_the_chip_baseline_is_a_private_copy():
    fn = chip_function("lab01", "bilinear_sample")
    assert fn is not None
    import msda_labs.chips.lab01 as shared_chip

    assert fn is not shared_chip.bilinear_sample
    assert fn.__module__ == "_msda_speed_baseline_lab01" and fn.__module__ in sys.modules
    assert chip_function("lab77", "anything") is None  # a chip this copy does not carry
