"""Speed on the judge's clock: the judge's half of a speed trial (the child's half:
:mod:`msda_labs.grading.speed.speedtrial`).

The time a speed test grades is taken here, in the grading process, with ``time.perf_counter``
around a round trip to the child that runs the student's code: from the moment the judge sends a
fresh seed to the moment the checksums of ``n`` calls on inputs drawn from that seed come back.
Nothing the child measures or patches (CUDA events, ``perf_counter``, ``do_bench``,
``torch.cuda.synchronize``) reaches that clock. After each round the judge picks iterations at
random, asks for their outputs, and checks them against the ground truth it computes from its
own draw of the same seed (the tolerance table of the correctness tests), and checks that their
checksums are the ones sent inside the timed window. A round that fails either check ends the
trial with no speed credit, whatever its time.

The baselines (the PyTorch reference, the chip) and a no-op go through the same protocol (the
same drawing, checksums and socket round trip) in a clean server: a thread of the judge that
never loaded the student's module. It runs before the student's child starts and after it
ended (with :data:`ALTERNATE`, also alternating with the student's rounds: ABAB...; off, see
there); each baseline counts at the fastest of its phases, since a child that loads the device
while it is not timed could only slow the rounds beside its own. The no-op's round there is
the baselines' overhead. The student's overhead is the no-op's round in a clean child: a child
forked from the same worker as the student's, before the student's child starts and after it
ended (the smaller median counts), importing a file of the kit instead of the student's. Neither
no-op runs student code, so a submission can move neither the overheads nor the baselines. The
outputs the student's rounds keep are checked after the last one. A time per call is
``(median round - median no-op round) / n``.

Every graded ratio (``limits``) gets a bootstrap interval
(:mod:`msda_labs.grading.speed.speedstats`); a ratio whose interval holds its threshold is
measured again, up to :data:`RETRIES` times, on the rounds of every measurement pooled, so that
noise does not decide the verdict.

A time below the floor that the bytes the operator must move allow at the device's bandwidth
(measured here, on the judge's side) is flagged for review and not credited.
"""

from __future__ import annotations

import io
import json
import math
import secrets
import socket
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import torch

from msda_labs.grading.judge.submission import SubmissionProblem
from msda_labs.grading.speed import speedtrial
from msda_labs.grading.speed.speedstats import (
    Limit,
    Timed,
    alternation,
    bootstrap_ratio,
    per_call_us,
    straddles,
)
from msda_labs.grading.speed.timing import copy_bandwidth_gbs as device_bandwidth_gbs

__all__ = ["forward_spec", "judge_speed", "judge_msda_speed", "msda_floor_bytes",
           "warm_baselines", "expect_close_but_borders", "BORDER_SHARE", "TIMED_SLACK",
           "timed_tolerance", "SpeedTrialFailed", "device_bandwidth_gbs",
           "CACHE_FACTOR", "METHOD", "Limit", "RETRIES", "MAX_REPEAT"]

METHOD = "judge-clock"
# The floor allows caches to deliver the operator's algorithmic bytes (a shared corner row read
# twice, say) at up to this many times the DRAM bandwidth measured here (H200: L2 about 2.5x
# its HBM): anything faster did not do the work on these inputs.
CACHE_FACTOR = 4.0
_RTOL_SUMS = 1e-4  # a float32 sum of the products against the float64 one


class SpeedTrialFailed(AssertionError):
    """The timed work was wrong, missing or implausible: no speed credit. ``measured``: the
    times, where the trial was timed (a time below the floor)."""

    measured: dict | None = None

    @classmethod
    def with_times(cls, measured: dict, message: str) -> SpeedTrialFailed:
        exc = cls(message)
        exc.measured = measured
        return exc


def forward_spec(case, dtype_name: str, *, fn: str, n: int, op: str = "forward",
                 call: str | None = None, kwargs: Mapping | None = None,
                 variants: Mapping[str, Mapping] | None = None) -> dict:
    """A trial's spec for an MSDA case: its sizes, the dtype, the function and how it is called
    (``op``: the inputs drawn; ``call``: "forward", "backward" or "autograd"), ``n`` calls per
    timed round. Outputs: (B, Q, M*D) for a forward, the three gradients otherwise."""
    shapes = [list(hw) for hw in case.shapes]
    S = sum(h * w for h, w in case.shapes)
    L = len(case.shapes)
    B, Q, M, D, K = case.B, case.Q, case.M, case.D, case.K
    call = call or op
    grads = [[B, S, M, D], [B, Q, M, L, K, 2], [B, Q, M, L, K]]
    outs = {"forward": [[B, Q, M * D]], "backward": grads, "autograd": [[B, Q, M * D], *grads]}
    outs = outs[call]
    return {"op": op, "call": call, "fn": fn, "kwargs": dict(kwargs or {}), "n": int(n),
            "case_id": str(getattr(case, "id", "")),
            "variants": {k: dict(v) for k, v in (variants or {}).items()},
            "dtype": dtype_name, "out_shapes": outs, "out_dtypes": [dtype_name] * len(outs),
            "case": {"B": B, "Q": Q, "M": M, "D": D, "K": K, "shapes": shapes,
                     "loc_lo": float(case.loc_lo), "loc_hi": float(case.loc_hi)}}


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# Location gradients jump where a sample crosses a pixel border (the bilinear weights' slopes
# change there), and two right fp32 implementations can round a sample near a border to different
# sides: among the many random samples of a speed trial, a few elements of an honest kernel's
# grad_loc can differ from the reference's by more than the tolerance. A trial allows this share.
BORDER_SHARE = 1e-3
# How much wider than the correctness tests' tolerance the check of a timed gradient is. That check
# refuses wrong and forged outputs (off by far more); precision is graded by the correctness
# tests, on one input set. A speed trial checks many fresh sets, and in fp32 grad_attn's error is
# the rounding of the pixel position (up to ulp(W) at the largest level) times the value's slope,
# summed over D: on one decoder set the lab 08 chip reached 0.84 of the tolerance against a
# float64 truth and the fp32 reference 0.94, and on an H100 one element in about 1.2 million
# checked went past it (1.02 of the tolerance).
TIMED_SLACK = 4


def timed_tolerance(dtype: torch.dtype, backward: bool = True) -> tuple[float, float]:
    """(rtol, atol) for the check of a timed output: the correctness tests' times
    :data:`TIMED_SLACK`."""
    from msda_labs.grading.judge.compare import tolerance

    rtol, atol = tolerance(dtype, backward=backward)
    return rtol * TIMED_SLACK, atol * TIMED_SLACK


def expect_close_but_borders(res, ref, *, what: str, case: str = "", dtype=None,
                             share: float = BORDER_SHARE, **kwargs) -> None:
    """:func:`msda_labs.grading.judge.compare.expect_close` (backward tolerance), except that at
    most ``share`` of the elements may differ, none of them NaN or infinite: for a location
    gradient on the random inputs of a speed trial (:data:`BORDER_SHARE`)."""
    from msda_labs.grading.judge.compare import expect_close, mismatch, tolerance

    try:
        expect_close(res, ref, what=what, case=case, dtype=dtype, backward=True, **kwargs)
    except AssertionError:
        if not isinstance(res, torch.Tensor) or res.shape != ref.shape or \
                not bool(torch.isfinite(res.detach().double()).all()):
            raise
        rtol, atol = tolerance(dtype or res.dtype, backward=True)
        rtol, atol = kwargs.get("rtol") or rtol, kwargs.get("atol") or atol
        _bad, n_bad = mismatch(res, ref, rtol, atol)
        if n_bad > share * ref.numel():
            raise


# -- the clean server -----------------------------------------------------------------------------
class _CleanServer:
    """The protocol's child half, run by a thread of the judge on the baselines and the no-op."""

    def __init__(self, calls: Mapping[str, Callable], spec: Mapping):
        ours, theirs = socket.socketpair()
        self.conn = Connection(ours.detach())
        self._theirs = Connection(theirs.detach())
        self.error: BaseException | None = None

        def run():
            try:
                speedtrial.loop(calls, spec, self._theirs, device=_device())
            except BaseException as exc:  # noqa: BLE001 - reported by close()
                self.error = exc
            finally:
                self._theirs.close()

        self._thread = threading.Thread(target=run, name="msda-clean-speed-server", daemon=True)
        self._thread.start()

    def close(self) -> None:
        try:
            self.conn.send_bytes(b'{"do": "end"}')
        except OSError:
            pass
        self._thread.join(timeout=60)
        self.conn.close()
        if self.error is not None:
            raise RuntimeError(f"the judge's own speed server failed: "
                               f"{type(self.error).__name__}: {self.error}") from self.error


# -- the judge's kernels, compiled ahead -----------------------------------------------------------
_WARMING: list[threading.Thread] = []
WARM_WAIT_S = 300.0  # the longest a timed trial waits for the judge's own compiles


def warm_baselines(case, dtype_name: str, call: str, baselines: Mapping[str, Callable | None]
                   ) -> None:
    """Start compiling the judge's ``baselines`` of a speed trial now, in a thread of the judge:
    each is called once on one input set of ``case`` drawn the trial's way, and what it returns is
    dropped. The grading plugin calls this when a GPU stage begins, so that the chip's kernels
    compile while the student's children run the correctness tests; :func:`_measure` waits for
    every such thread before its first timed round, so no warm-up shares the device with a clock.
    A baseline that fails here fails again, reported, inside its trial."""
    present = {k: v for k, v in baselines.items() if v is not None}
    if not present or not torch.cuda.is_available():
        return
    op = "forward" if call == "forward" else "backward"
    spec = forward_spec(case, dtype_name, fn="warm", n=1, op=op, call=call)

    def warm():
        try:
            sets, _ = speedtrial.draw_round(spec, secrets.randbits(31), _device())
            for fn in present.values():
                try:
                    fn(*sets[0])
                except Exception:  # noqa: BLE001 - reported by the trial itself
                    pass
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - the trial draws and compiles again, and reports
            pass

    thread = threading.Thread(target=warm, name="msda-warm-baselines", daemon=True)
    thread.start()
    _WARMING.append(thread)


def _wait_for_warming() -> None:
    deadline = time.monotonic() + WARM_WAIT_S
    while _WARMING:
        _WARMING[0].join(max(0.0, deadline - time.monotonic()))
        _WARMING.pop(0)


# -- one round -------------------------------------------------------------------------------------
def _recv(conn: Connection, timeout: float, who: str) -> bytes:
    if not conn.poll(timeout):
        raise TimeoutError(f"{who} did not answer within {timeout:g} s")
    return conn.recv_bytes()


def _timed_round(conn: Connection, which: str, timeout: float, who: str):
    seed = secrets.randbits(62)
    message = json.dumps({"do": "time", "which": which, "seed": seed}).encode()
    start = time.perf_counter()
    conn.send_bytes(message)
    raw = _recv(conn, timeout, who)
    seconds = time.perf_counter() - start
    return seconds, seed, raw


@dataclass
class _Checker:
    spec: Mapping
    truth: Callable[[tuple], Any]
    close: Callable[[Any, Any, str], None]
    verify: int | None
    checked: int = 0
    kept: int = 0  # rounds whose picked outputs the child keeps
    rng: secrets.SystemRandom = field(default_factory=secrets.SystemRandom)

    def reply(self, raw: bytes) -> dict:
        try:
            reply = json.loads(raw)
            sums = reply["sums"]
            meta = reply["meta"]
        except (ValueError, KeyError, TypeError):
            raise SpeedTrialFailed("the timed reply is not the protocol's answer") from None
        n = self.spec["n"]
        if not (isinstance(sums, list) and len(sums) == n and isinstance(meta, list)
                and len(meta) == n):
            held = len(sums) if isinstance(sums, list) else "no"
            raise SpeedTrialFailed(f"the timed reply holds {held} checksums, not {n}")
        return reply

    def pick(self, conn: Connection, reply: dict, round_no) -> list[int]:
        """After a round's reply: check the shapes and dtypes it reports, pick the calls to
        check at random, and tell the child to keep their outputs (it lets the others go)."""
        spec, n = self.spec, self.spec["n"]
        want = [[list(s), d] for s, d in zip(spec["out_shapes"], spec["out_dtypes"])]
        for i, meta in enumerate(reply["meta"]):
            if meta != want:
                raise SpeedTrialFailed(f"timed call {i + 1} of round {round_no} returned "
                                       f"{_describe(meta)}, expected {_describe(want)}")
        picked = list(range(n)) if self.verify is None or self.verify >= n else \
            sorted(self.rng.sample(range(n), self.verify))
        conn.send_bytes(json.dumps({"do": "keep", "iters": picked}).encode())
        self.kept += 1
        return picked

    def check(self, conn: Connection, reply: dict, seed: int, timeout: float, who: str,
              round_no, picked: list[int] | None = None, index: int | None = None) -> None:
        """Fetch the kept outputs of a round (``index``: the order it was kept in; picked now
        when ``picked`` is None) and check them and their checksums."""
        spec = self.spec
        if picked is None:
            picked = self.pick(conn, reply, round_no)
            index = self.kept - 1
        conn.send_bytes(json.dumps({"do": "show", "index": index}).encode())
        raw = _recv(conn, timeout, who)
        try:
            shown = torch.load(io.BytesIO(raw), weights_only=True)
        except Exception as exc:  # noqa: BLE001 - a forged reply earns nothing
            raise SpeedTrialFailed(f"the outputs sent back cannot be read "
                                   f"({type(exc).__name__})") from None
        total = speedtrial.out_numel(spec)
        if not (isinstance(shown, list) and len(shown) == len(picked) and all(
                isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.dim() == 1
                and t.numel() == total for t in shown)):
            raise SpeedTrialFailed("the outputs sent back are not those of the timed calls")
        # Checked where the inputs are drawn: on a GPU the truth, the checksum and the
        # comparison of an encoder-sized output take milliseconds there, and about a second
        # each on the host. A failing check still reports from the same tensors.
        device = _device()
        sets, weights = speedtrial.draw_round(spec, seed, device)
        for i, flat in zip(picked, shown):
            flat = flat.to(device)
            w = weights[i].double()
            got = float(reply["sums"][i])
            mine = float((flat.double() * w).sum())
            scale = float((flat.double() * w).abs().sum())
            if not math.isfinite(got) or abs(got - mine) > _RTOL_SUMS * scale + 1e-6:
                raise SpeedTrialFailed(
                    f"timed call {i + 1} of round {round_no}: its output is not the one whose "
                    f"checksum was sent inside the timed window (sent {got:.6g}, the output "
                    f"gives {mine:.6g}): the work was not done, or not finished, when the "
                    f"clock stopped")
            parts, at = [], 0
            for shape in spec["out_shapes"]:
                size = speedtrial._prod(shape)
                parts.append(flat[at:at + size].reshape(shape).to(getattr(torch, spec["dtype"])))
                at += size
            expected = _on(self.truth(sets[i]), device)
            self.close(tuple(parts) if len(parts) > 1 else parts[0], expected,
                       f"timed call {i + 1} of round {round_no}")
            self.checked += 1


def _on(obj, device):
    """``obj`` (a tensor, or tuples and lists of them) on ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to(device)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_on(x, device) for x in obj)
    return obj


def _describe(meta) -> str:
    return ", ".join(f"{d}{tuple(s)}" for s, d in meta)


# -- the trial -------------------------------------------------------------------------------------
def _clean_rounds(server: _CleanServer, names, rounds: int, times: dict, timeout: float) -> None:
    for _ in range(rounds):
        for name in names:
            seconds, _, _ = _timed_round(server.conn, name, timeout, "the judge's speed server")
            times.setdefault(name, []).append(seconds)


def _spread_us(samples: list[float], n: int) -> float:
    if len(samples) < 2:
        return 0.0
    q = statistics.quantiles(samples, n=4)
    return (q[2] - q[0]) / n * 1e6


def _record(submission, spec: Mapping, primary: str, measured: dict | None,
            failed: str = "") -> None:
    """Keep the trial's outcome in the grade result (``GradeResult.speed``), for the class
    leaderboard: its times per call, or why it has none."""
    keep = getattr(submission, "record_speed", None)
    if keep is None:  # a stand-in submission of the kit's tests keeps no records
        return
    names = list(speedtrial.variants(spec))
    label = spec["fn"] if names == ["yours"] else f"{spec['fn']} ({', '.join(names)})"
    record = {"key": f"{label} on {spec.get('case_id') or 'a case'} in {spec['dtype']}",
              "fn": spec["fn"], "case": spec.get("case_id", ""), "dtype": spec["dtype"],
              "primary": primary, "status": "failed" if failed else "timed", "why": failed}
    if measured is not None:
        record.update({k: measured[k] for k in ("times_us", "spread_us", "overhead_us", "n",
                                                "rounds", "device", "verified", "floor_us",
                                                "method") if k in measured})
        record.update({k: measured[k] for k in ("verdicts", "attempts") if k in measured})
    keep(record)


# Whether the clean server's rounds alternate with the student's (ABAB) while the student's
# child lives. Off: measured on the H200 (docs/gpu.md, "Fairness, measured"), alternating rounds
# between two processes slowed the student's side (the lab 05 chip graded as a student read
# 111-180 us a call against its own 16-45 us as the baseline, 2.4-10x; back to back it read
# 60 us against 65 us), while the baselines, which count at their fastest phase, kept their
# clean phases. The rounds of each side run back to back, the baselines' before and after.
ALTERNATE = False
# A verdict whose interval holds its threshold is measured again, at most this many times, on
# the rounds of every measurement pooled.
RETRIES = 2
MAX_REPEAT = 20  # trials per speed test at most (prove's fairness runs ask for several)


def _repeats(submission) -> int:
    """Trials of each speed test: the grading job's ``speed_repeat`` (1 unless prove asks)."""
    job = getattr(submission, "job", None)
    return max(1, min(MAX_REPEAT, int(getattr(job, "speed_repeat", 1) or 1)))


def judge_speed(submission, spec: Mapping, *, truth: Callable[[tuple], Any],
                close: Callable[[Any, Any, str], None],
                baselines: Mapping[str, Callable | None], rounds: int = 9,
                verify: int | None = None, timeout: float | None = None,
                floor_bytes: tuple[int, int] | None = None, primary: str | None = None,
                limits: Sequence[Limit] = ()) -> dict:
    """:func:`_judge_speed` (see there), its outcome kept for the leaderboard; ``primary`` names
    the variant a ranking reads (default: the first). With the job's ``speed_repeat`` = k, the trial
    runs k times, each kept (how the kit measures a verdict's fairness); the last is returned
    and the first failure raised."""
    primary = primary or next(iter(speedtrial.variants(spec)))
    first_failure: BaseException | None = None
    measured: dict = {}
    for _ in range(_repeats(submission)):
        try:
            measured = _judge_speed(submission, spec, truth=truth, close=close,
                                    baselines=baselines, rounds=rounds, verify=verify,
                                    timeout=timeout, floor_bytes=floor_bytes, limits=limits)
        except (AssertionError, SubmissionProblem) as exc:
            _record(submission, spec, primary, getattr(exc, "measured", None),
                    f"{type(exc).__name__}: {str(exc)[:300]}")
            first_failure = first_failure or exc
            continue
        _record(submission, spec, primary, measured)
    if first_failure is not None:
        raise first_failure
    return measured


def _judge_speed(submission, spec: Mapping, *, truth: Callable[[tuple], Any],
                 close: Callable[[Any, Any, str], None],
                 baselines: Mapping[str, Callable | None], rounds: int = 9,
                 verify: int | None = None, timeout: float | None = None,
                 floor_bytes: tuple[int, int] | None = None,
                 limits: Sequence[Limit] = ()) -> dict:
    """Time the student's calls (``spec["fn"]`` as "yours", or ``spec["variants"]``) and the
    ``baselines`` on the judge's clock.

    Args:
        submission: the test's ``submission`` fixture (its ``converse`` starts the child).
        spec: :func:`forward_spec`.
        truth: the ground truth of one input set (the tuple the call gets).
        close: ``close(output, expected, what)`` raises AssertionError when they differ (the
            correctness tests' tolerance).
        baselines: ``{name: call on one input set}`` timed in the clean server (None: left out).
        rounds: timed rounds of the student's call, each followed by a round of every baseline
            and the no-op in the clean server (:func:`speedstats.alternation`); the baselines
            get as many again, half before the student's child and half after it.
        verify: iterations checked per round, picked at random after the reply (None: all).
        floor_bytes: (bytes the operator must touch once, its algorithmic bytes): the floor.
        limits: the ratios the test grades (:class:`speedstats.Limit`): each gets a bootstrap
            interval, and one whose interval holds its threshold is measured again (at most
            :data:`RETRIES` times, the rounds pooled).

    Returns:
        A timing as :func:`msda_labs.grading.speed.timing.check_reference_speed` reads it:
        ``{"times_us": {"yours", *baselines}, "method": "judge-clock", ...}`` with
        ``"overhead_us"``, ``"spread_us"``, ``"rounds"``, ``"n"``, ``"verified"``,
        ``"floor_us"``, ``"verdicts"`` (per limit: ratio, interval, threshold) and
        ``"attempts"``.

    Raises:
        SpeedTrialFailed: a timed output, or its checksum, is wrong; or the time is below the
            floor (flagged for review).
        SubmissionProblem: the student's code raised, crashed or ran out of time.
    """
    n = int(spec["n"])
    job = getattr(submission, "job", None)
    timeout = float(timeout or getattr(job, "timeout", 0) or 120.0)
    present = {k: v for k, v in baselines.items() if v is not None}
    yours = list(speedtrial.variants(spec))
    checker = _Checker(spec, truth, close, verify)
    samples: dict = {}
    verdicts: list[dict] = []
    attempts = 0
    while True:
        attempts += 1
        _pool(samples, _measure(submission, spec, checker, present, rounds, timeout))
        parts, per_call, child = _estimate(samples, n, yours, present)
        verdicts = _verdicts(parts, per_call, limits, n, seed=attempts)
        if attempts > RETRIES or not any(v["straddles"] for v in verdicts):
            break
    bandwidth = device_bandwidth_gbs()
    floor_us = None
    if floor_bytes is not None and bandwidth:
        unique, algorithmic = floor_bytes
        floor_us = max(unique / (bandwidth * 1e3), algorithmic / (CACHE_FACTOR * bandwidth * 1e3))
    phases = samples["phases"]
    measured = {
        "times_us": {name: max(us, 1e-3) for name, us in per_call.items()},
        "raw_times_us": per_call,
        "method": METHOD, "reps": len(samples["student"][yours[0]]),
        "rounds": len(samples["student"][yours[0]]), "n": n,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "flushed_l2": False,
        "overhead_us": statistics.median(child) / n * 1e6,
        "overhead_round_us": statistics.median(child) * 1e6,
        "server_overhead_us": statistics.median(phases["before"]["noop"]) / n * 1e6,
        "clean_child": bool(samples["child_noop"][0] and samples["child_noop"][1]),
        "spread_us": {name: _spread_us(t.rounds, n) for name, t in parts.items()},
        "verified": checker.checked, "floor_us": floor_us, "bandwidth_gbs": bandwidth,
        "verdicts": verdicts, "attempts": attempts,
        "rounds_s": {"student": samples["student"], "child_noop": samples["child_noop"],
                     "phases": phases},
    }
    measured["spread_us"]["noop"] = _spread_us(child, n)
    for name in yours:
        if floor_us is not None and per_call[name] < floor_us:
            raise SpeedTrialFailed.with_times(
                measured, f"flagged for review, not credited: {per_call[name]:.2f} us a call "
                f"({name}) on the judge's clock is below the {floor_us:.2f} us that moving "
                f"its bytes takes at the {bandwidth:.0f} GB/s measured on this device")
    return measured


_PHASES = ("before", "between", "after")


def _measure(submission, spec, checker: _Checker, present: Mapping[str, Callable],
             rounds: int, timeout: float) -> dict:
    """One measurement: the clean server's rounds before the student's child, the clean
    child's no-op, the student's rounds alternating with the clean server's, the clean child's
    no-op again, the clean server's rounds after. Seconds per round, by phase and name."""
    _wait_for_warming()
    names = ["noop", *present]
    server = _CleanServer({"noop": speedtrial.noop_call(spec), **present}, spec)
    phases: dict[str, dict[str, list[float]]] = {phase: {} for phase in _PHASES}
    try:
        _clean_rounds(server, names, 1, {}, timeout)  # warm: compilation, allocations
        _clean_rounds(server, names, (rounds + 1) // 2, phases["before"], timeout)
        child_before = _clean_child_rounds(submission, spec, rounds, timeout)
        student = _student_rounds(submission, spec, checker, rounds, timeout,
                                  server=server if ALTERNATE else None, clean=names,
                                  between=phases["between"])
        child_after = _clean_child_rounds(submission, spec, rounds, timeout)
        _clean_rounds(server, names, rounds // 2 + 1, phases["after"], timeout)
    finally:
        server.close()
    return {"student": student, "child_noop": [child_before, child_after], "phases": phases}


def _pool(into: dict, more: dict) -> None:
    """Add the rounds of ``more`` (a :func:`_measure`) to ``into``."""
    if not into:
        into.update({"student": {}, "child_noop": [[], []],
                     "phases": {phase: {} for phase in _PHASES}})
    for name, values in more["student"].items():
        into["student"].setdefault(name, []).extend(values)
    for mine, theirs in zip(into["child_noop"], more["child_noop"]):
        mine.extend(theirs)
    for phase, table in more["phases"].items():
        for name, values in table.items():
            into["phases"][phase].setdefault(name, []).extend(values)


def _estimate(samples: dict, n: int, yours, present):
    """(the rounds behind each time, the times per call, the student's no-op rounds).

    The student's rounds less a clean child's no-op (the same kind of process, forked from the
    same worker, running no student code), before or after the student's child, the smaller
    median: work the child left behind could only slow the later one. Each baseline counts at
    the fastest of its phases (before the student's child, alternating with its rounds, after
    it), less the server's no-op of that phase: a child that loads the device while it is not
    timed could only slow the baselines' rounds that alternate with its own."""
    phases = samples["phases"]
    before, after = samples["child_noop"]
    if before and after:
        child = min(before, after, key=statistics.median)
    else:  # the kit's own stand-ins start no clean child: the server's no-op
        child = phases["before"]["noop"]
    parts = {name: Timed(samples["student"][name], child) for name in yours}
    for name in present:
        timed = [Timed(phases[p][name], phases[p]["noop"]) for p in _PHASES
                 if phases[p].get(name) and phases[p].get("noop")]
        parts[name] = min(timed, key=lambda t: per_call_us(t.rounds, t.noop, n))
    per_call = {name: per_call_us(t.rounds, t.noop, n) for name, t in parts.items()}
    return parts, per_call, child


def _verdicts(parts, per_call, limits: Sequence[Limit], n: int, seed: int) -> list[dict]:
    out = []
    for limit in limits:
        needed = [limit.num, limit.den, *([limit.minus] if limit.minus else [])]
        if any(name not in parts for name in needed):
            continue  # a baseline this copy of the kit lacks
        ratio = limit.ratio(per_call)
        interval = bootstrap_ratio(parts, limit, n, seed=seed)
        out.append({"ratio": limit.name, "value": ratio, "interval": list(interval),
                    "limit": limit.limit, "at_least": limit.at_least,
                    "passes": limit.holds(ratio), "margin": limit.margin(ratio),
                    "straddles": straddles(interval, limit)})
    return out


def _clean_child_rounds(submission, spec, rounds: int, timeout: float) -> list[float]:
    """The no-op's rounds in a clean child: forked from the student's worker while no child of
    the student's runs, importing a file of the kit instead of the student's (empty where the
    submission object cannot start one: the kit's own tests' stand-ins)."""
    converse = getattr(submission, "converse", None)
    if converse is None:
        return []
    talk = converse(speedtrial.serve_noop, dict(spec), timeout=timeout,
                    submission=speedtrial.__file__)
    samples: list[float] = []
    try:
        for round_no in range(rounds + 1):
            seconds, _, raw = _timed_round(talk.conn, "noop", timeout, "the clean child")
            if round_no:
                samples.append(seconds)
        talk.conn.send_bytes(b'{"do": "end"}')
    finally:
        outcome = talk.finish()
    if outcome.kind != "ok":
        raise RuntimeError(f"the judge's clean child failed: {outcome.message}")
    return samples


def _student_rounds(submission, spec, checker: _Checker, rounds: int, timeout: float, *,
                    server: _CleanServer | None = None, clean: Sequence[str] = (),
                    between: dict | None = None):
    talk = submission.converse(speedtrial.serve, dict(spec), timeout=timeout)
    checker.kept = 0  # a fresh child keeps its own outputs, counted from 0
    names = list(speedtrial.variants(spec))
    samples: dict[str, list[float]] = {name: [] for name in names}
    failure: BaseException | None = None
    kept = []

    def student_round(name, round_no):
        seconds, seed, raw = _timed_round(talk.conn, name, timeout, "your code")
        reply = checker.reply(raw)
        label = round_no if len(names) == 1 else f"{round_no} ({name})"
        picked = checker.pick(talk.conn, reply, label)
        kept.append((reply, seed, label, picked, checker.kept - 1))
        return seconds

    try:
        # Round 0: warm-up (compilation), checked, not timed. Then the timed rounds, each of
        # the student's variants and then each clean call in turn (ABAB...): drift over the
        # trial hits both sides alike. Each round's calls to check are picked right after its
        # reply, and checked once the last round is done.
        for name in names:
            student_round(name, 0)
        round_no = 0
        for side, name in alternation(names, clean if server is not None else (), rounds):
            if side == "student":
                if name == names[0]:
                    round_no += 1
                samples[name].append(student_round(name, round_no))
            else:
                seconds, _, _ = _timed_round(server.conn, name, timeout,
                                             "the judge's speed server")
                between.setdefault(name, []).append(seconds)
        for reply, seed, label, picked, index in kept:
            checker.check(talk.conn, reply, seed, timeout, "your code", label, picked, index)
        talk.conn.send_bytes(b'{"do": "end"}')
    except (EOFError, OSError, TimeoutError) as exc:
        failure = exc  # the child ended or stalled: its own outcome says why
    except AssertionError as exc:  # a wrong output (the correctness check) or a forgery
        failure = exc
    except BaseException:
        talk.finish()
        raise
    outcome = talk.finish()
    if outcome.kind != "ok":
        raise SubmissionProblem.for_outcome(outcome.kind, outcome.message)
    if failure is not None:
        if isinstance(failure, AssertionError):
            raise failure
        raise SpeedTrialFailed(f"your code stopped answering the timed requests "
                               f"({type(failure).__name__}: {failure})")
    return samples


PEER_ENV = "MSDA_SPEED_PEER"


def _peer() -> Callable | None:
    """The public peer a forward trial times beside the chip: ``$MSDA_SPEED_PEER`` names it as
    ``module:function`` with mmcv's argument order (value, spatial_shapes, level_start_index,
    sampling_locations, attention_weights), e.g. ``msda_triton:multi_scale_deformable_attention``;
    None where it is unset or does not import on this machine (the leaderboard says so)."""
    import importlib
    import os

    name = os.environ.get(PEER_ENV, "")
    if ":" not in name:
        return None
    module_name, function = name.split(":", 1)
    try:
        fn = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError):
        return None
    return lambda *inputs: fn(*inputs)


def msda_floor_bytes(case, itemsize: int) -> tuple[int, int]:
    """(bytes a forward must touch once: its locations, weights and output; its algorithmic
    bytes, :func:`msda_labs.grading.judge.bandwidth.forward_bytes`)."""
    from msda_labs.grading.judge.bandwidth import forward_bytes

    samples = case.B * case.Q * case.M * case.L * case.K
    unique = (samples * 3 + case.B * case.Q * case.M * case.D) * itemsize
    return unique, forward_bytes(case.B, case.Q, case.M, case.D, case.L, case.K, itemsize)


def judge_msda_speed(submission, case, dtype_name: str, *, fn: str, truth, close, baselines,
                     call: str = "forward", kwargs: Mapping | None = None,
                     n: int | None = None, rounds: int | None = None,
                     verify: int | None = None,
                     variants: Mapping[str, Mapping] | None = None,
                     primary: str | None = None, limits: Sequence[Limit] = ()) -> dict:
    """:func:`judge_speed` on an MSDA case: ``n`` calls a round (16 on a GPU, 4 without), as
    many rounds (9 on a GPU, 3 without), ``verify`` calls checked a round (None: all), the floor
    from the forward's bytes (a forward only)."""
    gpu = torch.cuda.is_available()
    if call == "forward" and "peer" not in baselines:
        peer = _peer()
        if peer is not None:
            baselines = {**baselines, "peer": peer}
    n = n or (16 if gpu else 4)
    rounds = rounds or (9 if gpu else 3)
    op = "forward" if call == "forward" else "backward"
    spec = forward_spec(case, dtype_name, fn=fn, n=n, op=op, call=call, kwargs=kwargs,
                        variants=variants)
    itemsize = torch.empty((), dtype=getattr(torch, dtype_name)).element_size()
    floor = msda_floor_bytes(case, itemsize) if call == "forward" else None
    return judge_speed(submission, spec, truth=truth, close=close, baselines=baselines,
                       rounds=rounds, floor_bytes=floor, verify=verify, primary=primary,
                       limits=limits)
