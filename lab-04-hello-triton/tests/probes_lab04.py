"""Probes of lab 04: what the isolated child runs. The judge is test_lab04_hello.py.

Each probe launches the student's kernel itself, with the signature the lab fixes, into an output
between guard bands pre-filled with the sentinel, and returns the whole flat buffer; inputs sit
between guard bands too (msda_labs.grading.judge.guards says what guards and sentinels catch). The
guard sizes are shared with the judge, which needs them to unpack the buffer.
"""

import torch

from msda_labs.grading.judge.guards import between_guards, cdiv, pow2, sentinel_buffer
from msda_labs.student import runtime

IN_GUARD = 16  # guard band around each input


def copy_guard(block_r: int, block_c: int) -> int:
    """Guard band of copy2d_kernel's output: wider than one unmasked tile."""
    return max(64, 2 * block_r * block_c)


def gather_guard(block: int) -> int:
    """Guard band of gather_kernel's output: wider than one unmasked block."""
    return max(64, 2 * block)


def bilinear_guard(block_q: int, D: int) -> int:
    """Guard band of bilinear_kernel's output: wider than one unmasked (BLOCK_Q, BLOCK_D) tile."""
    return max(64, 2 * block_q * pow2(D))


def bilinear_image_guard(H: int, W: int, D: int) -> int:
    """Guard band of bilinear_kernel's image: the whole image again on each side, with a ring of
    two pixels. A corner loaded without its own bounds mask lies outside the image by as much as
    the locations reach past a border (20% of a side) plus one pixel, which is rows, not elements,
    away from the image: past a band of IN_GUARD such a read came from whatever memory lay next to
    the buffer, and the values reported for the same file changed from run to run."""
    return max(IN_GUARD, (H + 4) * (W + 4) * D)


def _guarded_input(t: torch.Tensor, fill=float("nan"), guard: int = IN_GUARD) -> torch.Tensor:
    return between_guards(t.to(runtime.device()), guard, fill)


def copy_probe(module, x, block_r, block_c):
    """copy2d_kernel on ``x`` (R, C) with (block_r, block_c) tiles; the guarded output buffer."""
    R, C = x.shape
    buf, out = sentinel_buffer((R, C), x.dtype, runtime.device(), copy_guard(block_r, block_c))
    grid = (cdiv(R, block_r), cdiv(C, block_c))
    module.copy2d_kernel[grid](_guarded_input(x), out, R, C, BLOCK_R=block_r, BLOCK_C=block_c)
    return buf


def gather_probe(module, src, idx, block):
    """gather_kernel: out[i] = src[idx[i]] in blocks of ``block``; the guarded output buffer."""
    n = idx.numel()
    buf, out = sentinel_buffer((n,), src.dtype, runtime.device(), gather_guard(block))
    # Past the ends of idx lie -1s: read through, they land in src's NaN guard, not in the wild.
    module.gather_kernel[(cdiv(n, block),)](_guarded_input(src), _guarded_input(idx, fill=-1),
                                            out, n, BLOCK=block)
    return buf


def bilinear_probe(module, image, loc, block_q):
    """bilinear_kernel on ``image`` (H, W, D) at ``loc`` (Q, 2); the guarded output buffer."""
    H, W, D = image.shape
    Q = loc.shape[0]
    buf, out = sentinel_buffer((Q, D), image.dtype, runtime.device(), bilinear_guard(block_q, D))
    value = _guarded_input(image.reshape(H * W, D), guard=bilinear_image_guard(H, W, D))
    module.bilinear_kernel[(cdiv(Q, block_q),)](value, _guarded_input(loc), out, Q, H, W, D=D,
                                                BLOCK_Q=block_q, BLOCK_D=pow2(D))
    return buf
