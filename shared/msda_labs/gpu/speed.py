"""Speed of the student's operator against the chip, measured side by side in one run.

The timing runs where the student's code runs (the probe's child process, see
:mod:`msda_labs.grading.executor`); the judge checks the numbers. In a lab's test module::

    from msda_labs.gpu.speed import check_speed

    def _forward_speed(module, case, dtype):            # the probe: module level
        from msda_labs.gpu.speed import chip_function, race

        inputs = make_inputs(case, dtype, "cuda")
        chip = chip_function("lab05", "msda_forward")  # None where the kit lacks that chip
        return race(lambda: module.msda_forward(*inputs), lambda: chip(*inputs))

    @pytest.mark.stage("gpu")
    @pytest.mark.task("5.5", points=2)
    def test_forward_speed_against_the_chip(submission):
        measured = submission.run(_forward_speed, DECODER, torch.float16)
        check_speed(measured, what=f"msda_forward on {DECODER.describe()} in fp16",
                    dtype=torch.float16, submission=submission)

How a time is taken is :func:`msda_labs.gpu.bench.side_by_side`: device time, the median of
CUDA-graph replays (CUDA events where a call cannot be captured), the L2 cache flushed before
every call, the two variants alternating repetition by repetition. The first call of each
(compilation, autotuning) is not timed; its output is returned so that the judge first checks
that the student's result equals the chip's: a fast wrong answer earns nothing.

The pass threshold is generous (:data:`DEFAULT_LIMIT`: three times the chip's time) and the
ratio is always reported, passed or not (a note in the report). Without CUDA the numbers fall
back to wall-clock time and say so: that is for the kit's own plumbing tests only.

The chip is loaded as a fresh private copy from its file (:func:`chip_function`), so a
submission that replaces ``msda_labs.chips.labNN`` in ``sys.modules`` does not change the
baseline. The numbers still come from the student's process: they are feedback, and a
tampered process could forge them (see docs/gpu.md on grading for credit).
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_LIMIT", "chip_function", "race", "check_speed", "speed_line", "add_note",
           "REFERENCE_LIMIT", "race_all", "check_reference_speed", "reference_speed_line"]

DEFAULT_LIMIT = 3.0
_METHODS = ("cuda-graph", "cuda-events", "wall-clock")


def chip_function(lab_id: str, name: str) -> Callable | None:
    """``name`` from a fresh, private copy of the chip of ``lab_id``; None when this copy of
    the kit does not carry that chip (an exported lab carries earlier labs' chips only)."""
    import msda_labs.chips

    path = Path(msda_labs.chips.__file__).parent / f"{lab_id}.py"
    if not path.is_file():
        return None
    mod_name = f"_msda_speed_baseline_{lab_id}"
    module = sys.modules.get(mod_name)
    if module is None or getattr(module, "__file__", None) != str(path):
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    return getattr(module, name)


def _first_tensor(obj: Any):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, (tuple, list)):
        for item in obj:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _wall_clock(fns: dict[str, Callable], reps: int, warmup: int) -> dict[str, list[float]]:
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1e6)
    return samples


def race(yours: Callable[[], Any], baseline: Callable[[], Any] | None, *,
         baseline_label: str = "chip", reps: int = 30, warmup: int = 3, inner: int = 10,
         outputs: bool = True) -> dict:
    """Time ``yours()`` against ``baseline()`` in this process; plain data for the judge.

    Args:
        yours: a zero-argument call of the student's operator on prepared device inputs.
        baseline: the same call of the chip (or another baseline); None when there is none,
            and then only the student's time is measured.
        baseline_label: how the report names the baseline ("chip", "PyTorch reference").
        reps, warmup, inner: as in :func:`msda_labs.gpu.bench.side_by_side`.
        outputs: also return the first output tensor of each call, for the judge to compare.

    Returns:
        ``{"yours_us", "baseline_us", "ratio", "method", "reps", "baseline", "device",
        "flushed_l2"}`` (times in microseconds; ratio = yours / baseline, None without a
        baseline) and, with ``outputs``, ``"yours_out"`` and ``"baseline_out"``.
    """
    import torch

    fns = {"yours": yours}
    if baseline is not None:
        fns["baseline"] = baseline
    first = {name: fn() for name, fn in fns.items()}  # compiles and autotunes, untimed
    if torch.cuda.is_available():
        from msda_labs.gpu import bench

        torch.cuda.synchronize()
        timings = bench.side_by_side(fns, reps=reps, warmup=warmup, inner=inner)
        times = {name: t.us for name, t in timings.items()}
        method = timings["yours"].method
        flushed = timings["yours"].flushed_l2
        device = torch.cuda.get_device_name()
    else:
        samples = _wall_clock(fns, reps, warmup)
        times = {name: statistics.median(vals) for name, vals in samples.items()}
        method, flushed, device = "wall-clock", False, "cpu"
    base = times.get("baseline")
    measured = {
        "yours_us": float(times["yours"]),
        "baseline_us": None if base is None else float(base),
        "ratio": None if not base else float(times["yours"]) / float(base),
        "method": method,
        "reps": int(reps),
        "baseline": baseline_label if baseline is not None else None,
        "device": device,
        "flushed_l2": bool(flushed),
    }
    if outputs:
        measured["yours_out"] = _first_tensor(first["yours"])
        measured["baseline_out"] = _first_tensor(first.get("baseline"))
    return measured


def _valid(measured: Any) -> str | None:
    """Why ``measured`` is not a timing :func:`race` returns (None when it is one)."""
    if not isinstance(measured, dict):
        return f"the timing probe returned {type(measured).__name__}, not a timing"
    for key in ("yours_us", "method", "reps"):
        if key not in measured:
            return f"the timing has no {key!r}"
    if measured["method"] not in _METHODS:
        return f"unknown timing method {measured['method']!r}"
    for key in ("yours_us", "baseline_us"):
        value = measured.get(key)
        if value is None and key == "baseline_us":
            continue
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            return f"{key} is {value!r}, not a positive time"
    return None


def speed_line(measured: dict, *, what: str, limit: float = DEFAULT_LIMIT) -> str:
    """One line: both times, the ratio, the threshold and how the times were taken."""
    yours = measured["yours_us"]
    how = (f"device time, median of {measured['reps']} {measured['method']} runs"
           f"{', L2 flushed' if measured.get('flushed_l2') else ''}"
           + (f", {measured['device']}" if measured.get("device") else ""))
    if measured["method"] == "wall-clock":
        how = f"wall-clock median of {measured['reps']} runs without CUDA: plumbing only"
    if measured.get("baseline_us") is None:
        return f"speed of {what}: yours {yours:.1f} us; no baseline to compare with ({how})"
    base, ratio = measured["baseline_us"], measured["ratio"]
    label = measured.get("baseline") or "chip"
    return (f"speed of {what}: yours {yours:.1f} us vs the {label}'s {base:.1f} us = "
            f"{ratio:.2f}x its time (passes up to {limit:g}x; {how})")


def add_note(submission: Any, text: str) -> None:
    """Attach ``text`` to the grade report's notes (shown passed or failed)."""
    session = getattr(submission, "_session", None)
    notes = getattr(session, "notes", None)
    if isinstance(notes, list) and text not in notes:
        notes.append(text)


def check_speed(measured: Any, *, what: str, limit: float = DEFAULT_LIMIT, dtype=None,
                submission: Any = None, require_baseline: bool = True) -> str:
    """Judge side: fail unless the student's time is at most ``limit`` times the baseline's.

    First, when the timing carries outputs, the student's output must match the baseline's
    within ``dtype``'s tolerance (a fast wrong answer earns nothing). The speed line is added
    to the report's notes whether the test passes or not, and is the failure message.

    Returns:
        The speed line.
    """
    problem = _valid(measured)
    if problem:
        raise AssertionError(f"speed of {what}: not timed: {problem}")
    if measured.get("baseline_out") is not None:
        from msda_labs.grading.compare import expect_close

        expect_close(measured.get("yours_out"), measured["baseline_out"],
                     what=f"{what} (checked against the {measured.get('baseline') or 'chip'} "
                          f"before timing)", dtype=dtype)
    line = speed_line(measured, what=what, limit=limit)
    add_note(submission, line)
    if measured.get("baseline_us") is None:
        if require_baseline:
            raise AssertionError(f"{line}: this copy of the kit has no baseline for it")
        return line
    if measured["ratio"] > limit:
        raise AssertionError(f"too slow: {line}")
    return line


# -- against the PyTorch reference: a baseline every copy of the kit carries ----------------------
#
# An exported lab carries the chips of earlier labs only, so a speed test graded against the chip
# of its own lab could not run there. The grid_sample reference
# (msda_labs.truth.reference) is always
# there: the grade is decided against it, and the chip, where present, is only reported.

REFERENCE_LIMIT = 1.0
_REQUIRED = ("yours", "reference")


def _detached(obj: Any):
    """``obj`` with every tensor detached (tuples and lists kept): plain data for the judge."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_detached(item) for item in obj) if not hasattr(obj, "_fields") \
            else tuple(_detached(item) for item in obj)
    return None


def race_all(fns: dict[str, Callable[[], Any] | None], *, keep: tuple[str, ...] = ("yours",),
             reps: int = 30, warmup: int = 3, inner: int = 10) -> dict:
    """Time every call of ``fns`` side by side in this process; plain data for the judge.

    The names the judge reads (:func:`check_reference_speed`): ``"yours"`` (the student's call),
    ``"reference"`` (the PyTorch reference), optionally ``"reference_forward"`` (the reference's
    forward alone, subtracted from ``"reference"`` when that one runs forward and backward) and
    ``"chip"`` (the course's own kernel; leave it out or pass None where the kit lacks it).

    Each call runs once untimed first (compilation, autotuning, allocations); the outputs of the
    names in ``keep`` come from that call and are returned for the judge to check: a fast wrong
    answer earns nothing. Then :func:`msda_labs.gpu.bench.side_by_side` (device time, median,
    L2 flushed, CUDA-graph replay where every call can be captured, else CUDA events); without
    CUDA a wall-clock median that says so (the kit's plumbing tests only).

    Returns:
        ``{"times_us": {name: us}, "method", "reps", "device", "flushed_l2",
        "outputs": {name: first output}}``.
    """
    import torch

    fns = {name: fn for name, fn in fns.items() if fn is not None}
    first = {name: fn() for name, fn in fns.items()}
    if torch.cuda.is_available():
        from msda_labs.gpu import bench

        torch.cuda.synchronize()
        timings = bench.side_by_side(fns, reps=reps, warmup=warmup, inner=inner)
        times = {name: float(t.us) for name, t in timings.items()}
        any_timing = next(iter(timings.values()))
        method, flushed = any_timing.method, any_timing.flushed_l2
        device = torch.cuda.get_device_name()
    else:
        samples = _wall_clock(fns, reps, warmup)
        times = {name: float(statistics.median(vals)) for name, vals in samples.items()}
        method, flushed, device = "wall-clock", False, "cpu"
    return {"times_us": times, "method": method, "reps": int(reps), "device": device,
            "flushed_l2": bool(flushed),
            "outputs": {name: _detached(first[name]) for name in keep if name in first}}


def _valid_race(measured: Any) -> str | None:
    """Why ``measured`` is not a timing :func:`race_all` returns (None when it is one)."""
    if not isinstance(measured, dict) or not isinstance(measured.get("times_us"), dict):
        return f"the timing probe returned {type(measured).__name__}, not a timing"
    if measured.get("method") not in _METHODS:
        return f"unknown timing method {measured.get('method')!r}"
    times = measured["times_us"]
    for name in _REQUIRED:
        if name not in times:
            return f"the timing has no {name!r}"
    for name, value in times.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or \
                not math.isfinite(value) or value <= 0:
            return f"the time of {name!r} is {value!r}, not a positive time"
    return None


def reference_speed_line(measured: dict, *, what: str, reference_label: str,
                         chip_label: str = "the chip", limit: float = REFERENCE_LIMIT) -> str:
    """One line: your time, the reference's, their ratio and the threshold; the chip's time and
    ratio when it was timed (or why not); and how the times were taken."""
    times = measured["times_us"]
    yours = times["yours"]
    ref = times["reference"] - times.get("reference_forward", 0.0)
    if "reference_forward" in times:
        ref_text = (f"{reference_label} {ref:.1f} us (its forward + backward "
                    f"{times['reference']:.1f} us minus its forward alone "
                    f"{times['reference_forward']:.1f} us)")
    else:
        ref_text = f"{reference_label} {ref:.1f} us"
    ratio = f"{yours / ref:.2f}x its time" if ref > 0 else "no ratio (see below)"
    line = (f"speed of {what}: yours {yours:.1f} us vs {ref_text} = {ratio} (passes up to "
            f"{limit:g}x)")
    if "chip" in times:
        line += (f"; vs {chip_label} {times['chip']:.1f} us = {yours / times['chip']:.2f}x its "
                 f"time (reported, not graded)")
    else:
        line += (f"; {chip_label} is not in this copy of the kit (an exported lab carries the "
                 f"chips of earlier labs only): no chip ratio")
    if measured["method"] == "wall-clock":
        how = f"wall-clock median of {measured['reps']} runs without CUDA: plumbing only"
    else:
        how = (f"device time, median of {measured['reps']} {measured['method']} runs"
               f"{', L2 flushed' if measured.get('flushed_l2') else ''}"
               + (f", {measured['device']}" if measured.get("device") else ""))
    return f"{line}; {how}"


def check_reference_speed(measured: Any, *, what: str,
                          reference_label: str = "the PyTorch reference (grid_sample)",
                          chip_label: str = "the chip", limit: float = REFERENCE_LIMIT,
                          submission: Any = None) -> str:
    """Judge side: fail unless the student's time is at most ``limit`` times the reference's.

    The reference's time is ``times_us["reference"]``, less ``times_us["reference_forward"]``
    when the probe timed that too (a backward measured through autograd runs its forward as
    well). The chip's ratio, when the chip was timed, is reported and never graded: an exported
    lab has no chip of its own, and the grade must be the same there. Check the outputs before
    calling this (a fast wrong answer earns nothing). The line goes to the report's notes, passed
    or failed, and is the failure message.

    Returns:
        The speed line.
    """
    problem = _valid_race(measured)
    if problem:
        raise AssertionError(f"speed of {what}: not timed: {problem}")
    line = reference_speed_line(measured, what=what, reference_label=reference_label,
                                chip_label=chip_label, limit=limit)
    add_note(submission, line)
    times = measured["times_us"]
    ref = times["reference"] - times.get("reference_forward", 0.0)
    if ref <= 0:
        raise AssertionError(f"speed of {what}: not timed: the reference's forward + backward "
                             f"took no longer than its forward alone, so its backward has no "
                             f"time to compare with ({line})")
    if times["yours"] / ref > limit:
        raise AssertionError(f"too slow: {line}")
    return line
