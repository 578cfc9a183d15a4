"""Speed on the judge's clock: the judge's half of a speed trial (the child's half:
:mod:`msda_labs.grading.speedtrial`).

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
never loaded the student's module, run only while no child of the student exists (before the
student's rounds and after its child ended; each baseline counts at the faster of the two
phases). The no-op's round there is the baselines' overhead. The student's overhead is the
no-op's round in a clean child: a child forked from the same worker as the student's, before
the student's child starts and after it ended (the smaller median counts), importing a file of
the kit instead of the student's. Neither no-op runs student code, so a submission can move
neither the overheads nor the baselines. The student's rounds run back to back, as the
baselines' do; the outputs they keep are checked after the last one. A time per call is
``(median round - median no-op round) / n``.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import torch

from msda_labs.grading import speedtrial
from msda_labs.grading.submission import SubmissionProblem

__all__ = ["forward_spec", "judge_speed", "judge_msda_speed", "msda_floor_bytes",
           "expect_close_but_borders", "BORDER_SHARE",
           "SpeedTrialFailed", "device_bandwidth_gbs",
           "CACHE_FACTOR", "METHOD"]

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


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def device_bandwidth_gbs(nbytes: int = 1 << 30) -> float | None:
    """DRAM bandwidth the judge measures itself: a device-to-device copy of ``nbytes``, read and
    write counted, best of 5 (GB/s); None without CUDA."""
    if not torch.cuda.is_available():
        return None
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(6):
        _sync()
        start = time.perf_counter()
        dst.copy_(src)
        _sync()
        best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best / 1e9


# Location gradients jump where a sample crosses a pixel border (the bilinear weights' slopes
# change there), and two right fp32 implementations can round a sample near a border to different
# sides: among the many random samples of a speed trial, a few elements of an honest kernel's
# grad_loc can differ from the reference's by more than the tolerance. A trial allows this share.
BORDER_SHARE = 1e-3


def expect_close_but_borders(res, ref, *, what: str, case: str = "", dtype=None,
                             share: float = BORDER_SHARE, **kwargs) -> None:
    """:func:`msda_labs.grading.compare.expect_close` (backward tolerance), except that at
    most ``share`` of the elements may differ, none of them NaN or infinite: for a location
    gradient on the random inputs of a speed trial (:data:`BORDER_SHARE`)."""
    from msda_labs.grading.compare import expect_close, mismatch, tolerance

    try:
        expect_close(res, ref, what=what, case=case, dtype=dtype, backward=True, **kwargs)
    except AssertionError:
        if not isinstance(res, torch.Tensor) or res.shape != ref.shape or \
                not bool(torch.isfinite(res.detach().double()).all()):
            raise
        rtol, atol = tolerance(dtype or res.dtype, backward=True)
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
        sets, weights = speedtrial.draw_round(spec, seed, _device())
        for i, flat in zip(picked, shown):
            w = weights[i].double().cpu()
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
            expected = _on_cpu(self.truth(sets[i]))
            self.close(tuple(parts) if len(parts) > 1 else parts[0], expected,
                       f"timed call {i + 1} of round {round_no}")
            self.checked += 1


def _on_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_on_cpu(x) for x in obj)
    return obj


def _describe(meta) -> str:
    return ", ".join(f"{d}{tuple(s)}" for s, d in meta)


# -- the trial -------------------------------------------------------------------------------------
def _clean_rounds(server: _CleanServer, names, rounds: int, times: dict, timeout: float) -> None:
    for _ in range(rounds):
        for name in names:
            seconds, _, _ = _timed_round(server.conn, name, timeout, "the judge's speed server")
            times.setdefault(name, []).append(seconds)


def _per_call_us(samples: list[float], noop: float, n: int) -> float:
    return (statistics.median(samples) - noop) / n * 1e6


def _spread_us(samples: list[float], n: int) -> float:
    if len(samples) < 2:
        return 0.0
    q = statistics.quantiles(samples, n=4)
    return (q[2] - q[0]) / n * 1e6


def _record(submission, spec: Mapping, primary: str, measured: dict | None,
            failed: str = "") -> None:
    """Keep the trial's outcome in the grade result (``GradeResult.speed``), for the class
    leaderboard: its times per call, or why it has none."""
    session = getattr(submission, "_session", None)
    records = getattr(session, "speed", None)
    if not isinstance(records, list):
        return
    names = list(speedtrial.variants(spec))
    label = spec["fn"] if names == ["yours"] else f"{spec['fn']} ({', '.join(names)})"
    record = {"key": f"{label} on {spec.get('case_id') or 'a case'} in {spec['dtype']}",
              "fn": spec["fn"], "case": spec.get("case_id", ""), "dtype": spec["dtype"],
              "primary": primary, "status": "failed" if failed else "timed", "why": failed}
    if measured is not None:
        record.update({k: measured[k] for k in ("times_us", "spread_us", "overhead_us", "n",
                                                "rounds", "device", "verified", "floor_us",
                                                "method")})
    records.append(record)


def judge_speed(submission, spec: Mapping, *, truth: Callable[[tuple], Any],
                close: Callable[[Any, Any, str], None],
                baselines: Mapping[str, Callable | None], rounds: int = 9,
                verify: int | None = None, timeout: float | None = None,
                floor_bytes: tuple[int, int] | None = None, primary: str | None = None) -> dict:
    """:func:`_judge_speed` (see there), its outcome kept for the leaderboard; ``primary`` names
    the variant a ranking reads (default: the first)."""
    primary = primary or next(iter(speedtrial.variants(spec)))
    try:
        measured = _judge_speed(submission, spec, truth=truth, close=close,
                                baselines=baselines, rounds=rounds, verify=verify,
                                timeout=timeout, floor_bytes=floor_bytes)
    except (AssertionError, SubmissionProblem) as exc:
        _record(submission, spec, primary, getattr(exc, "measured", None),
                f"{type(exc).__name__}: {str(exc)[:300]}")
        raise
    _record(submission, spec, primary, measured)
    return measured


def _judge_speed(submission, spec: Mapping, *, truth: Callable[[tuple], Any],
                 close: Callable[[Any, Any, str], None],
                 baselines: Mapping[str, Callable | None], rounds: int = 9,
                 verify: int | None = None, timeout: float | None = None,
                 floor_bytes: tuple[int, int] | None = None) -> dict:
    """Time the student's calls (``spec["fn"]`` as "yours", or ``spec["variants"]``) and the
    ``baselines`` on the judge's clock.

    Args:
        submission: the test's ``submission`` fixture (its ``converse`` starts the child).
        spec: :func:`forward_spec`.
        truth: the ground truth of one input set (the tuple the call gets).
        close: ``close(output, expected, what)`` raises AssertionError when they differ (the
            correctness tests' tolerance).
        baselines: ``{name: call on one input set}`` timed in the clean server (None: left out).
        rounds: timed rounds of the student's call; the baselines get as many, half before and
            half after the student's child.
        verify: iterations checked per round, picked at random after the reply (None: all).
        floor_bytes: (bytes the operator must touch once, its algorithmic bytes): the floor.

    Returns:
        A timing as :func:`msda_labs.grading.timing.check_reference_speed` reads it:
        ``{"times_us": {"yours", *baselines}, "method": "judge-clock", ...}`` with
        ``"overhead_us"``, ``"spread_us"``, ``"rounds"``, ``"n"``, ``"verified"`` and
        ``"floor_us"``.

    Raises:
        SpeedTrialFailed: a timed output, or its checksum, is wrong; or the time is below the
            floor (flagged for review).
        SubmissionProblem: the student's code raised, crashed or ran out of time.
    """
    n = int(spec["n"])
    timeout = float(timeout or getattr(getattr(submission, "_session", None), "timeout", 0)
                     or 120.0)
    present = {k: v for k, v in baselines.items() if v is not None}
    names = ["noop", *present]
    checker = _Checker(spec, truth, close, verify)
    times: dict[str, list[float]] = {}
    server = _CleanServer({"noop": speedtrial.noop_call(spec), **present}, spec)
    try:
        _clean_rounds(server, names, 1, {}, timeout)  # warm: compilation, allocations
        first: dict[str, list[float]] = {}
        _clean_rounds(server, names, (rounds + 1) // 2, first, timeout)
        before = _clean_child_rounds(submission, spec, rounds, timeout)
        times.update(_student_rounds(submission, spec, checker, rounds, timeout))
        after = _clean_child_rounds(submission, spec, rounds, timeout)
        second: dict[str, list[float]] = {}
        _clean_rounds(server, names, rounds // 2 + 1, second, timeout)
        for name in names:
            times[name] = first[name] + second[name]
    finally:
        server.close()
    noop = statistics.median(times["noop"])
    # The student's rounds less a clean child's no-op (the same kind of process, forked from the
    # same worker, running no student code); the baselines' less the server's no-op.
    # Before and after the student's child: work it left behind (a long kernel still running
    # when it ended) could only make the later no-op slower, so the smaller median counts.
    child = min(statistics.median(before), statistics.median(after)) if before and after \
        else noop
    yours = set(speedtrial.variants(spec))
    per_call = {name: _per_call_us(times[name], child, n) for name in yours}
    # A baseline counts at the faster of its two phases (before the student's child, after it):
    # work the student's child left running could only slow the second.
    for name in present:
        per_call[name] = min(_per_call_us(phase[name], statistics.median(phase["noop"]), n)
                             for phase in (first, second))
    bandwidth = device_bandwidth_gbs()
    floor_us = None
    if floor_bytes is not None and bandwidth:
        unique, algorithmic = floor_bytes
        floor_us = max(unique / (bandwidth * 1e3), algorithmic / (CACHE_FACTOR * bandwidth * 1e3))
    measured = {
        "times_us": {name: max(us, 1e-3) for name, us in per_call.items()},
        "raw_times_us": per_call,
        "method": METHOD, "reps": int(rounds), "rounds": int(rounds), "n": n,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "flushed_l2": False,
        "overhead_us": child / n * 1e6, "overhead_round_us": child * 1e6,
        "server_overhead_us": noop / n * 1e6, "clean_child": bool(before and after),
        "spread_us": {name: _spread_us(v, n) for name, v in times.items()},
        "verified": checker.checked, "floor_us": floor_us, "bandwidth_gbs": bandwidth,
    }
    for name in speedtrial.variants(spec):
        if floor_us is not None and per_call[name] < floor_us:
            raise SpeedTrialFailed.with_times(
                measured, f"flagged for review, not credited: {per_call[name]:.2f} us a call "
                f"({name}) on the judge's clock is below the {floor_us:.2f} us that moving "
                f"its bytes takes at the {bandwidth:.0f} GB/s measured on this device")
    return measured


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


def _student_rounds(submission, spec, checker: _Checker, rounds: int, timeout: float):
    talk = submission.converse(speedtrial.serve, dict(spec), timeout=timeout)
    names = list(speedtrial.variants(spec))
    samples: dict[str, list[float]] = {name: [] for name in names}
    failure: BaseException | None = None
    try:
        # The timed rounds run back to back, as the baselines' do: each round's calls to check
        # are picked right after its reply, and checked once the last round is done.
        kept = []
        for round_no in range(rounds + 1):  # round 0: warm-up (compilation), checked, not timed
            for name in names:  # the variants alternate round by round: drift hits all alike
                seconds, seed, raw = _timed_round(talk.conn, name, timeout, "your code")
                reply = checker.reply(raw)
                label = round_no if len(names) == 1 else f"{round_no} ({name})"
                picked = checker.pick(talk.conn, reply, label)
                kept.append((reply, seed, label, picked, checker.kept - 1))
                if round_no:
                    samples[name].append(seconds)
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
    submission._session.last_output = outcome.output
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
    bytes, :func:`msda_labs.grading.bandwidth.forward_bytes`)."""
    from msda_labs.grading.bandwidth import forward_bytes

    samples = case.B * case.Q * case.M * case.L * case.K
    unique = (samples * 3 + case.B * case.Q * case.M * case.D) * itemsize
    return unique, forward_bytes(case.B, case.Q, case.M, case.D, case.L, case.K, itemsize)


def judge_msda_speed(submission, case, dtype_name: str, *, fn: str, truth, close, baselines,
                     call: str = "forward", kwargs: Mapping | None = None,
                     n: int | None = None, rounds: int | None = None,
                     verify: int | None = None,
                     variants: Mapping[str, Mapping] | None = None,
                     primary: str | None = None) -> dict:
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
                       rounds=rounds, floor_bytes=floor, verify=verify, primary=primary)
