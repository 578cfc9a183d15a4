"""Guard bands and sentinels: the buffers that make a kernel's stray and missing writes visible.

Triton's interpreter has no bounds checks: a lane whose mask is missing reads or writes whatever
memory lies next to a tensor, silently. So a kernel under test never gets a bare tensor. Each one
sits in the middle of a larger flat buffer:

* a **guard band** is the stretch of ``guard`` elements on each side of the tensor. An input's
  guards hold a harmless ``fill`` (NaN for values, so an unmasked read shows up as NaN in the
  result); an output's guards are read back afterwards, and anything written there is a write past
  the end (an unmasked tail) or before the start (a negative offset);
* a **sentinel** is the value an output is filled with before the launch: a NaN whose bit pattern
  no arithmetic produces. An element that still holds it afterwards was never written.

The grader (``msda_labs.grading.guards``) and ``python labNN.py`` (``msda_labs.student.check``)
build and read these buffers with the same functions, from this module. It holds no answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["SENTINEL", "cdiv", "pow2", "guarded", "between_guards", "sentinel_buffer",
           "is_sentinel", "format_index", "mismatch", "GuardScan", "scan_guarded"]

# A NaN with a payload no arithmetic produces: "still the sentinel" means "never written".
SENTINEL = {
    torch.float32: (torch.int32, 0x7FC0DEAD),
    torch.float16: (torch.int16, 0x7E5A),
    torch.bfloat16: (torch.int16, 0x7FDA),
}


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
        ``(buf, out)``: the flat ``(prod(shape) + 2 * guard,)`` buffer and the view of ``shape``
        inside it (what the kernel writes).
    """
    n = math.prod(shape)
    int_dtype, bits = SENTINEL[dtype]
    buf = torch.full((n + 2 * guard,), bits, dtype=int_dtype, device=device).view(dtype)
    return buf, buf[guard:guard + n].view(shape)


def is_sentinel(t: torch.Tensor) -> torch.Tensor:
    """Bool mask: which elements of ``t`` still hold the sentinel bit pattern of ``t.dtype``."""
    int_dtype, bits = SENTINEL[t.dtype]
    return t.view(int_dtype) == bits


def format_index(flat: int, shape) -> str:
    """The flat offset ``flat`` of a contiguous ``shape`` as an index, e.g. ``"[1, 0, 3]"``
    (``"[]"`` for a scalar)."""
    if not shape:
        return "[]"
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return "[" + ", ".join(str(i) for i in reversed(idx)) + "]"


def mismatch(res: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float):
    """(bad mask, number bad) comparing in float64; NaN/inf must match exactly."""
    a = res.detach().to(torch.float64).cpu()
    b = ref.detach().to(torch.float64).cpu()
    close = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    return ~close, int((~close).sum())


@dataclass(frozen=True)
class GuardScan:
    """What a sentinel output buffer shows after a launch.

    Attributes:
        past_end: positions written in the tail guard, 0 = the element right after the last.
        before_start: how many elements of the head guard were written.
        unwritten: flat offsets (in the output) that still hold the sentinel.
        body: the output itself, flat (``n`` elements).
    """

    past_end: torch.Tensor
    before_start: int
    unwritten: torch.Tensor
    body: torch.Tensor

    @property
    def clean(self) -> bool:
        return not (self.past_end.numel() or self.before_start or self.unwritten.numel())


def scan_guarded(buf: torch.Tensor, n: int, guard: int) -> GuardScan:
    """Read back a :func:`sentinel_buffer` of ``n`` elements between ``guard``-wide bands."""
    buf = buf.detach().cpu()
    head, body, tail = buf[:guard], buf[guard:guard + n], buf[guard + n:]
    return GuardScan(past_end=(~is_sentinel(tail)).nonzero().flatten(),
                     before_start=int((~is_sentinel(head)).sum()),
                     unwritten=is_sentinel(body).nonzero().flatten(), body=body)
