"""The one timing API (msda_labs.grading.speed.timing) and the byte counts that turn times into
GB/s.

Byte counts, argument checks, the refusal without CUDA, the wall-clock plumbing and the judge's
verdict on made-up timings run anywhere; the device timings themselves only where there is a
CUDA GPU. Each lab's own speed test is proved in tests/gpu/test_reference_speed.py.
"""

import math
import sys
import time

import pytest
import torch
from kit import FakeSubmission, made_up_timing

from msda_labs.grading.judge import bandwidth
from msda_labs.grading.speed import timing
from msda_labs.grading.speed.timing import REFERENCE_LIMIT, check_reference_speed
from msda_labs.truth.cases import DECODER

NO_CUDA = not torch.cuda.is_available()


# -- bytes and bandwidth --------------------------------------------------------------------------
def test_forward_bytes_decoder_fp16_matches_the_hand_count():
    c = DECODER
    samples = c.B * c.Q * c.M * c.L * c.K
    assert samples == 153_600
    corners = samples * 4 * c.D * 2
    params = samples * 3 * 2
    output = c.B * c.Q * c.M * c.D * 2
    assert (corners, params, output) == (39_321_600, 921_600, 614_400)
    assert bandwidth.forward_bytes(c.B, c.Q, c.M, c.D, c.L, c.K, 2) == 40_857_600


@pytest.mark.parametrize("dims", [(1, 1, 1, 1, 1, 1, 4), (2, 5, 3, 7, 2, 3, 4),
                                  (3, 17, 2, 24, 1, 1, 2)])
def test_forward_bytes_is_linear_in_each_part(dims):
    B, Q, M, D, L, K, itemsize = dims
    expected = (B * Q * M * L * K * (4 * D + 3) + B * Q * M * D) * itemsize
    count = bandwidth.forward_bytes
    assert count(B, Q, M, D, L, K, itemsize) == expected
    # fp32 is exactly twice fp16, and zero queries move nothing.
    assert count(B, Q, M, D, L, K, 4) == 2 * count(B, Q, M, D, L, K, 2)
    assert count(B, 0, M, D, L, K, itemsize) == 0


@pytest.mark.parametrize("bad", [-1, 2.0, True, None])
def test_forward_bytes_rejects_non_counts(bad):
    with pytest.raises(ValueError):
        bandwidth.forward_bytes(1, bad, 1, 1, 1, 1, 2)


def test_effective_bandwidth_units():
    # 1 GB in 1 ms is 1000 GB/s; 40,857,600 bytes in 13.6 us is about 3 TB/s.
    assert bandwidth.effective_bandwidth_gbs(1e9, 1000.0) == pytest.approx(1000.0)
    assert bandwidth.effective_bandwidth_gbs(40_857_600, 13.6) == pytest.approx(3004.2, rel=1e-4)
    assert bandwidth.effective_bandwidth_gbs(0, 5.0) == 0.0
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            bandwidth.effective_bandwidth_gbs(100, bad)
    with pytest.raises(ValueError):
        bandwidth.effective_bandwidth_gbs(-1, 1.0)


def test_bandwidth_table_prints_the_formula():
    text = bandwidth.bandwidth_table({"2": 80.0, "32": 10.0}, 40_857_600, label="CHUNK_D")
    assert "CHUNK_D" in text and "4085.8" in text and "510.7" in text
    assert "B*Q*M*L*K*(4*D + 3)*itemsize" in text


# -- anywhere: refusals, argument checks, wall-clock plumbing -------------------------------------
@pytest.mark.skipif(not NO_CUDA, reason="checks the refusal on a CPU-only machine")
def test_device_timing_refuses_politely_without_cuda():
    calls = []
    with pytest.raises(timing.BenchUnavailable, match="needs a CUDA GPU") as info:
        timing.side_by_side({"a": lambda: calls.append(1)})
    assert "interpreter" in str(info.value) and "-gpu" in str(info.value)
    with pytest.raises(timing.BenchUnavailable):
        timing.end_to_end({"a": lambda: calls.append(1)})
    assert calls == [], "nothing may run when there is no device to time it on"


@pytest.mark.parametrize("kwargs", [{"reps": 0}, {"warmup": -1}, {"inner": 0}, {"reps": True},
                                    {"method": "wallclock"}])
def test_timing_rejects_bad_arguments_before_looking_for_a_device(kwargs):
    with pytest.raises(ValueError):
        timing.side_by_side({"a": lambda: None}, **kwargs)


@pytest.mark.skipif(not NO_CUDA, reason="checks the fallback used where there is no CUDA device")
def test_race_all_without_cuda_is_wall_clock_and_keeps_first_outputs():
    x = torch.arange(1000, dtype=torch.float32)
    calls = {"yours": 0}

    def yours():
        calls["yours"] += 1
        return x * 2, x + 1

    measured = timing.race_all({"yours": yours, "reference": lambda: x * 2, "chip": None},
                               reps=4, warmup=1, with_end_to_end=True)
    assert measured["method"] == "wall-clock" and measured["device"] == "cpu"
    assert set(measured["times_us"]) == {"yours", "reference"} == set(measured["e2e_us"])
    assert all(us > 0 and math.isfinite(us) for us in measured["times_us"].values())
    assert list(measured["outputs"]) == ["yours"]  # only the names in keep come back
    first = measured["outputs"]["yours"]
    assert isinstance(first, tuple) and torch.equal(first[0], x * 2)
    assert calls["yours"] == 1 + 1 + 4 + 1 + 5 * 50  # first, warm-up, reps, e2e warm-up, e2e
    assert "plumbing only" in timing.how_timed(measured)


def test_race_all_times_the_slower_call_longer():
    if not NO_CUDA:
        pytest.skip("wall-clock check for machines without CUDA")
    measured = timing.race_all({"yours": lambda: time.sleep(0.002), "reference": lambda: None},
                               reps=3, warmup=0)
    assert measured["times_us"]["yours"] > 1500 > measured["times_us"]["reference"]


def test_the_chip_baseline_is_a_private_copy():
    from msda_labs.grading.judge.baseline import chip_function

    fn = chip_function("lab01", "bilinear_sample")
    assert fn is not None
    import msda_labs.chips.lab01 as shared_chip

    assert fn is not shared_chip.bilinear_sample
    assert fn.__module__ == "_msda_speed_baseline_lab01" and fn.__module__ in sys.modules
    assert chip_function("lab77", "anything") is None  # a chip this copy does not carry


def test_add_note_adds_once_and_ignores_a_submission_without_notes():
    sub = FakeSubmission()
    timing.add_note(sub, "speed of x: yours 1.0 us")
    timing.add_note(sub, "speed of x: yours 1.0 us")
    assert sub.notes == ["speed of x: yours 1.0 us"]
    timing.add_note(object(), "nowhere to go")  # no notes: nothing happens, nothing raises


# -- the judge: check_reference_speed on made-up timings -----------------------------------------
def test_a_kernel_faster_than_the_reference_passes_and_both_ratios_are_reported():
    sub = FakeSubmission()
    line = check_reference_speed(made_up_timing(), what="msda_forward",
                                 chip_label="the lab 05 chip", submission=sub)
    assert sub.notes == [line]
    for part in ("yours 13.0 us", "the PyTorch reference (grid_sample) 70.0 us", "0.19x its time",
                 f"passes up to {REFERENCE_LIMIT:g}x", "the lab 05 chip 12.5 us",
                 "1.04x its time (reported, not graded)", "median of 30 cuda-graph runs",
                 "L2 flushed", "NVIDIA H200"):
        assert part in line, line


def test_slower_than_the_reference_fails_and_is_still_noted():
    sub = FakeSubmission()
    with pytest.raises(AssertionError) as info:
        check_reference_speed(made_up_timing(yours=2013.0), what="msda_forward", submission=sub)
    message = str(info.value)
    assert message.startswith("too slow: speed of msda_forward: yours 2013.0 us"), message
    assert "28.76x its time (passes up to 1x)" in message and "161.04x" in message
    assert sub.notes and sub.notes[0] in message


def test_the_chip_ratio_is_never_graded():
    # Slower than the chip by far, faster than the reference: passes.
    check_reference_speed(made_up_timing(yours=60.0, chip=5.0), what="x")
    # Without the chip (an exported lab): the same grade, and the report says why there is no
    # chip ratio.
    line = check_reference_speed(made_up_timing(chip=None), what="x", chip_label="the lab 05 chip")
    assert "the lab 05 chip is not in this copy of the kit" in line
    with pytest.raises(AssertionError, match="too slow"):
        check_reference_speed(made_up_timing(yours=80.0, chip=None), what="x")


def test_a_backward_reference_is_its_forward_and_backward_less_its_forward():
    measured = made_up_timing(yours=50.0, reference=260.0, chip=45.0, reference_forward=60.0)
    line = check_reference_speed(measured, what="msda_backward")
    assert "200.0 us (its forward + backward 260.0 us minus its forward alone 60.0 us)" in line
    assert "0.25x its time" in line
    with pytest.raises(AssertionError, match="too slow"):
        check_reference_speed(made_up_timing(yours=210.0, reference=260.0, reference_forward=60.0),
                              what="msda_backward")
    with pytest.raises(AssertionError, match="not timed: the reference's forward"):
        check_reference_speed(made_up_timing(reference=60.0, reference_forward=61.0), what="x")


@pytest.mark.parametrize("bad", [None, {"yours_us": 1.0}, made_up_timing(method="guess"),
                                 {"times_us": {"yours": 1.0}, "method": "cuda-graph"},
                                 made_up_timing(yours=float("nan")), made_up_timing(yours=0.0),
                                 made_up_timing(reference=-3.0), made_up_timing(chip="fast"),
                                 made_up_timing(yours=True)])
def test_malformed_timings_fail(bad):
    with pytest.raises(AssertionError, match="not timed"):
        check_reference_speed(bad, what="x")


def test_a_capture_that_fails_gives_its_memory_back_before_the_fallback(monkeypatch):
    # A capture that runs out of memory leaves its private pool reserved until the graphs are
    # collected and the cache emptied; the fallback to events needs that memory.
    calls = []

    def capture(fn, inner):
        calls.append("capture")
        raise torch.OutOfMemoryError("CUDA out of memory (a stand-in)")

    monkeypatch.setattr(timing, "_capture", capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    assert timing._graphs({"fn": lambda: None}, None, 10) is None
    assert calls == ["capture", "synchronize", "empty_cache"]


# -- on a CUDA GPU --------------------------------------------------------------------------------
@pytest.mark.skipif(NO_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", ["cuda-graph", "cuda-events"])
def test_timing_orders_small_and_large_work(method):
    small = torch.randn(1 << 22, device="cuda")  # 16 MiB: about 10 us, well above the noise
    large = torch.randn(1 << 26, device="cuda")  # 256 MiB
    res = timing.side_by_side({"small": lambda: small.mul_(1.0),
                               "large": lambda: large.mul_(1.0)}, reps=10, method=method)
    assert res["small"].method == method
    assert 0 < res["small"].us < res["large"].us
    # 256 MiB read and written: well above a microsecond, well below a second.
    assert 10 < res["large"].us < 1e6


@pytest.mark.skipif(NO_CUDA, reason="needs a CUDA GPU")
def test_auto_falls_back_to_events_when_capture_fails():
    x = torch.randn(1024, device="cuda")
    res = timing.side_by_side({"fn": lambda: x.sum().item()}, reps=3)["fn"]  # .item() syncs
    assert res.method == "cuda-events" and res.us > 0


@pytest.mark.skipif(NO_CUDA, reason="needs a CUDA GPU")
def test_end_to_end_sees_host_waits_that_graphs_do_not():
    x = torch.randn(1 << 16, device="cuda")

    def sleepy():
        x.mul_(1.0)
        if not torch.cuda.is_current_stream_capturing():
            time.sleep(0.002)

    e2e = timing.end_to_end({"plain": lambda: x.mul_(1.0), "sleepy": sleepy}, reps=5, rounds=3)
    assert e2e["sleepy"] > 2000 > e2e["plain"] > 0
    measured = timing.race_all({"plain": lambda: x.mul_(1.0), "sleepy": sleepy}, keep=(),
                               reps=5, with_end_to_end=True)
    assert measured["e2e_us"]["sleepy"] > 2000 and measured["method"] in ("cuda-graph",
                                                                          "cuda-events")


def test_the_judge_adds_its_own_baseline_times_with_the_childs_method():
    if not NO_CUDA:
        pytest.skip("wall-clock check for machines without CUDA")
    from msda_labs.grading.judge.baseline import with_baselines

    child = timing.race_all({"yours": lambda: None}, reps=3, warmup=0)
    child["times_us"]["reference"] = 1e-9  # a forged baseline from the child is replaced
    merged = with_baselines(child, {"reference": lambda: time.sleep(0.002), "chip": None})
    assert set(merged["times_us"]) == {"yours", "reference"}
    assert merged["times_us"]["reference"] > 1500 and merged["method"] == "wall-clock"
    assert with_baselines("not a timing", {"reference": lambda: None}) == "not a timing"
