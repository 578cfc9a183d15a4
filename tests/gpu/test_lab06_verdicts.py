"""Lab 06's GPU verdicts, proved without a GPU: made-up timings fed to the judge's rules.

The GPU stage of lab 06 races the channel tilings, times the wide launch against the chip and
the autotuned launch against the fixed one; the probes that time them need CUDA, the rules that
judge the numbers (judge_lab06.py) do not.
"""

from pathlib import Path

import pytest
from kit import FakeSubmission, load_file_module

from msda_labs.truth.cases import DECODER

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def judge():
    path = ROOT / "lab-06-make-it-fast" / "tests" / "judge_lab06.py"
    return load_file_module(path, "_verdicts_judge_lab06")


def _measured(times, e2e=None, **extra):
    data = {"times_us": times, "method": "cuda-graph", "reps": 30, "device": "NVIDIA H200",
            "flushed_l2": True, "outputs": {}}
    if e2e is not None:
        data["e2e_us"] = e2e
    data.update(extra)
    return data


def test_the_race_reports_every_width_and_needs_the_wide_tiling_to_win(judge, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("MSDA_ARTIFACTS_DIR", str(tmp_path))
    chunks = (2, 4, 8, 16, 32)
    sub = FakeSubmission()
    judge.race_verdict(sub, _measured({"2": 80.0, "4": 40.0, "8": 20.0, "16": 12.0,
                                       "32": 10.0}), DECODER, chunks)
    (note,) = sub.notes
    assert "wide CHUNK_D=32 10.0 us, narrow CHUNK_D=2 80.0 us, wide is 8.00x faster" in note
    assert "CHUNK_D=32: 10.0 us, 4086 GB/s" in note  # 40,857,600 bytes in 10 us
    assert (tmp_path / "lab06-race.json").is_file()
    with pytest.raises(AssertionError, match="win the race by at least 1.5x, and it won by 1.10x"):
        judge.race_verdict(FakeSubmission(), _measured({"2": 11.0, "4": 11.0, "8": 10.5, "16": 10.0,
                                                     "32": 10.0}), DECODER, chunks)


def test_the_wide_launch_passes_within_three_times_the_chip(judge):
    chip = "the lab06 chip's msda_forward_chunked"
    sub = FakeSubmission()
    judge.wide_speed_verdict(sub, _measured({"yours": 12.0, "chip": 10.0},
                                            {"yours": 30.0, "chip": 25.0}, baseline=chip))
    assert "yours 12.0 us vs the lab06 chip's msda_forward_chunked 10.0 us = 1.20x" in \
        sub.notes[0]
    with pytest.raises(AssertionError, match="10.00x the chip's device time"):
        judge.wide_speed_verdict(FakeSubmission(), _measured(
            {"yours": 100.0, "chip": 10.0}, {"yours": 30.0, "chip": 25.0}, baseline=chip))
    with pytest.raises(AssertionError, match="4.00x the chip's end-to-end time per call"):
        judge.wide_speed_verdict(FakeSubmission(), _measured(
            {"yours": 12.0, "chip": 10.0}, {"yours": 100.0, "chip": 25.0}, baseline=chip))


def _tuned(autotuned=12.0, e2e_autotuned=40.0, n_configs=6, chip=True):
    times = {"autotuned": autotuned, "fixed": 11.0}
    e2e = {"autotuned": e2e_autotuned, "fixed": 30.0}
    if chip:
        times["chip"], e2e["chip"] = 10.0, 25.0
    return _measured(times, e2e, baseline="the lab06 chip's msda_forward_autotuned",
                     best_config={"kwargs": {"BLOCK_Q": 32}, "num_warps": 4},
                     n_configs=n_configs)


def test_the_autotuned_launch_is_judged_against_the_fixed_one_and_the_chip(judge):
    sub = FakeSubmission()
    judge.autotune_speed_verdict(sub, _tuned())
    assert "best config BLOCK_Q=32, num_warps=4, 6 configs" in sub.notes[0]
    judge.autotune_speed_verdict(FakeSubmission(), _tuned(chip=False))  # no chip: no e2e bound
    with pytest.raises(AssertionError, match="holds 5 configs"):
        judge.autotune_speed_verdict(FakeSubmission(), _tuned(n_configs=5))
    with pytest.raises(AssertionError, match="2.73x the device time of your fixed"):
        judge.autotune_speed_verdict(FakeSubmission(), _tuned(autotuned=30.0))
    with pytest.raises(AssertionError, match="chip's end-to-end time per call"):
        judge.autotune_speed_verdict(FakeSubmission(), _tuned(e2e_autotuned=100.0))



def test_the_chip_baseline_is_the_first_chip_this_copy_carries(judge, monkeypatch):
    """Both speed tests time the chip's fixed wide launch in the judge: the lab 06 chip where the
    kit has it, else the lab 05 chip (an exported lab 06), else none, said so."""
    from msda_labs.grading.judge import baseline

    carried = {"lab05": "lab 05's forward"}
    monkeypatch.setattr(baseline, "chip_function", lambda lab, name: carried.get(lab))
    assert judge.chip_baseline() == ("lab 05's forward", "the lab05 chip's msda_forward")
    carried["lab06"] = "lab 06's wide launch"
    assert judge.chip_baseline() == ("lab 06's wide launch",
                                     "the lab06 chip's msda_forward_chunked")
    carried.clear()
    chip, why = judge.chip_baseline()
    assert chip is None and "no chip" in why


# -- the three GPU speed tests, end to end, with the judge's clock made up ------------------------
@pytest.fixture
def lab06_gpu_tests(tmp_path, monkeypatch):
    """Lab 06's test module with the judge's clock replaced by one that answers what the real
    one would for the variants and baselines it is given (the wide tiling 10 times as fast as
    the narrow one; the chip as fast as yours), and a chip present."""
    from msda_labs.grading.judge import speedjudge

    monkeypatch.setenv("MSDA_ARTIFACTS_DIR", str(tmp_path))
    tests = load_file_module(ROOT / "lab-06-make-it-fast" / "tests" / "test_lab06_fast.py",
                             "_verdicts_test_lab06", beside=True)
    clocked = []

    def clock(submission, case, dtype_name, *, variants, baselines, **kwargs):
        clocked.append((case, dtype_name, sorted(variants), sorted(
            name for name, fn in baselines.items() if fn is not None)))
        times = {name: 1000.0 if name == "2" else 100.0 for name in variants}
        times.update({name: 100.0 for name, fn in baselines.items() if fn is not None})
        return {"times_us": times, "method": "judge-clock", "device": "a GPU", "rounds": 9,
                "n": 16}

    monkeypatch.setattr(speedjudge, "judge_msda_speed", clock)
    monkeypatch.setattr(tests.judge, "chip_baseline", lambda: (
        lambda *inputs: None, "the lab06 chip's msda_forward_chunked"))
    return tests, clocked


def test_the_gpu_speed_tests_read_what_the_judges_clock_returns(lab06_gpu_tests):
    import torch

    tests, clocked = lab06_gpu_tests
    right = tests.judge.reference(DECODER, torch.float16).half()
    tests.test_gpu_race_wide_beats_narrow(FakeSubmission())
    tests.test_gpu_speed_against_chip(FakeSubmission({"out": right}))
    tuned = FakeSubmission({"out": right, "n_configs": 6, "best_config": {
        "kwargs": {"BLOCK_Q": 16}, "num_warps": 2, "num_stages": 3}})
    tests.test_gpu_autotuned_vs_fixed_and_chip(tuned)
    speed = tests.SPEED_CASE
    assert clocked == [
        (speed, "float16", ["16", "2", "32", "4", "8"], []),  # a race of your own launches
        (speed, "float16", ["yours"], ["chip"]),
        (speed, "float16", ["autotuned", "fixed"], ["chip"]),
    ]
    assert "best config BLOCK_Q=16, num_warps=2" in tuned.notes[-1]
