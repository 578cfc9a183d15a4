"""Speed tests against the PyTorch reference, proved without a GPU.

The GPU stages of labs 05, 08 and 10 grade speed against the grid_sample reference (every copy of
the kit carries it) and only report the ratio against the lab's own chip (an exported lab does
not carry it), on the judge's clock. Here: that each is a GPU test worth its points, and lab
10's checks of the timed step and its messages on made-up timings (its graded time stubbed). The
judge's clock itself, with every lab's speed test run through real children on the CPU, is
proved in tests/grading/test_speedjudge.py; the judge's helper (check_reference_speed) in
tests/grading/test_timing.py.
"""

import types
from pathlib import Path

import pytest
import torch
from kit import FakeSubmission, load_file_module, made_up_timing

from msda_labs.grading.speed.timing import REFERENCE_LIMIT
from msda_labs.truth.cases import DEVICE_BOUND, MULTI_LEVEL

ROOT = Path(__file__).resolve().parents[2]


def _load_lab_tests(folder: str, name: str) -> types.ModuleType:
    path = ROOT / folder / "tests" / name
    return load_file_module(path, f"_speed_{path.stem}", beside=True)


def _assert_a_gpu_speed_test_worth_two_points(test, task: str) -> None:
    marks = {m.name: m for m in test.pytestmark}
    assert marks["stage"].args == ("gpu",)
    assert marks["task"].args == (task,) and marks["task"].kwargs["points"] == 2


def _assert_a_wrong_part_then_a_missing_part_fail(speed_test, timing, parts, wrong, missing):
    """The speed test fails with ``wrong`` when one of the timed call's ``parts`` is off, and
    with ``missing`` when the last part is left out."""
    timing["outputs"]["yours"] = tuple(parts)
    with pytest.raises(AssertionError, match=wrong):
        speed_test(FakeSubmission(timing))
    timing["outputs"]["yours"] = tuple(parts[:-1])
    with pytest.raises(AssertionError, match=missing):
        speed_test(FakeSubmission(timing))


# -- lab 05 --------------------------------------------------------------------------------------

def _module(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def lab05():
    return _load_lab_tests("lab-05-forward-correct", "test_lab05_forward.py")


def test_lab05_speed_test_is_a_gpu_test_worth_points(lab05):
    _assert_a_gpu_speed_test_worth_two_points(lab05.test_forward_speed_against_the_reference, "5.8")
    # at the encoder's size, where the kernel and not the protocol's overhead is the time
    assert lab05.SPEED_CASE == DEVICE_BOUND and lab05.SPEED_CASE.Q * lab05.SPEED_CASE.B > 40_000
    assert lab05.SPEED_LIMIT == REFERENCE_LIMIT


# Lab 05's speed test is timed on the judge's clock; it is proved through real children, with
# honest and attacking submissions, in tests/grading/test_speedjudge.py.


# -- lab 08 --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab08():
    return _load_lab_tests("lab-08-concurrent-writes", "test_lab08_atomics.py")


def test_lab08_speed_test_is_a_gpu_test_worth_points(lab08):
    _assert_a_gpu_speed_test_worth_two_points(lab08.test_backward_speed_against_the_reference,
                                              "8.4")
    assert lab08.SPEED_CASE.id == "decoder" and lab08.SPEED_DTYPE == "float32"


# Lab 08's speed test is timed on the judge's clock; it runs through a real child on the CPU in
# tests/grading/test_speedjudge.py.


# -- lab 10 --------------------------------------------------------------------------------------

OPERATOR_STANDIN = '''
from msda_labs.truth.reference import msda_reference


def msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, *,
         fp32_grad_accum=None):
    return msda_reference(value, spatial_shapes.cpu(), sampling_locations, attention_weights)
'''


@pytest.fixture(scope="module")
def lab10():
    """Lab 10's Task 10.4 tests, the speed test among them (test_lab10_suite.py)."""
    return _load_lab_tests("lab-10-ship-it", "test_lab10_suite.py")


def _lab10_reference(case):
    """The fp32 output and gradients lab 10's judge compares with (judge_lab10.py)."""
    return _load_lab_tests("lab-10-ship-it", "judge_lab10.py").reference(case, "float32")


def _step_timing(module, yours=180.0, chip=170.0, case=MULTI_LEVEL, **kwargs):
    timing = made_up_timing(yours=yours, reference=400.0, chip=chip, method="cuda-events", **kwargs)
    out, grads = _lab10_reference(case)
    timing["outputs"]["yours"] = (out.contiguous(), *(g.contiguous() for g in grads))
    timing["launched"] = {"forward": ["msda_forward_tiles_kernel"],
                          "backward": ["msda_backward_rows_kernel"]}
    return timing


@pytest.fixture
def made_up_lab10(lab10, monkeypatch):
    """Lab 10's suite fed made-up timings, its untimed step checked on a small case."""
    monkeypatch.setattr(lab10, "CHECK_CASE", MULTI_LEVEL)
    # The graded time comes from the judge's clock (proved in tests/grading/test_speedjudge.py):
    # here it reads the same made-up times.
    monkeypatch.setattr(lab10, "judge_msda_speed", lambda submission, *a, **k: {
        **submission.result, "method": "judge-clock", "n": 16, "overhead_us": 5.0})
    return lab10


def test_lab10_speed_test_is_a_gpu_test_worth_points(lab10):
    _assert_a_gpu_speed_test_worth_two_points(lab10.test_gpu_speed_against_the_reference, "10.4")
    # checked at the decoder's size, timed at the encoder's, where the step and not the
    # protocol's overhead is the time
    assert lab10.CHECK_CASE.id == "decoder" and lab10.SPEED_DTYPE == "float32"
    assert lab10.SPEED_CASE == DEVICE_BOUND


def test_lab10_right_and_fast_passes_with_or_without_the_chip(made_up_lab10):
    lab10 = made_up_lab10
    sub = FakeSubmission(_step_timing(lab10), lab="lab10")
    lab10.test_gpu_speed_against_the_reference(sub)
    (note,) = sub.notes  # the judge's clock only: nothing timed in your process is reported
    assert "the same step of the PyTorch reference (grid_sample, autograd) 400.0 us" in note
    assert "0.45x its time" in note and "the lab 10 chip 170.0 us = 1.06x" in note
    assert "the judge's clock" in note and "encoder" in note
    sub = FakeSubmission(_step_timing(lab10, chip=None), lab="lab10")
    lab10.test_gpu_speed_against_the_reference(sub)
    assert "the lab 10 chip is not in this copy of the kit" in sub.notes[-1]


def test_lab10_slow_fails_on_speed(made_up_lab10):
    lab10 = made_up_lab10
    with pytest.raises(AssertionError, match="^too slow: speed of msda forward"):
        lab10.test_gpu_speed_against_the_reference(
            FakeSubmission(_step_timing(lab10, yours=4400.0), lab="lab10"))


@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_lab10_fast_and_wrong_fails_on_the_step(made_up_lab10, which):
    lab10 = made_up_lab10
    timing = _step_timing(lab10, yours=1.0)
    parts = list(timing["outputs"]["yours"])
    parts[which] = parts[which].clone()
    parts[which].view(-1)[0] += 1.0
    _assert_a_wrong_part_then_a_missing_part_fail(
        lab10.test_gpu_speed_against_the_reference, timing, parts,
        wrong="the step that is timed", missing="expected the output and three gradients")


def test_lab10_step_probe_plumbing_on_the_cpu(lab10, monkeypatch):
    """The untimed step comes back whole from a torch stand-in; that stand-in then fails the
    speed test on the exam's rule that the lab's kernels run, before any clock."""
    measured = lab10.probes.step_probe(_module(OPERATOR_STANDIN, "standin_lab10"), MULTI_LEVEL,
                                       "float32")
    assert set(measured) == {"outputs", "launched"}  # nothing timed in the student's process
    assert measured["launched"] == {"forward": [], "backward": []}  # a torch stand-in
    out, *grads = measured["outputs"]["yours"]
    ref_out, ref_grads = _lab10_reference(MULTI_LEVEL)
    torch.testing.assert_close(out, ref_out)
    for got, ref in zip(grads, ref_grads):
        torch.testing.assert_close(got, ref)

    monkeypatch.setattr(lab10, "CHECK_CASE", MULTI_LEVEL)
    monkeypatch.setattr(lab10, "judge_msda_speed", lambda *a, **k: pytest.fail("timed"))
    with pytest.raises(AssertionError, match="launched no Triton kernel"):
        lab10.test_gpu_speed_against_the_reference(FakeSubmission(module=_module(
            OPERATOR_STANDIN, "standin_lab10_again")))
