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
:func:`pow2`) run in the forked worker next to the student's code; judge-side helpers
(:func:`check_sentinel_buffer`, :func:`is_sentinel`, :func:`gap`, :func:`run_probe`) read what
came back.
"""

from __future__ import annotations

import math

import torch

from msda_labs.grading.compare import expect_tensor, format_index
from msda_labs.grading.submission import SubmissionCrashed

# A NaN with a payload no arithmetic produces: "still the sentinel" means "never written".
SENTINEL = {
    torch.float32: (torch.int32, 0x7FC0DEAD),
    torch.float16: (torch.int16, 0x7E5A),
    torch.bfloat16: (torch.int16, 0x7FDA),
}


# -- probe side (runs in the isolated child) -----------------------------------------------------
def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative ints, as Triton's ``triton.cdiv``."""
    return -(-a // b)


def pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for ``n <= 1``), as ``triton.next_power_of_2``."""
    return 1 << max(0, (n - 1).bit_length())


def guarded(shape, fill, dtype, device, guard: int, src: torch.Tensor | None = None):
    """A flat buffer of ``n + 2 * guard`` ``fill`` elements and the view of ``shape`` inside it.

    Args:
        shape: shape of the tensor in the middle; ``n = prod(shape)``.
        fill: the value of the guard bands (and of the middle when ``src`` is None).
        dtype: dtype of the buffer.
        device: device of the buffer.
        guard: elements of padding on each side.
        src: optional tensor of ``shape`` copied into the middle.

    Returns:
        ``(buf, view)``: ``buf`` is flat ``(n + 2 * guard,)``, ``view`` is ``buf[guard:guard + n]``
        viewed as ``shape``.
    """
    n = math.prod(shape)
    buf = torch.full((n + 2 * guard,), fill, dtype=dtype, device=device)
    view = buf[guard:guard + n].view(shape)
    if src is not None:
        view.copy_(src)
    return buf, view


def between_guards(t: torch.Tensor, guard: int, fill=float("nan")) -> torch.Tensor:
    """A copy of ``t`` (same shape, dtype, device) inside a flat buffer with ``guard`` ``fill``
    elements on each side; returns the copy (the view), ready to hand to a kernel."""
    return guarded(t.shape, fill, t.dtype, t.device, guard, t)[1]


def sentinel_buffer(shape, dtype, device, guard: int):
    """An output laid out between guard bands, everything filled with the :data:`SENTINEL`.

    Returns:
        ``(buf, out)``: the flat ``(prod(shape) + 2 * guard,)`` buffer (what the probe returns)
        and the view of ``shape`` inside it (what the kernel writes).
    """
    n = math.prod(shape)
    int_dtype, bits = SENTINEL[dtype]
    buf = torch.full((n + 2 * guard,), bits, dtype=int_dtype, device=device).view(dtype)
    return buf, buf[guard:guard + n].view(shape)


# -- judge side -----------------------------------------------------------------------------------
def is_sentinel(t: torch.Tensor) -> torch.Tensor:
    """Bool mask: which elements of ``t`` still hold the sentinel bit pattern of ``t.dtype``."""
    int_dtype, bits = SENTINEL[t.dtype]
    return t.view(int_dtype) == bits


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
    head, body, tail = buf[:guard], buf[guard:guard + n], buf[guard + n:]
    after = (~is_sentinel(tail)).nonzero().flatten()
    if after.numel():
        k = int(after[0])
        raise AssertionError(f"{label}: " + past_end.format(count=after.numel(), gap=gap(k),
                                                            distance=k + 1))
    before = (~is_sentinel(head)).nonzero().flatten()
    if before.numel():
        raise AssertionError(f"{label}: " + before_start.format(count=before.numel()))
    missing = is_sentinel(body).nonzero().flatten()
    if missing.numel():
        raise AssertionError(f"{label}: " + unwritten.format(
            count=missing.numel(), n=n, at=format_index(int(missing[0]), shape)))
    return body.view(shape)


def run_probe(submission, probe, *args, hint: str = ""):
    """``submission.run(probe, *args)``; a crash of the child gets ``hint`` appended (in the
    interpreter a crash is nearly always an access at a wild address)."""
    try:
        return submission.run(probe, *args)
    except SubmissionCrashed as exc:
        raise SubmissionCrashed(f"{exc}; {hint}" if hint else str(exc)) from None
