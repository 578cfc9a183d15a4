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

from msda_labs.grading.compare import expect_tensor
from msda_labs.grading.submission import SubmissionCrashed
from msda_labs.student.guards import (  # the probe side lives with the student modules
    SENTINEL,
    between_guards,
    cdiv,
    format_index,
    guarded,
    is_sentinel,
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
                          before_start: str, unwritten: str) -> torch.Tensor:
    """Check a :func:`sentinel_buffer` that came back: guards untouched, every element written.

    The three messages are :meth:`str.format` templates (splice fixed text in with
    :func:`literal`), raised as
    ``AssertionError(f"{label}: {template.format(...)}")``, with these fields:

    * ``past_end``: ``count`` elements written in the tail guard; ``gap`` (:func:`gap` of the
      nearest) and ``distance`` (1 for the element right after the last) say how far.
    * ``before_start``: ``count`` elements written in the head guard.
    * ``unwritten``: ``count`` of ``n`` elements still hold the sentinel, the first at
      ``at`` (:func:`~msda_labs.grading.compare.format_index` of it in ``shape``).

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

    Returns:
        The output, ``shape``.
    """
    n = math.prod(shape)
    buf = expect_tensor(buf, label, shape=(n + 2 * guard,), dtype=dtype)
    scan = scan_guarded(buf, n, guard)
    if scan.past_end.numel():
        k = int(scan.past_end[0])
        raise AssertionError(f"{label}: " + past_end.format(count=scan.past_end.numel(),
                                                            gap=gap(k), distance=k + 1))
    if scan.before_start:
        raise AssertionError(f"{label}: " + before_start.format(count=scan.before_start))
    if scan.unwritten.numel():
        raise AssertionError(f"{label}: " + unwritten.format(
            count=scan.unwritten.numel(), n=n, at=format_index(int(scan.unwritten[0]), shape)))
    return buf[guard:guard + n].view(shape)


def run_probe(submission, probe, *args, hint: str = ""):
    """``submission.run(probe, *args)``; a crash of the child gets ``hint`` appended (in the
    interpreter a crash is nearly always an access at a wild address)."""
    try:
        return submission.run(probe, *args)
    except SubmissionCrashed as exc:
        raise SubmissionCrashed(f"{exc}; {hint}" if hint else str(exc)) from None
