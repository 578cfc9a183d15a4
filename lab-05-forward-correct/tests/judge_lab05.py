"""Judge side of lab 05's three helpers (Tasks 5.1-5.3): the inputs each step is tested on, what
the helper must return on them, and the known mistakes that feedback names.

The inputs are drawn here and handed to the probes as tensors; the child that runs the student's
helper never sees an expected value. Also the lab's tasks (TASKS), which
both test modules declare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from msda_labs.grading import expect_close
from msda_labs.mistakes.forward import MISTAKES, pixel_variants
from msda_labs.truth.cases import seeded_generator
from msda_labs.truth.reference import bilinear_reads

TASKS = {
    "5.1": "load_point",
    "5.2": "gather_corner",
    "5.3": "sample_point",
    "5.4": "msda_forward_kernel",
    "5.5": "query tiles and masks",
    "5.6": "fp32 accumulation",
    "5.7": "int64 offsets",
    "5.8": "on a real GPU",
}

F64 = torch.float64


# -- Task 5.1: load_point -------------------------------------------------------------------------
@dataclass(frozen=True)
class PointStep:
    """Point tensors and the lanes that read them: ``p[i]`` for lane i, ``on[i]`` its mask_q."""

    loc: torch.Tensor  # (2 * N,) flat (x, y) pairs
    attn: torch.Tensor  # (N,)
    p: torch.Tensor  # (BLOCK_Q,) int64; switched-off lanes point past the end (into NaN)
    on: torch.Tensor  # (BLOCK_Q,) int32, 1 = lane on
    shape: torch.Tensor  # (2,) int64: (H, W)

    def args(self):
        return self.loc, self.attn, self.p, self.on, self.shape

    def describe(self) -> str:
        H, W = self.shape.tolist()
        return (f"one program of {self.p.numel()} lanes ({int(self.on.sum())} with mask_q True), "
                f"{self.attn.numel()} points in {str(self.loc.dtype).replace('torch.', '')}, "
                f"level H={H} W={W}")


def point_step(dtype: torch.dtype) -> PointStep:
    """12 points on a 3 x 5 level (H != W, so swapping them shows); 8 lanes, the last two off and
    pointing just past the end of loc and attn."""
    gen = seeded_generator(501)
    n = 12
    loc = (torch.rand(2 * n, generator=gen) * 1.4 - 0.2).to(dtype)
    attn = torch.rand(n, generator=gen).to(dtype)
    on_lanes = torch.randperm(n, generator=gen)[:6]
    p = torch.cat([on_lanes, torch.tensor([n + 1, n + 4])]).to(torch.int64)
    on = torch.tensor([1] * 6 + [0] * 2, dtype=torch.int32)
    return PointStep(loc, attn, p, on, torch.tensor([3, 5], dtype=torch.int64))


def point_expected(step: PointStep, *, half: float = 0.5, swap_xy: bool = False,
                   swap_hw: bool = False) -> torch.Tensor:
    """(3, lanes on) float64: x_pix, y_pix, a of the lanes that are on (a mistake planted on
    request)."""
    H, W = step.shape.tolist()
    if swap_hw:
        H, W = W, H
    p = step.p[step.on.bool()]
    loc, attn = step.loc.to(F64), step.attn.to(F64)
    x, y = loc[2 * p], loc[2 * p + 1]
    if swap_xy:
        x, y = y, x
    return torch.stack([x * W - half, y * H - half, attn[p]])


def point_variants(step: PointStep) -> dict:
    return {"no_half_pixel": (point_expected(step, half=0.0), MISTAKES["no_half_pixel"]),
            "swap_xy": (point_expected(step, swap_xy=True), MISTAKES["swap_xy"]),
            "swap_hw": (point_expected(step, swap_hw=True), MISTAKES["swap_hw"])}


# Named only with evidence: the output lies within two fp16 steps of what fp16 arithmetic gives
# (and nearer to it than to the fp32 answer).
HALF_HINT = ("this is arithmetic in fp16: your x_pix and y_pix are what x * W - 0.5 gives when "
             "computed in fp16; convert each load with .to(tl.float32) before any arithmetic")


def point_in_half(step: PointStep) -> torch.Tensor:
    """(3, lanes on) float64: x_pix, y_pix and a as fp16 arithmetic computes them."""
    H, W = step.shape.tolist()
    p = step.p[step.on.bool()]
    loc, attn = step.loc.half(), step.attn.half()
    x = loc[2 * p] * torch.tensor(W, dtype=torch.float16) - 0.5
    y = loc[2 * p + 1] * torch.tensor(H, dtype=torch.float16) - 0.5
    return torch.stack([x, y, attn[p]]).to(F64)


def check_point(res, step: PointStep) -> None:
    """The lanes that are on: (x_pix, y_pix, a) as the spec says, computed in fp32."""
    res = _rows(res, (3, step.p.numel()), "load_point's (x_pix, y_pix, a)")
    near = {"fp16_math": (point_in_half(step), 2 * 2.0 ** -8, HALF_HINT)} \
        if step.loc.dtype == torch.float16 else None
    expect_close(res[:, step.on.bool()], point_expected(step), dtype=torch.float32,
                 what="load_point: rows (x_pix, y_pix, a), lanes with mask_q True",
                 case=step.describe(), variants=point_variants(step), near=near)


def check_point_lanes_off(res, step: PointStep) -> None:
    """The lanes that are off read nothing: weight 0, and no NaN from the guard band they point
    into."""
    res = _rows(res, (3, step.p.numel()), "load_point's (x_pix, y_pix, a)")
    off = res[:, ~step.on.bool()]
    where = (f"load_point on {step.describe()}: the lanes whose mask_q is False point past the end "
             f"of loc and attn, into a band of NaN")
    if torch.isnan(off).any():
        raise AssertionError(f"{where}, and they came back NaN; this is an unmasked point "
                             f"load: a switched-off lane read past the end of loc and attn; load "
                             f"under mask_q (mask=mask_q, other=0.0), so that it reads nothing")
    if (off[2] != 0).any():
        raise AssertionError(f"{where}: their weight a must be 0, got {off[2].tolist()}; this is "
                             f"a masked load without its zero: other=0.0 gives a switched-off "
                             f"lane the weight 0")


# -- Task 5.2: gather_corner ----------------------------------------------------------------------
@dataclass(frozen=True)
class CornerStep:
    """A (1, S, M, D) value with two levels; corners of level 1 for head ``m``, one per lane."""

    value: torch.Tensor  # (1, S, M, D) fp32
    level: torch.Tensor  # (3,) int64: (H, W, start) of the level read
    row: torch.Tensor  # (BLOCK_Q,) int64
    col: torch.Tensor  # (BLOCK_Q,) int64
    on: torch.Tensor  # (BLOCK_Q,) int32
    m: int
    inside: ClassVar[slice] = slice(0, 6)  # lanes on, pixel inside the level
    outside: ClassVar[slice] = slice(6, 12)  # lanes on, pixel outside
    off: ClassVar[slice] = slice(12, 16)  # lanes off, pixel inside

    def args(self):
        return self.value, self.level, self.row, self.col, self.on, self.m

    @property
    def D(self) -> int:
        return self.value.shape[3]

    def describe(self) -> str:
        H, W, start = self.level.tolist()
        _, S, M, D = self.value.shape
        return (f"value (1, S={S}, M={M}, D={D}), head m={self.m}, the level H={H} W={W} that "
                f"starts at s={start}, BLOCK_D=4")


SHAPES = ((2, 3), (3, 4))  # level 1 starts at s = 6


def corner_step() -> CornerStep:
    """Lanes 0-5 inside level 1 (its four corner pixels among them), 6-11 just outside each edge
    (two of them alias into the next row when read by the flat index), 12-15 switched off."""
    gen = seeded_generator(502)
    S = sum(h * w for h, w in SHAPES)
    value = torch.randn(1, S, 2, 3, generator=gen)
    H, W = SHAPES[1]
    rows = [0, 0, H - 1, H - 1, 1, 2] + [-1, 1, H, 1, -1, 0] + [0, 1, 2, 1]
    cols = [0, W - 1, 0, W - 1, 2, 1] + [1, -1, 2, W, -1, W] + [0, 1, 2, 3]
    t = torch.tensor
    return CornerStep(value, t([H, W, SHAPES[0][0] * SHAPES[0][1]]), t(rows), t(cols),
                      t([1] * 12 + [0] * 4, dtype=torch.int32), m=1)


def corner_reads(step: CornerStep, lanes: slice, *, start: int | None = None,
                 clamp: bool = False, flat: bool = False) -> torch.Tensor:
    """(lanes, D) float64: what the lanes read, by the spec (zero outside) or a mistake's rule."""
    H, W, level_start = step.level.tolist()
    start = level_start if start is None else start
    row, col = step.row[lanes], step.col[lanes]
    if clamp:
        row, col = row.clamp(0, H - 1), col.clamp(0, W - 1)
    pix = row * W + col
    valid = (pix >= 0) & (pix < H * W) if flat else \
        (row >= 0) & (row < H) & (col >= 0) & (col < W)
    rows = step.value[0, :, step.m].to(F64)[(start + pix).clamp(0, step.value.shape[1] - 1)]
    return rows * valid[:, None]


def _rows(res, shape, what: str) -> torch.Tensor:
    if not isinstance(res, torch.Tensor) or tuple(res.shape) != tuple(shape):
        raise AssertionError(f"{what}: the test kernel's output is not a tensor of shape "
                             f"{tuple(shape)} (got {type(res).__name__})")
    return res


def check_corner_inside(res, step: CornerStep) -> None:
    res = _rows(res, (16, 4), "gather_corner's tile")
    expect_close(res[step.inside, :step.D], corner_reads(step, step.inside), dtype=torch.float32,
                 what="gather_corner: lanes 0-5 (on, pixel inside the level), channels d < D",
                 case=step.describe(),
                 variants={"level_zero_start": (corner_reads(step, step.inside, start=0),
                                                MISTAKES["level_zero_start"])})


def check_corner_outside(res, step: CornerStep) -> None:
    res = _rows(res, (16, 4), "gather_corner's tile")
    rows, cols = step.row[step.outside].tolist(), step.col[step.outside].tolist()
    expect_close(res[step.outside, :step.D], corner_reads(step, step.outside),
                 dtype=torch.float32,
                 what=f"gather_corner: lanes 6-11, pixels (row, col) = "
                      f"{list(zip(rows, cols))} outside the level: each must read 0",
                 case=step.describe(),
                 variants={"clamp": (corner_reads(step, step.outside, clamp=True),
                                     MISTAKES["clamp"]),
                           "flat_bounds": (corner_reads(step, step.outside, flat=True),
                                           MISTAKES["flat_bounds"])})


def check_corner_masked(res, step: CornerStep) -> None:
    res = _rows(res, (16, 4), "gather_corner's tile")
    zeros = torch.zeros(4, step.D, dtype=F64)
    expect_close(res[step.off, :step.D], zeros, dtype=torch.float32,
                 what="gather_corner: lanes 12-15 have mask_q False (their pixels are inside the "
                      "level) and must read nothing: 0",
                 case=step.describe(),
                 variants={"lane_mask": (corner_reads(step, step.off),
                                         "a load that ignores mask_q: a switched-off lane still "
                                         "reads; fold mask_q into the corner's mask")})
    column = res[:, step.D]
    if torch.isnan(column).any() or (column != 0).any():
        raise AssertionError(
            f"gather_corner on {step.describe()}: channel d = {step.D} is past D = {step.D} "
            f"(BLOCK_D = 4) and must read nothing (0.0), got {column.tolist()}; this is an "
            f"unmasked channel tail: channels d >= D were read; the load mask must include "
            f"mask_d[None, :]")


# -- Task 5.3: sample_point -----------------------------------------------------------------------
@dataclass(frozen=True)
class SampleStep:
    """Pixel points on level 1 of a CornerStep's value, one per lane, with their weights."""

    value: torch.Tensor
    level: torch.Tensor  # (H, W, start)
    xy: torch.Tensor  # (BLOCK_Q, 2) fp32 pixel (x, y)
    a: torch.Tensor  # (BLOCK_Q,) fp32
    on: torch.Tensor  # (BLOCK_Q,) int32, all on
    m: int
    inside: ClassVar[slice] = slice(0, 8)  # all four corners inside
    border: ClassVar[slice] = slice(8, 16)  # some corner outside (negative coordinates among them)

    def args(self):
        return self.value, self.level, self.xy, self.a, self.on, self.m

    def describe(self) -> str:
        H, W, start = self.level.tolist()
        _, S, M, D = self.value.shape
        return (f"value (1, S={S}, M={M}, D={D}), head m={self.m}, the level H={H} W={W} that "
                f"starts at s={start}")


def sample_step() -> SampleStep:
    """Lanes 0-7: points whose four corners are inside; lanes 8-15: points near or past each
    edge, with negative coordinates in (-1, 0) (floor and truncation differ) and exact knots."""
    corner = corner_step()
    gen = seeded_generator(503)
    H, W, _ = corner.level.tolist()
    inside = torch.rand(8, 2, generator=gen) * torch.tensor([W - 1.0, H - 1.0])
    border = torch.tensor([[-0.75, 1.25], [1.5, -0.4], [W - 0.5, 0.5], [2.25, H - 0.25],
                           [-0.3, -0.6], [W - 1.0, H - 1.0], [-1.0, 1.0], [W + 0.5, 0.5]])
    a = 0.2 + 0.8 * torch.rand(16, generator=gen)
    return SampleStep(corner.value, corner.level, torch.cat([inside, border]), a,
                      torch.ones(16, dtype=torch.int32), corner.m)


def _image(step: SampleStep) -> torch.Tensor:
    H, W, start = step.level.tolist()
    return step.value[0, start:start + H * W, step.m].reshape(H, W, -1)


def sample_expected(step: SampleStep, lanes: slice) -> torch.Tensor:
    return step.a[lanes].to(F64)[:, None] * bilinear_reads(_image(step), step.xy[lanes])


def _sample_variants(step: SampleStep, lanes: slice) -> dict:
    a = step.a[lanes].to(F64)[:, None]
    found = {name: (a * out, why) for name, (out, why)
             in pixel_variants(_image(step), step.xy[lanes]).items()}
    found["unweighted"] = (bilinear_reads(_image(step), step.xy[lanes]), MISTAKES["unweighted"])
    return found


SAMPLE_HINT = ("sample_point reads its corners through your gather_corner: when Task 5.2 loses "
               "points, fix it first")


def check_sample(res, step: SampleStep, lanes: slice, what: str) -> None:
    res = _rows(res, (16, 4), "sample_point's tile")
    D = step.value.shape[3]
    points = [tuple(round(v, 4) for v in pt) for pt in step.xy[lanes].tolist()]
    try:
        expect_close(res[lanes, :D], sample_expected(step, lanes), dtype=torch.float32,
                     what=f"sample_point: {what}, pixel (x, y) = {points}", case=step.describe(),
                     variants=_sample_variants(step, lanes))
    except AssertionError as exc:
        if "this is exactly" in str(exc):
            raise
        raise AssertionError(f"{exc}; {SAMPLE_HINT}") from None


# -- Task 5.8: the baselines of the speed test, timed here ---------------------------------------
def speed_baselines(case, dtype_name: str) -> dict:
    """The baselines of the speed test on the judge's own copy of the inputs the speed probe
    draws (same seeds, same salt, same device): the PyTorch reference, and the lab 05 chip's
    msda_forward where this copy of the kit carries it."""
    from msda_labs.grading.judge.baseline import chip_function
    from msda_labs.student import runtime
    from msda_labs.truth.cases import make_inputs
    from msda_labs.truth.reference import msda_reference

    value, shapes, starts, loc, attn = make_inputs(case, getattr(torch, dtype_name),
                                                   device=runtime.device())
    # The reference reads the level sizes as Python ints: from a CPU copy, so that no call waits
    # for the device (a call that waits cannot be captured in a CUDA graph).
    host_shapes = shapes.cpu()
    chip = chip_function("lab05", "msda_forward")
    return {"reference": lambda: msda_reference(value, host_shapes, loc, attn),
            "chip": None if chip is None else (lambda: chip(value, shapes, starts, loc, attn))}
