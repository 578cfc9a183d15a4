"""Known mistakes as data: what a wrong-in-a-familiar-way output looks like, for feedback."""

from __future__ import annotations

import torch

from msda_labs.truth.reference import MISTAKES, msda_variant

__all__ = ["msda_variants", "FORWARD_MISTAKES", "pixel_reads", "pixel_variants", "PIXEL_MISTAKES"]

FORWARD_MISTAKES = ("truncate", "no_half_pixel", "swap_xy", "swap_hw", "clamp", "flat_bounds",
                    "level_zero_start")


def msda_variants(inputs, mistakes=FORWARD_MISTAKES) -> dict[str, tuple[torch.Tensor, str]]:
    """``{mistake: (forward output with that mistake, explanation)}`` for ``expect_close``."""
    value, shapes, _starts, loc, attn = inputs
    return {name: (msda_variant(value, shapes, loc, attn, mistake=name), MISTAKES[name])
            for name in mistakes}


def _pixel_read(img, x, y, mistake=None):
    """One bilinear read at pixel coordinates with an optional planted mistake (float64)."""
    import math

    H, W, D = img.shape
    if mistake == "swap_xy":
        x, y = y, x
    rnd = math.trunc if mistake == "truncate" else math.floor
    x0, y0 = rnd(x), rnd(y)
    lx, ly = x - x0, y - y0
    out = torch.zeros(D, dtype=torch.float64)
    for row, col, wt in ((y0, x0, (1 - lx) * (1 - ly)), (y0, x0 + 1, lx * (1 - ly)),
                         (y0 + 1, x0, (1 - lx) * ly), (y0 + 1, x0 + 1, lx * ly)):
        if mistake == "clamp":
            row, col = min(max(row, 0), H - 1), min(max(col, 0), W - 1)
        elif mistake == "flat_bounds":
            pos = row * W + col
            if not 0 <= pos < H * W:
                continue
            row, col = divmod(pos, W)
        elif not (0 <= row < H and 0 <= col < W):
            continue
        out += wt * img[row, col].to(torch.float64)
    return out


PIXEL_MISTAKES = ("truncate", "swap_xy", "clamp", "flat_bounds")


def pixel_reads(img, points, mistake=None) -> torch.Tensor:
    """(N, D) float64 bilinear reads of ``img`` (H, W, D) at pixel ``points`` (N, 2) = (x, y)."""
    return torch.stack([_pixel_read(img, float(x), float(y), mistake) for x, y in points.tolist()])


def pixel_variants(img, points, mistakes=PIXEL_MISTAKES) -> dict[str, tuple[torch.Tensor, str]]:
    return {name: (pixel_reads(img, points, name), MISTAKES[name]) for name in mistakes}
