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

The grader (``msda_labs.grading.judge.guards``) and ``python labNN.py``
(``msda_labs.student.check``) build and read these buffers with the same functions, from this
module. It holds no answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["SENTINEL", "cdiv", "pow2", "guarded", "between_guards", "sentinel_buffer",
           "is_sentinel", "format_index", "mismatch", "GuardScan", "scan_guarded",
           "GuardedAllocations", "StrayWrite"]

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
    """(bad mask, number bad) comparing in float64; NaN/inf must match exactly. On the device
    both tensors are on (the host where they differ); the mask is there too."""
    where = res.device if res.device == ref.device else torch.device("cpu")
    a = res.detach().to(where, torch.float64)
    b = ref.detach().to(where, torch.float64)
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


# -- tensors the code under test allocates itself ------------------------------------------------
# The factory functions whose result a kernel may be handed as an output; the first group hands
# back memory it never initialized.
_UNINITIALIZED = frozenset({"empty", "empty_like", "new_empty", "empty_strided"})
_FACTORIES = _UNINITIALIZED | {"zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
                               "new_zeros", "new_ones", "new_full"}
_PATTERN_BYTE = 0xA5  # the guards of a tensor that is not floating point (and its empty middle)
_MIN_GUARD_BYTES = 1 << 16
_MAX_GUARD_BYTES = 1 << 26


@dataclass(frozen=True)
class StrayWrite:
    """A write outside a tensor that :class:`GuardedAllocations` made: which tensor, on which
    side, how many of its guard elements changed and how far the nearest one lies (0: the element
    right next to the tensor)."""

    made_by: str
    side: str  # "past_end" or "before_start"
    count: int
    nearest: int

    def describe(self) -> str:
        if self.side == "past_end":
            where = ("the nearest right after its last element" if self.nearest == 0
                     else f"the nearest {self.nearest} elements after its last one")
            return (f"wrote {self.count} elements past the end of the tensor it made with "
                    f"{self.made_by} ({where})")
        return (f"wrote {self.count} elements before the start of the tensor it made with "
                f"{self.made_by}")


def _made_by(name: str, t: torch.Tensor) -> str:
    dtype = str(t.dtype).replace("torch.", "")
    prefix = "Tensor." if name.startswith("new_") else "torch."
    return f"{prefix}{name} (shape {tuple(t.shape)}, {dtype})"


class GuardedAllocations(TorchFunctionMode):
    """``with GuardedAllocations() as alloc:``: every tensor made inside the block by a factory
    function (``torch.empty``, ``zeros``, ``full``, their ``_like`` forms, ``Tensor.new_*``,
    ``empty_strided``) is laid out in the middle of a larger buffer whose two guard bands hold a
    fixed pattern, with the strides the call asked for. An ``empty`` tensor's own elements hold
    the :data:`SENTINEL` (floating point) or the pattern (other dtypes), never stale memory.

    A kernel launched on such a tensor that stores past its end (an unmasked tail) writes into
    a guard instead of the heap of the process: in Triton's interpreter, which has no bounds
    checks, that turns a coin toss (a corrupted heap that crashes, or not) into a fact that
    :meth:`strays` reports after the block, every run alike. Each guard is as wide as its tensor
    (64 KiB at least, 64 MiB at most), so a stray store reaching farther still lands in the wild.
    """

    def __init__(self):
        super().__init__()
        # (what made it, element size, the whole buffer, guard bytes, the head guard as filled)
        self._made: list[tuple[str, int, torch.Tensor, int, torch.Tensor]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name not in _FACTORIES or "out" in kwargs or not isinstance(result, torch.Tensor):
            return result
        return self._guard(name, result)

    def _guard(self, name: str, t: torch.Tensor) -> torch.Tensor:
        nbytes = t.untyped_storage().nbytes()
        if (t.layout != torch.strided or t.device.type == "meta" or nbytes == 0
                or t.storage_offset() != 0):
            return t
        size = t.element_size()
        guard = min(max(_MIN_GUARD_BYTES, nbytes), _MAX_GUARD_BYTES)
        guard = -(-guard // 512) * 512
        raw = torch.full((nbytes + 2 * guard,), _PATTERN_BYTE, dtype=torch.uint8, device=t.device)
        typed = raw.view(t.dtype)
        if t.dtype in SENTINEL:
            int_dtype, bits = SENTINEL[t.dtype]
            typed.view(int_dtype).fill_(bits)
        if t.dtype == torch.bool:  # a bool byte other than 0 or 1 is no value at all
            raw[guard:guard + nbytes].zero_()
        if name not in _UNINITIALIZED:
            middle = torch.empty(0, dtype=torch.uint8, device=t.device)
            middle.set_(t.untyped_storage())
            raw[guard:guard + nbytes].copy_(middle)
        out = typed.as_strided(t.shape, t.stride(), guard // size).detach()
        if t.requires_grad:
            out.requires_grad_(True)
        self._made.append((_made_by(name, t), size, raw, guard, raw[:guard].clone()))
        return out

    def owns(self, t: torch.Tensor) -> bool:
        """Whether ``t`` lives in one of the buffers made in the block."""
        ptr = t.untyped_storage().data_ptr()
        return any(made[2].untyped_storage().data_ptr() == ptr for made in self._made)

    def strays(self) -> list[StrayWrite]:
        """The writes into the guards of every tensor made in the block, in the order made."""
        found = []
        for made_by, size, raw, guard, pattern in self._made:
            pattern = pattern.cpu()
            head, tail = raw[:guard].cpu(), raw[raw.numel() - guard:].cpu()
            # Element k of a band: k = 0 is the first element of the head, or the element right
            # after the tensor's last one.
            hit_head = torch.unique((head != pattern).nonzero().flatten() // size)
            hit_tail = torch.unique((tail != pattern).nonzero().flatten() // size)
            if hit_tail.numel():
                found.append(StrayWrite(made_by, "past_end", int(hit_tail.numel()),
                                        int(hit_tail[0])))
            if hit_head.numel():
                found.append(StrayWrite(made_by, "before_start", int(hit_head.numel()),
                                        guard // size - 1 - int(hit_head[-1])))
        return found
