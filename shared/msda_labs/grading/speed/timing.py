"""Speed, measured side by side in one run, where the code being timed runs.

The kit has two clocks. This one times calls inside one process: the benchmarks'
(``msda_labs.gpu``), and the probes' in the child that runs a student's code, whose numbers are
feedback and speed notes. The clock a speed test grades is the judge's own
(:mod:`msda_labs.grading.judge.speedjudge`, with :mod:`msda_labs.grading.speed.speedtrial` and
:mod:`msda_labs.grading.speed.speedstats`), which nothing in the child can reach; the device's
copy bandwidth both use is measured here (:func:`copy_bandwidth_gbs`).

A speed test has two halves, like every graded test. The probe, in the child that runs the
student's code (where the GPU context lives), times zero-argument calls with :func:`race_all`
and returns plain data: ``{"times_us": {"yours": ...}, ...}``. The judge adds the baselines'
times (:func:`msda_labs.grading.judge.baseline.with_baselines`) and checks them with
:func:`check_reference_speed`, or reads ``times_us`` for a rule of its own.

How a time is taken (:func:`side_by_side`): warm-up calls first, so compilation, autotuning and
allocations stay out; the L2 cache flushed before every timed call (a buffer of twice its size,
at least 128 MiB, zeroed); preferably ``cuda-graph``: ``inner`` copies of (flush, call) captured
in one CUDA graph beside ``inner`` flushes alone, one sample = (t(flush + call) - t(flush)) /
inner, so host dispatch stays out; else ``cuda-events`` around each call (a call that
synchronizes cannot be captured). The variants alternate repetition by repetition, so drift hits
all alike; the median is reported, in microseconds. :func:`end_to_end` is what an eager caller
waits per call, host dispatch included. Without CUDA, :func:`race_all` falls back to wall-clock
medians and says so: that is for the kit's own plumbing tests only.

The numbers of the student's code come from the student's process: they are feedback, and a
tampered process could forge them (docs/gpu.md). The baselines (the PyTorch reference, the
chips) are never in that process: the judge times them itself, on the same inputs and with the
method the child's race used (:mod:`msda_labs.grading.judge.baseline`), and merges the times.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["BenchUnavailable", "Timing", "side_by_side", "end_to_end", "race_all",
           "add_note", "REFERENCE_LIMIT", "check_reference_speed",
           "reference_speed_line", "how_timed", "copy_bandwidth_gbs"]

METHODS = ("auto", "cuda-graph", "cuda-events")
_REPORTED = ("cuda-graph", "cuda-events", "wall-clock", "judge-clock")
REFERENCE_LIMIT = 1.0  # your time / the PyTorch reference's


class BenchUnavailable(RuntimeError):
    """Device timing was asked for where there is no CUDA device."""


@dataclass(frozen=True)
class Timing:
    """One variant's measured device time: the median ``us`` of ``reps`` samples (microseconds),
    how it was taken (``method``), every sample, and whether L2 was flushed before each call."""

    us: float
    method: str
    reps: int
    samples: tuple[float, ...]
    flushed_l2: bool


# -- device time (CUDA only) ----------------------------------------------------------------------
def copy_bandwidth_gbs(nbytes: int = 1 << 30, rounds: int = 6) -> float | None:
    """The device's DRAM bandwidth as a device-to-device copy of ``nbytes`` shows it: bytes read
    and written over the fastest of ``rounds`` copies, each between two synchronizations, in GB/s
    (None without CUDA). The one measurement behind the speed judge's floors and the benchmark's
    roofline."""
    if not torch.cuda.is_available():
        return None
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best / 1e9


def _require_cuda() -> None:
    if not torch.cuda.is_available():
        raise BenchUnavailable(
            f"device timing needs a CUDA GPU, and torch {torch.__version__} sees none here. "
            f"Correctness can be checked on the CPU (Triton's interpreter), but times measured "
            f"there mean nothing; run the GPU stage (`nox -s labNN-gpu`) on a machine with an "
            f"NVIDIA GPU, or on Modal with your own account")


def _check_args(reps: int, warmup: int, inner: int, method: str) -> None:
    for name, val, low in (("reps", reps, 1), ("warmup", warmup, 0), ("inner", inner, 1)):
        if not isinstance(val, int) or isinstance(val, bool) or val < low:
            kind = "positive" if low else "non-negative"
            raise ValueError(f"{name} must be a {kind} int, got {val!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def _flusher(device: torch.device) -> Callable[[], None]:
    """A call that evicts the L2 cache: zero a buffer of twice its size (at least 128 MiB)."""
    props = torch.cuda.get_device_properties(device)
    size = max(2 * int(getattr(props, "L2_cache_size", 0) or 0), 128 << 20)
    buf = torch.empty(size // 4, dtype=torch.int32, device=device)
    return buf.zero_


def _capture(body: Callable[[], None], inner: int) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            body()
    return graph


def _graphs(fns: Mapping[str, Callable[[], object]], flush, inner: int):
    """(flush-only graph, {name: graph of inner x (flush, fn)}); None when a call cannot be
    captured."""

    def with_flush(fn):
        def body():
            if flush is not None:
                flush()
            fn()
        return body

    try:
        base = _capture(flush, inner) if flush is not None else None
        work = {name: _capture(with_flush(fn), inner) for name, fn in fns.items()}
    except Exception:  # noqa: BLE001 - a call that cannot be captured falls back to events
        torch.cuda.synchronize()
    else:
        return base, work
    # Once the exception is gone, nothing refers to the graphs captured so far or to the private
    # memory pool of the capture that failed: hand that memory back, or a capture that ran out of
    # memory would leave the device full for the fallback that follows.
    gc.collect()
    torch.cuda.empty_cache()
    return None


def _replay(graphs, reps: int, inner: int) -> dict[str, list[float]]:
    base, work = graphs
    if base is not None:  # the first replays upload the graphs: warm them once
        base.replay()
    for graph in work.values():
        graph.replay()
    torch.cuda.synchronize()
    marks = []
    for _ in range(reps):
        for name, graph in work.items():
            e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            e0.record()
            if base is not None:
                base.replay()
            e1.record()
            graph.replay()
            e2.record()
            marks.append((name, e0, e1, e2))
    torch.cuda.synchronize()
    out: dict[str, list[float]] = {name: [] for name in work}
    for name, e0, e1, e2 in marks:
        out[name].append((e1.elapsed_time(e2) - e0.elapsed_time(e1)) * 1000.0 / inner)
    return out


def _events(fns, flush, reps: int) -> dict[str, list[float]]:
    marks = []
    for _ in range(reps):
        for name, fn in fns.items():
            if flush is not None:
                flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            marks.append((name, start, end))
    torch.cuda.synchronize()
    out: dict[str, list[float]] = {name: [] for name in fns}
    for name, start, end in marks:
        out[name].append(start.elapsed_time(end) * 1000.0)
    return out


def side_by_side(fns: Mapping[str, Callable[[], object]], *, reps: int = 30, warmup: int = 3,
                 inner: int = 10, flush_l2: bool = True, method: str = "auto",
                 device=None) -> dict[str, Timing]:
    """Median device time of each call of ``fns``, measured in one run, alternating between them.

    Args:
        fns: ``{name: zero-argument call}``; each call launches the work to time.
        reps: samples per call (the median is reported).
        warmup: untimed calls of each first.
        inner: calls per graph replay (graph method); more amortizes the replay's own launch.
        flush_l2: evict the L2 cache before every call.
        method: "auto" (graphs, else events), "cuda-graph" (fail if capture fails) or
            "cuda-events".
        device: the CUDA device (default: the current one).

    Returns:
        ``{name: Timing}``; times in microseconds.

    Raises:
        BenchUnavailable: there is no CUDA device.
    """
    _check_args(reps, warmup, inner, method)
    _require_cuda()
    if not fns:
        return {}
    device = torch.device(device) if device is not None else \
        torch.device("cuda", torch.cuda.current_device())
    with torch.cuda.device(device):
        flush = _flusher(device) if flush_l2 else None
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        torch.cuda.synchronize()
        graphs = _graphs(fns, flush, inner) if method != "cuda-events" else None
        if graphs is None and method == "cuda-graph":
            raise RuntimeError("a call could not be captured in a CUDA graph (does it "
                               "synchronize or allocate on the host?); use method='auto'")
        samples = _replay(graphs, reps, inner) if graphs is not None else None
        if samples is not None and (method == "cuda-graph" or
                                    min(statistics.median(v) for v in samples.values()) > 0):
            used = "cuda-graph"
        else:  # no capture, or a call too short to see beside the flush: time it with events
            samples, used = _events(fns, flush, reps), "cuda-events"
    return {name: Timing(us=statistics.median(vals), method=used, reps=reps,
                         samples=tuple(vals), flushed_l2=flush_l2)
            for name, vals in samples.items()}


def _per_call_us(fns, reps: int, rounds: int, warmup: int, sync) -> dict[str, float]:
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    sync()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            sync()
            samples[name].append((time.perf_counter() - start) * 1e6 / reps)
    return {name: statistics.median(vals) for name, vals in samples.items()}


def end_to_end(fns: Mapping[str, Callable[[], object]], *, reps: int = 50, rounds: int = 5,
               warmup: int = 3) -> dict[str, float]:
    """Time per call including the host's work (dispatch, Python, any waiting), microseconds.

    Each round runs ``reps`` back-to-back calls of one variant and waits for the device once, at
    the end; the variants alternate round by round and the median round counts. A launch that
    costs more than its kernel shows here and not in :func:`side_by_side`.

    Raises:
        BenchUnavailable: there is no CUDA device.
    """
    _check_args(reps, warmup, rounds, "auto")
    _require_cuda()
    return _per_call_us(fns, reps, rounds, warmup, torch.cuda.synchronize)


# -- the probe side: race -------------------------------------------------------------------------
def _detached(obj: Any):
    """``obj`` with every tensor detached (tuples and lists kept): plain data for the judge."""
    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, (tuple, list)):
        items = [_detached(item) for item in obj]
        return tuple(items) if hasattr(obj, "_fields") else type(obj)(items)
    return None


def race_all(fns: dict[str, Callable[[], Any] | None], *, keep: tuple[str, ...] = ("yours",),
             reps: int = 30, warmup: int = 3, inner: int = 10,
             with_end_to_end: bool = False, method: str = "auto") -> dict:
    """Time every call of ``fns`` side by side in this process; plain data for the judge.

    The names :func:`check_reference_speed` reads: ``"yours"`` (the student's call),
    ``"reference"`` (the PyTorch reference), optionally ``"reference_forward"`` (the reference's
    forward alone, subtracted from ``"reference"`` when that one runs forward and backward) and
    ``"chip"`` (the course's kernel; None where the kit lacks it, and then left out). A lab with
    its own rule may use any names.

    Each call runs once untimed first (compilation, autotuning, allocations); the outputs of the
    names in ``keep`` come from that call, for the judge to check: a fast wrong answer earns
    nothing. Then :func:`side_by_side` (``method`` as there); without CUDA a wall-clock median
    that says so.

    Returns:
        ``{"times_us": {name: us}, "method", "reps", "device", "flushed_l2",
        "outputs": {name: first output}}``, and ``"e2e_us": {name: us}`` (:func:`end_to_end`)
        with ``with_end_to_end``.
    """
    fns = {name: fn for name, fn in fns.items() if fn is not None}
    first = {name: fn() for name, fn in fns.items()}
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        timings = side_by_side(fns, reps=reps, warmup=warmup, inner=inner, method=method)
        times = {name: float(t.us) for name, t in timings.items()}
        any_timing = next(iter(timings.values()))
        method, flushed = any_timing.method, any_timing.flushed_l2
        device, sync = torch.cuda.get_device_name(), torch.cuda.synchronize
    else:
        times = _per_call_us(fns, 1, reps, warmup, lambda: None)
        method, flushed, device, sync = "wall-clock", False, "cpu", lambda: None
    measured = {"times_us": times, "method": method, "reps": int(reps), "device": device,
                "flushed_l2": bool(flushed),
                "outputs": {name: _detached(first[name]) for name in keep if name in first}}
    if with_end_to_end:
        measured["e2e_us"] = _per_call_us(fns, 50, 5, warmup, sync)
    return measured


# -- the judge side -------------------------------------------------------------------------------
def add_note(submission: Any, text: str) -> None:
    """Attach ``text`` to the grade report's notes (shown passed or failed)."""
    keep = getattr(submission, "add_note", None)
    if keep is not None:  # a stand-in submission of the kit's tests keeps no notes
        keep(text)


def _not_timed(measured: Any) -> str | None:
    """Why ``measured`` is not a timing :func:`race_all` returns with a "yours" and a
    "reference" (None when it is one)."""
    if not isinstance(measured, dict) or not isinstance(measured.get("times_us"), dict):
        return f"the timing probe returned {type(measured).__name__}, not a timing"
    if measured.get("method") not in _REPORTED:
        return f"unknown timing method {measured.get('method')!r}"
    times = measured["times_us"]
    for name in ("yours", "reference"):
        if name not in times:
            return f"the timing has no {name!r}"
    for name, value in times.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or \
                not math.isfinite(value) or value <= 0:
            return f"the time of {name!r} is {value!r}, not a positive time"
    return None


def how_timed(measured: dict) -> str:
    """How the times of a :func:`race_all` result were taken, in words."""
    if measured["method"] == "judge-clock":
        verified, n = measured.get("verified"), measured.get("n")
        every = not isinstance(verified, int) or not isinstance(n, int) or \
            verified >= (measured["reps"] + 1) * n
        checked = "every output checked" if every else (
            f"{verified} outputs checked in full (picked after each round's reply), every "
            f"checksum checked")
        return (f"the judge's clock: median of {measured['reps']} rounds of {n} "
                f"calls on fresh inputs, {checked}, the protocol's own "
                f"{measured.get('overhead_us', 0.0):.1f} us a call subtracted"
                + (f", {measured['device']}" if measured.get("device") else ""))
    if measured["method"] == "wall-clock":
        return f"wall-clock median of {measured['reps']} runs without CUDA: plumbing only"
    return (f"device time, median of {measured['reps']} {measured['method']} runs"
            f"{', L2 flushed' if measured.get('flushed_l2') else ''}"
            + (f", {measured['device']}" if measured.get("device") else ""))


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
    return f"{line}; {how_timed(measured)}"


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
    problem = _not_timed(measured)
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
