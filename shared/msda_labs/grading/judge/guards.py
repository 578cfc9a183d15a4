"""Guard bands and sentinels: catching stray and missing writes of a student kernel.

Triton's interpreter (the CPU stage of labs 04-10) has no bounds checks: a lane whose mask is
missing loads from or stores to whatever memory lies next to the tensor, silently. The kernel
labs' tests therefore never hand a student kernel a bare tensor. They lay every tensor out in
the middle of a larger flat buffer:

* A **guard band** is the stretch of ``guard`` elements on each side of the tensor inside that
  buffer. An input's guards hold a harmless ``fill`` (NaN for values, so an unmasked read
  poisons the result visibly; an out-of-range index or bin where a read-through must land
  somewhere known). An output's guards come back to the judge, which looks for anything the
  kernel wrote there: a write past the end is an unmasked tail, a write before the start a
  negative offset. The guard is sized by each lab to the widest overrun a missing mask can make,
  so the stray write lands in the band rather than in the wild.
* A **sentinel** is the value an output buffer is filled with before the launch: a NaN whose
  bit pattern (payload) no arithmetic produces. An element of the output that still holds the
  sentinel afterwards was never written, which a plain ``torch.empty`` output would hide.

Probe-side helpers (:func:`between_guards`, :func:`guarded`, :func:`sentinel_buffer`, :func:`cdiv`,
:func:`pow2`) run in the forked worker next to the student's code; they live in
:mod:`msda_labs.student.guards`, so that ``python labNN.py`` builds and reads the same bands, and
are handed on here. Judge-side helpers (:func:`check_sentinel_buffer`, :func:`gap`,
:func:`run_probe`) read what came back.
"""

from __future__ import annotations

import math

import torch

from msda_labs.grading.judge.compare import Mismatch, expect_tensor, function_named
from msda_labs.grading.judge.results import Evidence
from msda_labs.grading.judge.submission import SubmissionCrashed
from msda_labs.student.guards import (  # the probe side lives with the student modules
    SENTINEL,
    between_guards,
    cdiv,
    format_index,
    guarded,
    is_sentinel,
    mismatch,
    pow2,
    scan_guarded,
    sentinel_buffer,
)

__all__ = ["SENTINEL", "between_guards", "cdiv", "guarded", "is_sentinel", "pow2",
           "sentinel_buffer", "gap", "literal", "check_sentinel_buffer", "run_probe"]


# -- judge side -----------------------------------------------------------------------------------
def gap(k: int) -> str:
    """Words for the ``k``-th element past the end of a tensor (``k = 0``: the very next one)."""
    return "right after its last element" if k == 0 else f"{k} elements after its last one"


def literal(text: str) -> str:
    """``text`` made safe to splice into a :meth:`str.format` template (braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")


def check_sentinel_buffer(buf, shape, dtype, guard: int, *, label: str, past_end: str,
                          before_start: str, unwritten: str, expected: torch.Tensor | None = None,
                          rtol: float = 0.0, atol: float = 0.0, tail: str = "") -> torch.Tensor:
    """Check a :func:`sentinel_buffer` that came back: guards untouched, every element written.

    The three messages are :meth:`str.format` templates (splice fixed text in with
    :func:`literal`), raised as ``f"{label}: {template.format(...)}"`` in a
    :class:`~msda_labs.grading.judge.compare.Mismatch` whose evidence holds the positions written
    past the end, the count before the start and the count never written, with these fields:

    * ``past_end``: ``count`` elements written in the tail guard; ``gap`` (:func:`gap` of the
      nearest) and ``distance`` (1 for the element right after the last) say how far.
    * ``before_start``: ``count`` elements written in the head guard.
    * ``unwritten``: ``count`` of ``n`` elements still hold the sentinel, the first at
      ``at`` (:func:`~msda_labs.grading.judge.compare.format_index` of it in ``shape``).

    A write past the end is explained as ``tail`` (an unmasked tail) only when the evidence
    rules the alternatives out: an unmasked tail leaves every in-bounds element written and, when
    ``expected`` is given, right (within ``rtol``/``atol``); a wrong stride or offset does not.
    Otherwise the message says what was seen and that no known mistake matches.

    Args:
        buf: the flat buffer the probe returned; must be ``(prod(shape) + 2 * guard,)`` of
            ``dtype`` (checked with expect_tensor under ``label``).
        shape: shape of the output in the middle.
        dtype: the expected dtype (a key of :data:`SENTINEL`).
        guard: the guard band the probe used.
        label: what was run on which case; starts every message.
        past_end: message template for a write past the end.
        before_start: message template for a write before the start.
        unwritten: message template for elements never written.
        expected: the right output (``shape``), to tell an unmasked tail from a wrong offset.
        rtol, atol: the tolerance of that comparison.
        tail: what a write past the end means when it is an unmasked tail (one sentence,
            ``label: why``); appended to ``past_end`` only then.

    Returns:
        The output, ``shape``.
    """
    n = math.prod(shape)
    buf = expect_tensor(buf, label, shape=(n + 2 * guard,), dtype=dtype)
    scan = scan_guarded(buf, n, guard)
    body = buf[guard:guard + n].view(shape)
    evidence = Evidence(case=label, function=function_named(label), total=n,
                        past_end=[int(k) for k in scan.past_end[:16]],
                        before_start=scan.before_start,
                        unwritten=int(scan.unwritten.numel()) or None)
    if scan.unwritten.numel():
        evidence.first_wrong = format_index(int(scan.unwritten[0]), shape)
    if scan.past_end.numel():
        k = int(scan.past_end[0])
        count = scan.past_end.numel()
        wrong = _wrong_inside(body, expected, rtol, atol, evidence)
        if not scan.unwritten.numel() and not scan.before_start and not wrong:
            message = past_end.format(count=count, gap=gap(k), distance=k + 1)
            if tail:
                message += "; " + tail
                evidence.named = tail.removeprefix("this is ")
            raise Mismatch(f"{label}: {message}", evidence)
        outside = f"it wrote {count} elements past the end of the output (the nearest {gap(k)})"
        if scan.unwritten.numel():
            inside = (f"{scan.unwritten.numel()} of {n} in-bounds elements were never written "
                      f"(first at {evidence.first_wrong})")
        elif scan.before_start:
            inside = f"{scan.before_start} elements were written before its start"
        else:
            inside = (f"{wrong} of {n} in-bounds elements are wrong (first at "
                      f"{evidence.first_wrong}: yours {evidence.yours:.6g}, reference "
                      f"{evidence.reference:.6g})" if evidence.yours is not None else
                      f"{wrong} of {n} in-bounds elements are wrong (first at "
                      f"{evidence.first_wrong})")
        raise Mismatch(f"{label}: {outside}, and {inside}: no known mistake matches; check "
                       f"where each element is stored", evidence)
    if scan.before_start:
        raise Mismatch(f"{label}: " + before_start.format(count=scan.before_start), evidence)
    if scan.unwritten.numel():
        raise Mismatch(f"{label}: " + unwritten.format(
            count=scan.unwritten.numel(), n=n, at=evidence.first_wrong), evidence)
    return body


def _wrong_inside(body, expected, rtol: float, atol: float, evidence: Evidence) -> int:
    """How many written in-bounds elements differ from ``expected`` (0 when not given); the
    first one goes into ``evidence``."""
    if expected is None or tuple(expected.shape) != tuple(body.shape):
        return 0
    written = ~is_sentinel(body)
    bad, _ = mismatch(body, expected, rtol, atol)
    bad &= written.cpu()
    n_bad = int(bad.sum())
    if n_bad:
        flat = int(bad.flatten().nonzero()[0])
        evidence.wrong = n_bad
        evidence.first_wrong = evidence.first_wrong or format_index(flat, tuple(body.shape))
        if not evidence.unwritten:
            evidence.first_wrong = format_index(flat, tuple(body.shape))
            yours = float(body.flatten()[flat])
            ref = float(expected.flatten()[flat])
            evidence.yours = yours if yours == yours else None
            evidence.reference = ref if ref == ref else None
    return n_bad


def run_probe(submission, probe, *args, hint: str = ""):
    """``submission.run(probe, *args)``; a crash of the child gets ``hint`` appended (in the
    interpreter a crash is nearly always an access at a wild address)."""
    try:
        return submission.run(probe, *args)
    except SubmissionCrashed as exc:
        raise SubmissionCrashed(f"{exc}; {hint}" if hint else str(exc)) from None
