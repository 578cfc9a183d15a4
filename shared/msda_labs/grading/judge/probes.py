"""Shared probes: the course's MSDA kernels launched on guarded buffers, and the judge's side of it.

A lab's probes module (``lab-NN-slug/tests/probes_labNN.py``) holds the functions its tests hand
to ``submission.run``; they run in the forked child, next to the student's code, and build on
the probe side here:

The probe side lives in :mod:`msda_labs.student.launch` (so that ``python labNN.py`` launches a
kernel on the same guard bands) and is handed on here:

* :func:`launch_forward` / :func:`launch_backward`: one launch of a forward or backward kernel
  with the signature the labs fix (``value, spatial_shapes, level_start_index, loc, attn, ...,
  Q, S, M=, D=, L=, K=, BLOCK_Q=, ...``) and the grid its wrapper uses;
* :func:`forward_into_sentinel` / :func:`backward_into_sentinels`: the same on copies of the
  inputs between guard bands (NaN, so a stray read poisons the result) into outputs laid out
  between guards and pre-filled with the sentinel (so a stray or a missing write shows): the
  whole buffers come back to the judge (see :mod:`msda_labs.grading.judge.guards`).

* :func:`guards_allocations`: a probe decorator for the paths where the student's own code
  allocates what a kernel writes (a launcher such as ``msda_forward``): in the interpreter, every
  tensor it makes lies between guard bands (:class:`~msda_labs.student.guards.GuardedAllocations`),
  and a write into them fails the request with :class:`OutOfBoundsWrite`, the same on every run;
* :func:`both_runs`: a function run twice, with the grader's stand-ins for the parts it is built
  on and with the student's own;
* :func:`compile_ahead`: the probes a GPU stage's tests will run, all at once in threads of one
  child, so that their kernels compile in parallel before the first test needs them.

The judge side: :func:`expect_either` (passes when either of :func:`both_runs`' runs matches its
reference), :func:`run_guarded` (a crash gets the hint that a crash in the interpreter is
nearly always a wild address), :func:`shared_run` (one child run that serves several tests, its
crash served to each alike), :func:`check_forward_output` (guards intact, every element written)
and :func:`timed_output`. Timing itself is :mod:`msda_labs.grading.speed.timing`.
"""

from __future__ import annotations

import functools

import torch

from msda_labs.grading.judge.guards import check_sentinel_buffer, run_probe
from msda_labs.grading.judge.submission import SubmissionProblem
from msda_labs.student import runtime
from msda_labs.student.guards import GuardedAllocations
from msda_labs.student.launch import (  # the probe side lives with the student modules
    backward_into_sentinels,
    forward_guard,
    forward_into_sentinel,
    launch_backward,
    launch_forward,
    on_device,
    point_guard,
    value_guard,
)

__all__ = ["CRASH_HINT", "on_device", "forward_guard", "launch_forward", "forward_into_sentinel",
           "launch_backward", "backward_into_sentinels", "value_guard", "point_guard",
           "run_guarded", "shared_run", "check_forward_output", "timed_output",
           "OutOfBoundsWrite", "guards_allocations", "ALLOCATION_HINT", "expect_either",
           "own_run", "both_runs", "compile_ahead", "COMPILE_AHEAD_S"]

CRASH_HINT = ("in the interpreter a crash is almost always a load or store at a wild address: "
              "an unmasked lane, or an offset that overflowed")


# -- probe side: what the student's code allocates itself ---------------------------------------
ALLOCATION_HINT = ("this is an unmasked tail: a store went past the end of an output, so the "
                   "store mask must cover both the rows past the last query and the channels "
                   "past D")


class OutOfBoundsWrite(RuntimeError):
    """The code under test wrote outside a tensor it allocated itself (into the guard band that
    :func:`guards_allocations` laid around it)."""


def _unshared(value, alloc: GuardedAllocations):
    """``value`` with every tensor that lives in a guarded buffer copied out of it (the guards
    need not travel back to the judge)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone() if alloc.owns(value) else value
    if isinstance(value, dict):
        return {k: _unshared(v, alloc) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_unshared(v, alloc) for v in value)
    return value


def guards_allocations(hint: str = ALLOCATION_HINT):
    """Decorate a probe whose call lets the student's code allocate a kernel's output.

    In Triton's interpreter (no bounds checks), the probe runs inside
    :class:`~msda_labs.student.guards.GuardedAllocations`: every tensor made by a factory
    function lies between guard bands, so a store past its end lands in a band instead of the
    process's heap (which, corrupted, crashes some runs and not others). A band written raises
    :class:`OutOfBoundsWrite` naming the tensor, how far the write went and ``hint``: the same
    verdict on every run. Outside the interpreter the probe runs as it is.
    """

    def decorate(probe):
        @functools.wraps(probe)
        def guarded_probe(module, *args, **kwargs):
            if not runtime.interpreted():
                return probe(module, *args, **kwargs)
            failure = None
            with GuardedAllocations() as alloc:
                try:
                    value = probe(module, *args, **kwargs)
                except NotImplementedError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a stray write explains it better
                    failure = exc
            strays = alloc.strays()
            if strays:
                raise OutOfBoundsWrite(f"your code {strays[0].describe()}; {hint} (the grader "
                                       f"laid a guard band around every tensor your code made, "
                                       f"so the stray write landed there)")
            if failure is not None:
                raise failure
            return _unshared(value, alloc)

        return guarded_probe

    return decorate


# -- probe side: a function run with stand-ins for its parts, and with its own -----------------
def own_run(run, *args):
    """``run(*args)``, an error in it turned into ``{"error": "Type: first line"}`` (probe side:
    the run with the student's own parts, next to the stand-in run that decides not attempted)."""
    try:
        return run(*args)
    except Exception as exc:  # noqa: BLE001 - NotImplementedError too: a part left as a stub
        text = str(exc).strip().splitlines()
        return {"error": f"{type(exc).__name__}: {text[0] if text else ''}"[:300]}


def both_runs(module, stand_ins: dict, run, *args) -> dict:
    """Probe side of :func:`expect_either`: ``run(module, *args)`` with the module's globals
    named in ``stand_ins`` replaced by its values (a stub of the function under test is then not
    attempted), then again with the module's own (:func:`own_run`). ``stand_in_calls``: how many
    calls reached the stand-ins in the first run."""
    calls = [0]

    def reached(part):
        def counted(*a, **kw):
            calls[0] += 1
            return part(*a, **kw)

        return counted

    originals = {name: getattr(module, name, None) for name in stand_ins}
    for name, part in stand_ins.items():
        setattr(module, name, reached(part))
    try:
        with_stand_ins = run(module, *args)
    finally:
        for name, part in originals.items():
            setattr(module, name, part)
    return {"stand_in": with_stand_ins, "own": own_run(run, module, *args),
            "stand_in_calls": calls[0]}


# -- judge side ----------------------------------------------------------------------------------
def expect_either(result, check_stand_in, check_own, *, note: str) -> None:
    """Grade a function apart from the parts it is built on (labs 00 and 03).

    The child ran it twice in one request (``{"stand_in": ..., "own": ...}``): with the parts
    replaced by the grader's stand-ins (which read or count in a way of their own and answer no
    task, so no ground truth reaches the child) and with the student's own parts (``{"error":
    ...}`` when that run raised). The judge computed its reference both ways; the test passes when
    either run passes its check (each raises AssertionError with the feedback). So a bug in a
    part costs points in the part's own task only.

    Otherwise the feedback is the own run's (values the student can reproduce by hand, and a
    familiar mistake named only on the evidence of the student's own output), unless that run
    raised: then the stand-in run's, with ``note`` saying how that run was made.

    The stand-in run counts only when a call reached the stand-ins (``stand_in_calls``): the
    stand-ins are shipped, and a function that does the stand-ins' work itself (a copy of one)
    would otherwise match the stand-in run without being built on its parts.
    """
    if not isinstance(result, dict) or "stand_in" not in result or "own" not in result:
        raise AssertionError(f"the probe's result has the wrong form: {type(result).__name__}")
    stand_in, own = result["stand_in"], result["own"]
    try:
        if result.get("stand_in_calls", 1) < 1:
            raise AssertionError("with the grader's stand-ins in place of the parts it is built "
                                 "on, it never called them")
        check_stand_in(stand_in)
        return
    except AssertionError as exc:
        stand_in_failure = str(exc)
    if isinstance(own, dict) and "error" in own:
        raise AssertionError(f"{stand_in_failure} ({note}; with your own parts it raised "
                             f"{own['error']})")
    check_own(own)


def run_guarded(submission, probe, *args, hint: str = CRASH_HINT):
    """``submission.run(probe, *args)``; a crash of the child gets ``hint`` appended."""
    return run_probe(submission, probe, *args, hint=hint)


_SHARED: dict = {}


def shared_run(submission, key, probe, *args, hint: str = CRASH_HINT):
    """One child run of ``probe`` that serves every test asking with the same ``key`` (the same
    inputs, the same result); an exception of the submission is served to each of them alike.

    The cache is per submission and grading mode, so one judge process can grade several.
    """
    full_key = (str(getattr(submission, "path", "")), getattr(submission, "mode", ""), key)
    if full_key not in _SHARED:
        try:
            _SHARED[full_key] = ("ok", run_guarded(submission, probe, *args, hint=hint))
        except SubmissionProblem as exc:
            _SHARED[full_key] = ("raised", exc)
    kind, value = _SHARED[full_key]
    if kind == "raised":
        raise value
    return value


FORWARD_OVERRUN = ("this is an unmasked tail: the store mask must be mask_q[:, None] & "
                   "mask_d[None, :], so that neither the rows past Q nor the channels past D are "
                   "written")


def check_forward_output(buf, shape, dtype, guard: int, *, what: str, case: str,
                         overrun_hint: str = FORWARD_OVERRUN,
                         expected: torch.Tensor | None = None, rtol: float = 0.0,
                         atol: float = 0.0) -> torch.Tensor:
    """Guard bands of a forward output intact and every element written.

    Args:
        buf: the flat buffer :func:`forward_into_sentinel` returned.
        shape: ``(B, Q, M, D)`` of the output.
        dtype: the output's dtype.
        guard: its guard band (:func:`forward_guard`).
        what, case: what ran on which case; start every message.
        overrun_hint: what a write past the end means here, said only when every in-bounds
            element is written (and right, when ``expected`` is given).
        expected: the right output, ``(B, Q, M * D)`` or ``(B, Q, M, D)``; rtol, atol: its
            tolerance.

    Returns:
        The output as ``(B, Q, M * D)``.
    """
    B, Q, M, D = shape
    out = check_sentinel_buffer(
        buf, (B, Q, M, D), dtype, guard, label=f"{what} on {case}",
        expected=None if expected is None else expected.reshape(B, Q, M, D), rtol=rtol,
        atol=atol, tail=overrun_hint,
        past_end="the kernel wrote {count} elements past the end of out (the nearest {gap})",
        before_start="the kernel wrote {count} elements before the start of out; an offset went "
                     "negative",
        unwritten="{count} of {n} output elements were never written (first at out{at} of "
                  "(B, Q, M, D)); this is an output never written in full: every (b, q, m, d) "
                  "must be stored by exactly one program: check the grid decode (b, m), offs_q "
                  "and the store offsets (b * Q + q) * M + m")
    return out.view(B, Q, M * D)


def timed_output(measured, name: str = "yours"):
    """The output of ``name``'s first (untimed) call in a
    :func:`~msda_labs.grading.speed.timing.race_all`
    result; None when there is none (the judge's comparison then fails with a clear message)."""
    return measured.get("outputs", {}).get(name) if isinstance(measured, dict) else None


# -- a GPU stage's kernels, compiled ahead ---------------------------------------------------------
COMPILE_AHEAD_S = 240.0  # the longest the threads of compile_ahead are waited for


def compile_ahead(module, calls, limit_s: float = COMPILE_AHEAD_S) -> dict[str, str]:
    """Run every ``(probe, args)`` of ``calls`` on ``module`` once, all at the same time, each in
    a thread of its own, and drop what they return.

    Triton compiles with the GIL released, so the kernels that these calls launch compile in
    parallel, one core each, into the kernel cache that the stage's later children share (the
    sandbox's, kept for the executor's life): a test that makes the same call then finds its
    kernels compiled. Nothing here is graded or shown: a call that fails (or is not finished
    after ``limit_s``) leaves its kernels to the test that makes it, which compiles them and
    reports what goes wrong itself. Returns, per call in order, "ok", "unfinished" or the
    exception's type name."""
    import threading
    import time

    done: dict[int, str] = {}

    def run(i, probe, args):
        try:
            probe(module, *args)
            done[i] = "ok"
        except BaseException as exc:  # noqa: BLE001 - the test that makes this call reports it
            done[i] = type(exc).__name__

    threads = [threading.Thread(target=run, args=(i, probe, tuple(args)), daemon=True,
                                name=f"compile-ahead-{i}")
               for i, (probe, args) in enumerate(calls)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + limit_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    if all(not t.is_alive() for t in threads) and torch.cuda.is_available():
        torch.cuda.synchronize()
    return {str(i): done.get(i, "unfinished") for i in range(len(threads))}
