"""Self-check examples of lab 05's three helpers, one at a time (Tasks 5.1-5.3).

``python lab05.py`` runs these first, then the kernel (lab 05's steps in ``kernel_labs``). A
``@triton.jit`` helper cannot be launched by itself, so each example runs it inside a tiny test
kernel of one program that calls it (passed in as a ``tl.constexpr`` argument) and stores what it
returns. The test kernels only call and store: the work is the helper's. The examples are drawn
here, with their own seeds and shapes; they are never the grader's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from msda_labs.student import runtime, spec
from msda_labs.student.guards import between_guards, pow2
from msda_labs.student.launch import value_guard
from msda_labs.student.selfcheck import Case, Step

F64 = torch.float64
GUARD = 64  # NaN elements around every input: a lane that reads without its mask gets NaN


def _device(*tensors):
    dev = runtime.device()
    return tuple(t.to(dev) for t in tensors)


@triton.jit
def _point_kernel(loc_ptr, attn_ptr, p_ptr, on_ptr, shape_ptr, out_ptr,
                  helper: tl.constexpr, BLOCK_Q: tl.constexpr):
    lanes = tl.arange(0, BLOCK_Q)
    x, y, a = helper(loc_ptr, attn_ptr, tl.load(p_ptr + lanes), tl.load(on_ptr + lanes) != 0,
                     tl.load(shape_ptr), tl.load(shape_ptr + 1))
    tl.store(out_ptr + lanes, x)
    tl.store(out_ptr + BLOCK_Q + lanes, y)
    tl.store(out_ptr + 2 * BLOCK_Q + lanes, a)


@triton.jit
def _tile_kernel(value_ptr, level_ptr, first_ptr, second_ptr, on_ptr, out_ptr, m,
                 helper: tl.constexpr, SAMPLE: tl.constexpr, M: tl.constexpr, D: tl.constexpr,
                 BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr):
    """gather_corner(row, col) or, with SAMPLE, sample_point(x, y, a) on head m of batch 0."""
    lanes = tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    on = tl.load(on_ptr + lanes) != 0
    H = tl.load(level_ptr)
    W = tl.load(level_ptr + 1)
    start = tl.load(level_ptr + 2)
    val_base = value_ptr + m * D + offs_d[None, :]
    if SAMPLE:
        x = tl.load(first_ptr + 2 * lanes)
        y = tl.load(first_ptr + 2 * lanes + 1)
        tile = helper(val_base, start, H, W, x, y, tl.load(second_ptr + lanes), on, offs_d < D,
                      M, D)
    else:
        tile = helper(val_base, start, tl.load(first_ptr + lanes), tl.load(second_ptr + lanes),
                      H, W, on, offs_d < D, M, D)
    tl.store(out_ptr + lanes[:, None] * BLOCK_D + offs_d[None, :], tile)


# -- Task 5.1 -------------------------------------------------------------------------------------
def _load_point(_ns=None) -> Case:
    gen = torch.Generator().manual_seed(51)
    n, H, W = 10, 4, 6
    loc = torch.rand(2 * n, generator=gen) * 1.4 - 0.2
    attn = torch.rand(n, generator=gen)
    p = torch.tensor([7, 0, 3, 9, 5, 2, n + 1, n + 3])  # the last two lanes: off, past the end
    on = torch.tensor([1, 1, 1, 1, 1, 1, 0, 0], dtype=torch.int32)
    live = on.bool()

    def call(fn):
        l_, a_, p_, on_, shape = _device(loc, attn, p, on, torch.tensor([H, W]))
        out = torch.full((24,), float("nan"), device=l_.device)
        _point_kernel[(1,)](between_guards(l_, GUARD), between_guards(a_, GUARD), p_, on_, shape,
                            out, helper=fn, BLOCK_Q=8)
        x, y, a = out.view(3, 8).cpu()
        return x[live], y[live], a

    def expected():
        q = p[live]
        x, y = loc.to(F64)[2 * q], loc.to(F64)[2 * q + 1]
        a = torch.where(live, attn.to(F64)[p.clamp(max=n - 1)], torch.zeros((), dtype=F64))
        return x * W - 0.5, y * H - 0.5, a

    return Case(f"8 lanes on a {H}x{W} level: x_pix and y_pix of the 6 lanes on; a of all 8 (the "
                f"last 2 are off, point past the end of loc and attn, and must get a = 0)",
                {"loc": loc, "attn": attn, "p": p}, call, expected,
                names=("x_pix", "y_pix", "a"),
                spec_name="load_point's docstring: x * W - 0.5, y * H - 0.5, a; 0 for a lane off")


# -- Tasks 5.2 and 5.3: one level of a small pyramid ----------------------------------------------
SHAPES = ((2, 2), (3, 5))  # the level read, 3 x 5, starts at s = 4
M, D, HEAD = 2, 3, 1


def _pyramid():
    S = sum(h * w for h, w in SHAPES)
    value = torch.randn(1, S, M, D, generator=torch.Generator().manual_seed(52))
    (h0, w0), (H, W) = SHAPES
    return value, torch.tensor([H, W, h0 * w0]), H, W, h0 * w0


def _tile(fn, value, level, first, second, on, sample: bool) -> torch.Tensor:
    v, lv, f, s, o = _device(value, level, first, second, on)
    out = torch.full((16 * pow2(D),), float("nan"), device=v.device)
    _tile_kernel[(1,)](between_guards(v, value_guard(value.shape[1], M, D)), lv, f, s, o, out,
                       HEAD, helper=fn, SAMPLE=sample, M=M, D=D, BLOCK_Q=16, BLOCK_D=pow2(D))
    return out.view(16, pow2(D)).cpu()


def _gather_corner(_ns=None) -> Case:
    value, level, H, W, start = _pyramid()
    rows = torch.tensor([0, 0, H - 1, H - 1, 1, 2, -1, 1, H, 2, -2, 0, 0, 1, 2, 1])
    cols = torch.tensor([0, W - 1, 0, W - 1, 3, 2, 2, -1, 0, W, 1, W + 1, 0, 1, 2, 3])
    on = torch.tensor([1] * 12 + [0] * 4, dtype=torch.int32)

    def expected():
        inside = on.bool() & (rows >= 0) & (rows < H) & (cols >= 0) & (cols < W)
        pix = (start + rows * W + cols).clamp(0, value.shape[1] - 1)
        tile = torch.zeros(16, pow2(D), dtype=F64)
        tile[:, :D] = value[0, pix, HEAD].to(F64) * inside[:, None]
        return tile

    return Case(f"16 lanes of head {HEAD} on a {H}x{W} level that starts at s={start}; M={M}, "
                f"D={D} (BLOCK_D=4); lanes 0-5 inside, 6-11 outside, 12-15 off",
                {"value": value, "row": rows, "col": cols},
                lambda fn: _tile(fn, value, level, rows, cols, on, False), expected,
                names=("tile",),
                spec_name="gather_corner's docstring: the pixel's channels, else 0")


def _sample_point(_ns=None) -> Case:
    value, level, H, W, start = _pyramid()
    gen = torch.Generator().manual_seed(53)
    xy = torch.rand(16, 2, generator=gen) * torch.tensor([W + 1.0, H + 1.0]) - 1.0
    a = 0.2 + 0.8 * torch.rand(16, generator=gen)
    on = torch.ones(16, dtype=torch.int32)

    def expected():
        img = value[0, start:start + H * W, HEAD].reshape(H, W, D)
        tile = torch.zeros(16, pow2(D), dtype=F64)
        tile[:, :D] = a.to(F64)[:, None] * spec.bilinear_pixels(img, xy)
        return tile

    return Case(f"16 pixel points (x, y) in [-1, {W}] x [-1, {H}] on head {HEAD} of a {H}x{W} "
                f"level that starts at s={start}, each with its weight a",
                {"value": value, "xy": xy, "a": a},
                lambda fn: _tile(fn, value, level, xy, a, on, True), expected, names=("tile",),
                spec_name="a * msda_labs.student.spec.bilinear_pixels (through your "
                          "gather_corner)")


HELPER_STEPS = (Step("5.1", "load_point", _load_point),
                Step("5.2", "gather_corner", _gather_corner),
                Step("5.3", "sample_point", _sample_point))
