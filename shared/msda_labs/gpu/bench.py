"""Device-time measurement for the GPU stages, and the byte counts that turn times into GB/s.

How a time is taken (:func:`measure`, :func:`side_by_side`):

* warm-up calls first (JIT compilation, the autotuner's search and allocations stay out);
* the L2 cache is flushed before every timed call, by zeroing a buffer of twice the L2 size (at
  least 128 MiB), so a call reads its inputs from DRAM the way it does inside a model and not
  from a warm cache;
* preferred, ``cuda-graph``: ``inner`` copies of (flush, call) are captured in one CUDA graph and
  so are ``inner`` flushes alone; each repetition replays both, between CUDA events, and one sample
  is (t(flush + call) - t(flush)) / inner. Replaying a graph costs one launch for the lot, so host
  dispatch (tens of microseconds per Triton launch) is out of the number: it is device time;
* fallback, ``cuda-events`` (when a call cannot be captured, e.g. it synchronizes, or when a
  call is too short to show beside the flush): an event pair around each call, after the flush;
  here dispatch can leak in when the call is shorter than its own launch;
* the reported time is the median of the samples, in microseconds; the host waits for the device
  only once, after the last repetition (never inside the timed region).

:func:`side_by_side` times several variants in one run, alternating between them repetition by
repetition, so that clock and temperature drift hit every variant alike. :func:`end_to_end` is
the other number: what an eager caller waits per call, host dispatch included (back-to-back
calls, one wait for the device at the end of each round).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

__all__ = [
    "BenchUnavailable",
    "Timing",
    "cuda_ready",
    "measure",
    "device_time_us",
    "side_by_side",
    "end_to_end",
    "forward_bytes",
    "effective_bandwidth_gbs",
    "bandwidth_table",
]

METHODS = ("auto", "cuda-graph", "cuda-events")


class BenchUnavailable(RuntimeError):
    """Device timing was asked for where there is no CUDA device."""


@dataclass(frozen=True)
class Timing:
    """One variant's measured device time.

    Attributes:
        us: median device time of one call, in microseconds.
        method: "cuda-graph" or "cuda-events".
        reps: number of samples the median is taken over.
        samples: every sample, in microseconds.
        flushed_l2: whether the L2 cache was flushed before each call.
    """

    us: float
    method: str
    reps: int
    samples: tuple[float, ...]
    flushed_l2: bool

    def as_dict(self) -> dict:
        """Plain data (for a probe's result, which may only hold tensors and plain values)."""
        return {"us": self.us, "method": self.method, "reps": self.reps,
                "samples": list(self.samples), "flushed_l2": self.flushed_l2}


def cuda_ready() -> bool:
    """True when torch sees a CUDA device."""
    return torch.cuda.is_available()


def _require_cuda() -> None:
    if not cuda_ready():
        build = torch.__version__
        raise BenchUnavailable(
            f"device timing needs a CUDA GPU, and torch {build} sees none here. Correctness can "
            f"be checked on the CPU (Triton's interpreter), but times measured there mean "
            f"nothing; run the GPU stage (`nox -s labNN-gpu`) on a machine with an NVIDIA GPU, "
            f"or on Modal with your own account")


def _check_args(reps: int, warmup: int, inner: int, method: str) -> None:
    if not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a positive int, got {reps!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")
    if not isinstance(inner, int) or inner < 1:
        raise ValueError(f"inner must be a positive int, got {inner!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def _flusher(device: torch.device) -> Callable[[], None]:
    """A call that evicts the L2 cache: zero a buffer of twice its size (at least 128 MiB)."""
    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    size = max(2 * l2, 128 << 20)
    buf = torch.empty(size // 4, dtype=torch.int32, device=device)

    def flush() -> None:
        buf.zero_()

    return flush


def _capture(body: Callable[[], None], inner: int) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            body()
    return graph


def _graphs(fns: Mapping[str, Callable[[], object]], flush, inner: int):
    """{name: graph of inner x (flush, fn)} and the flush-only graph; None when one fails."""
    try:
        base = _capture(flush, inner) if flush is not None else None

        def with_flush(fn):
            def body():
                if flush is not None:
                    flush()
                fn()
            return body

        work = {name: _capture(with_flush(fn), inner) for name, fn in fns.items()}
    except Exception:  # noqa: BLE001 - a call that cannot be captured falls back to events
        torch.cuda.synchronize()
        return None
    return base, work


def side_by_side(fns: Mapping[str, Callable[[], object]], *, reps: int = 30, warmup: int = 3,
                 inner: int = 10, flush_l2: bool = True, method: str = "auto",
                 device=None) -> dict[str, Timing]:
    """Median device time of each variant, measured in one run, alternating between them.

    Args:
        fns: ``{name: zero-argument call}``; each call launches the work to time.
        reps: samples per variant (the median is reported).
        warmup: untimed calls of each variant first.
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
        graphs = None
        if method in ("auto", "cuda-graph"):
            graphs = _graphs(fns, flush, inner)
            if graphs is None and method == "cuda-graph":
                raise RuntimeError("a call could not be captured in a CUDA graph (does it "
                                   "synchronize or allocate on the host?); use method='auto'")
        samples = _replay(graphs, reps, inner) if graphs is not None else None
        if samples is not None and (method == "cuda-graph" or
                                    min(statistics.median(v) for v in samples.values()) > 0):
            used = "cuda-graph"
        else:  # no capture, or a call too short to see beside the flush: time it with events
            samples = _events(fns, flush, reps)
            used = "cuda-events"
    return {name: Timing(us=statistics.median(vals), method=used, reps=reps,
                         samples=tuple(vals), flushed_l2=flush_l2)
            for name, vals in samples.items()}


def _replay(graphs, reps: int, inner: int) -> dict[str, list[float]]:
    base, work = graphs
    names = list(work)
    # Warm the graphs themselves once (first replays upload them).
    if base is not None:
        base.replay()
    for name in names:
        work[name].replay()
    torch.cuda.synchronize()
    marks = []
    for _ in range(reps):
        for name in names:
            e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            e0.record()
            if base is not None:
                base.replay()
            e1.record()
            work[name].replay()
            e2.record()
            marks.append((name, e0, e1, e2))
    torch.cuda.synchronize()
    out: dict[str, list[float]] = {name: [] for name in names}
    for name, e0, e1, e2 in marks:
        ms = e1.elapsed_time(e2) - e0.elapsed_time(e1)
        out[name].append(ms * 1000.0 / inner)
    return out


def _events(fns, flush, reps: int) -> dict[str, list[float]]:
    names = list(fns)
    marks = []
    for _ in range(reps):
        for name in names:
            if flush is not None:
                flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[name]()
            end.record()
            marks.append((name, start, end))
    torch.cuda.synchronize()
    out: dict[str, list[float]] = {name: [] for name in names}
    for name, start, end in marks:
        out[name].append(start.elapsed_time(end) * 1000.0)
    return out


def end_to_end(fns: Mapping[str, Callable[[], object]], *, reps: int = 50, rounds: int = 5,
               warmup: int = 3) -> dict[str, float]:
    """Time per call including the host's work (dispatch, Python, any waiting), in microseconds.

    Each round runs ``reps`` back-to-back calls of one variant and waits for the device once, at
    the end; variants alternate round by round and the median round counts. This is what a caller
    waits in eager mode: a launch that costs more than its kernel shows here and not in
    :func:`side_by_side`, and so does work a call does only when it is not captured in a graph.

    Raises:
        BenchUnavailable: there is no CUDA device.
    """
    _check_args(reps, warmup, rounds, "auto")
    _require_cuda()
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
            samples[name].append((time.perf_counter() - start) * 1e6 / reps)
    return {name: statistics.median(vals) for name, vals in samples.items()}


def measure(fn: Callable[[], object], **kwargs) -> Timing:
    """Median device time of one call of ``fn`` (see :func:`side_by_side` for the arguments)."""
    return side_by_side({"fn": fn}, **kwargs)["fn"]


def device_time_us(fn: Callable[[], object], **kwargs) -> float:
    """Median device time of one call of ``fn``, in microseconds (L2 flushed, graph replay when
    the call can be captured); raises :class:`BenchUnavailable` without a CUDA device."""
    return measure(fn, **kwargs).us


def forward_bytes(B: int, Q: int, M: int, D: int, L: int, K: int, itemsize: int) -> int:
    """Bytes the MSDA forward asks memory for: the algorithmic count, each item once per use.

    Every one of the B*Q*M*L*K samples reads its four corner rows of D channels, reads its two
    coordinates and its weight, and every (b, q, m) writes D channels:

        bytes = B*Q*M*L*K * (4*D + 3) * itemsize  +  B*Q*M*D * itemsize
                (corner rows + x, y, weight)          (output)

    It ignores the few bytes of spatial_shapes and level_start_index, and it counts a corner
    row that two samples share twice: caches may serve the second read, so the effective
    bandwidth bytes / time can exceed what DRAM delivers. At the decoder preset (B=4, Q=300,
    M=8, D=32, L=4, K=4) in fp16 that is 39,321,600 + 921,600 + 614,400 = 40,857,600 bytes.

    Args:
        B, Q, M, D, L, K: batch, queries, heads, channels per head, levels, points per level.
        itemsize: bytes per element (2 for fp16/bf16, 4 for fp32).

    Returns:
        The byte count (int).
    """
    for name, val in (("B", B), ("Q", Q), ("M", M), ("D", D), ("L", L), ("K", K),
                      ("itemsize", itemsize)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 0:
            raise ValueError(f"{name} must be a non-negative int, got {val!r}")
    samples = B * Q * M * L * K
    return samples * (4 * D + 3) * itemsize + B * Q * M * D * itemsize


def effective_bandwidth_gbs(nbytes: int | float, time_us: float) -> float:
    """Effective bandwidth in GB/s (10**9 bytes per second): ``nbytes / time``.

    Args:
        nbytes: bytes moved (e.g. :func:`forward_bytes`).
        time_us: device time in microseconds (> 0).
    """
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    if not time_us > 0:
        raise ValueError(f"time_us must be > 0, got {time_us!r}")
    return nbytes / (time_us * 1e-6) / 1e9


def bandwidth_table(times_us: Mapping[str, float], nbytes: int, label: str = "variant") -> str:
    """A plain-text table of time and effective bandwidth per variant, formula included."""
    lines = [f"{label:>10} | {'time (us)':>10} | {'GB/s':>8}",
             f"{'-' * 10}-+-{'-' * 10}-+-{'-' * 8}"]
    for name, us in times_us.items():
        lines.append(f"{name:>10} | {us:>10.2f} | {effective_bandwidth_gbs(nbytes, us):>8.1f}")
    lines.append(f"GB/s = {nbytes:,} bytes / time; bytes = B*Q*M*L*K*(4*D + 3)*itemsize + "
                 f"B*Q*M*D*itemsize")
    return "\n".join(lines)
