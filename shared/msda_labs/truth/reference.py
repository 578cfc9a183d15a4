"""Ground truth for every lab: the grid_sample reference, a vectorized float64 forward whose
bilinear steps are named (:class:`Sampling`), and the gradients.

No scalar, loop-by-loop statement of MSDA lives here: this package ships in every lab's
template, and such a statement is lab 01's answer (the kit's own tests hold one, in
``tests/naive_reference.py``).

Nothing here is ever imported by a student module (the grader flags it); tests and the kit's own
checks compare against it. Conventions are those of every lab:

    value               (B, S, M, D)        S = sum of H_l * W_l over levels, row-major per level
    spatial_shapes      (L, 2) int64        rows are (H_l, W_l)
    level_start_index   (L,) int64          exclusive prefix sum of H_l * W_l (or None)
    sampling_locations  (B, Q, M, L, K, 2)  normalized (x, y); x follows the width
    attention_weights   (B, Q, M, L, K)
    output              (B, Q, M * D)

A location maps to pixel coordinates x * W - 0.5, y * H - 0.5 (pixel centres at integers), bilinear
interpolation with zero padding: exactly grid_sample(bilinear, zeros, align_corners=False).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = [
    "level_starts",
    "msda_reference",
    "msda_float64",
    "bilinear_reads",
    "bilinear_corners",
    "bilinear_weights",
    "read_rows",
    "Sampling",
    "SPEC",
    "zero_padding",
    "reference_grads",
]


def level_starts(spatial_shapes: torch.Tensor) -> torch.Tensor:
    """Exclusive prefix sum of H_l * W_l: where each level begins along S (int64, same device)."""
    shapes = torch.as_tensor(spatial_shapes).to(torch.int64)
    sizes = shapes[:, 0] * shapes[:, 1]
    return torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])


def msda_reference(value, spatial_shapes, sampling_locations, attention_weights):
    """MSDA forward through one grid_sample per level; differentiable, any dtype and device.

    Args:
        value: (B, S, M, D).
        spatial_shapes: (L, 2) rows (H_l, W_l).
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y).
        attention_weights: (B, Q, M, L, K).

    Returns:
        (B, Q, M * D) in the dtype of value.
    """
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    hw = [(int(h), int(w)) for h, w in torch.as_tensor(spatial_shapes).tolist()]
    per_level = value.split([h * w for h, w in hw], dim=1)
    grids = 2 * sampling_locations - 1
    sampled = []
    for lvl, (h, w) in enumerate(hw):
        # [B*M, D, H, W]
        img = per_level[lvl].permute(0, 2, 3, 1).reshape(B * M, D, h, w)
        # [B*M, Q, K, 2]
        grid = grids[:, :, :, lvl].permute(0, 2, 1, 3, 4).reshape(B * M, Q, K, 2)
        sampled.append(
            F.grid_sample(img, grid.to(img.dtype), mode="bilinear", padding_mode="zeros",
                          align_corners=False)
        )
    # [B*M, D, Q, L*K]
    stacked = torch.stack(sampled, dim=-2).flatten(-2)
    weights = attention_weights.permute(0, 2, 1, 3, 4).reshape(B * M, 1, Q, L * K)
    out = (stacked * weights.to(stacked.dtype)).sum(-1)
    return out.view(B, M, D, Q).permute(0, 3, 1, 2).reshape(B, Q, M * D)


def zero_padding(col, row, height: int, width: int):
    """The spec's corner rule: a corner outside the image reads 0.

    Args:
        col, row: integer corner coordinates (tensors of one shape).
        height, width: the image's size.

    Returns:
        ``(col, row, valid)``: the corner to read (flat index ``row * width + col``) and whether it
        counts. Mistakes in :mod:`msda_labs.mistakes` swap in other rules.
    """
    valid = (col >= 0) & (col < width) & (row >= 0) & (row < height)
    return col, row, valid


def bilinear_weights(fx, fy):
    """The spec's corner weights from the fractions ``fx``, ``fy`` of a point in its cell:
    top-left, top-right, bottom-left, bottom-right."""
    return (1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy


@dataclass(frozen=True)
class Sampling:
    """The steps that turn one pixel coordinate into four weighted corner reads.

    Each default is the spec; :mod:`msda_labs.mistakes` builds wrong outputs by replacing one.

    Attributes:
        cell: pixel coordinate -> the top-left corner of its cell (``floor``).
        centre: ``x_pix = x * W - centre``; pixel centres sit at integers, so 0.5.
        corner: ``(col, row, H, W) -> (col, row, valid)``: which corner is read and whether it
            counts (:func:`zero_padding`).
        weights: ``(fx, fy) -> `` the four corners' weights (:func:`bilinear_weights`).
    """

    cell: Callable = torch.floor
    centre: float = 0.5
    corner: Callable = zero_padding
    weights: Callable = bilinear_weights


SPEC = Sampling()


def bilinear_corners(x, y, height: int, width: int, sampling: Sampling = SPEC):
    """The four corners of float64 pixel coordinates ``x``, ``y`` (tensors of one shape).

    Yields:
        ``(col, row, weight, valid)`` per corner, top-left, top-right, bottom-left, bottom-right.
    """
    x0, y0 = sampling.cell(x), sampling.cell(y)
    fx, fy = x - x0, y - y0
    for (dy, dx), weight in zip(((0, 0), (0, 1), (1, 0), (1, 1)), sampling.weights(fx, fy)):
        col, row, valid = sampling.corner((x0 + dx).long(), (y0 + dy).long(), height, width)
        yield col, row, weight, valid


def read_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[n, index[n, p]]``: rows of a (N, S, C) table at int64 ``index`` (N, P) in [0, S),
    as (N, P, C), exactly.

    Read by nearest-neighbour ``grid_sample`` on the table seen as a 1 x S image of C channels:
    at an integer pixel the nearest pixel is that pixel, whatever rounding the normalized
    coordinate picked up. Library interpolation is what labs 01, 02 and 07 forbid their graded
    functions (and watch for while they run), so this ground truth, shipped with every template,
    earns nothing there when copied: it reads in the one way the lab does not allow.
    """
    N, S, C = table.shape
    image = table.permute(0, 2, 1).unsqueeze(2)  # (N, C, 1, S)
    x = index.to(table.dtype) * (2.0 / max(S - 1, 1)) - 1.0
    grid = torch.stack([x, torch.zeros_like(x)], dim=-1).unsqueeze(1)  # (N, 1, P, 2)
    rows = F.grid_sample(image, grid, mode="nearest", padding_mode="zeros", align_corners=True)
    return rows.squeeze(2).permute(0, 2, 1)  # (N, P, C)


def bilinear_reads(img, points, sampling: Sampling = SPEC) -> torch.Tensor:
    """(N, D) float64 bilinear reads of ``img`` (H, W, D) at pixel ``points`` (N, 2) = (x, y)."""
    H, W, D = img.shape
    flat = img.detach().to("cpu", torch.float64).reshape(1, H * W, D)
    pts = points.detach().to("cpu", torch.float64)
    out = torch.zeros(pts.shape[0], D, dtype=torch.float64)
    for col, row, weight, valid in bilinear_corners(pts[:, 0], pts[:, 1], H, W, sampling):
        vals = read_rows(flat, (row * W + col).clamp(0, H * W - 1)[None])[0]
        out += (weight * valid)[:, None] * vals
    return out


def msda_float64(value, spatial_shapes, sampling_locations, attention_weights,
                 level_start_index=None, sampling: Sampling = SPEC) -> torch.Tensor:
    """MSDA forward in float64 on the CPU, vectorized over (B, Q, M); a loop over levels, points.

    Args:
        value, spatial_shapes, sampling_locations, attention_weights: as for
            :func:`msda_reference`, any float dtype and device.
        level_start_index: where each level begins along S (default: from spatial_shapes).
        sampling: the steps of one bilinear read (default: the spec).

    Returns:
        (B, Q, M * D) float64 on the CPU.
    """
    v = value.detach().to(torch.float64).cpu()
    loc = sampling_locations.detach().to(torch.float64).cpu()
    attn = attention_weights.detach().to(torch.float64).cpu()
    B, S, M, D = v.shape
    _, Q, _, L, K, _ = loc.shape
    hw = [(int(h), int(w)) for h, w in torch.as_tensor(spatial_shapes).tolist()]
    starts = level_starts(spatial_shapes) if level_start_index is None else level_start_index
    table = v.permute(0, 2, 1, 3).reshape(B * M, S, D)  # one row table per (batch, head)
    out = torch.zeros(B, Q, M, D, dtype=torch.float64)
    for lvl, (h, w) in enumerate(hw):
        start = int(starts[lvl])
        for k in range(K):
            x = loc[:, :, :, lvl, k, 0] * w - sampling.centre
            y = loc[:, :, :, lvl, k, 1] * h - sampling.centre
            a = attn[:, :, :, lvl, k]
            for col, row, weight, valid in bilinear_corners(x, y, h, w, sampling):
                rows = (start + row * w + col).clamp(0, S - 1)  # [B, Q, M]
                vals = read_rows(table, rows.permute(0, 2, 1).reshape(B * M, Q))
                vals = vals.view(B, M, Q, D).permute(0, 2, 1, 3)  # [B, Q, M, D]
                out += (a * weight * valid)[..., None] * vals
    return out.reshape(B, Q, M * D)


def reference_grads(value, spatial_shapes, sampling_locations, attention_weights, grad_out):
    """fp32 autograd of the grid_sample reference: (grad_value, grad_loc, grad_attn), all fp32."""
    v = value.detach().float().requires_grad_(True)
    loc = sampling_locations.detach().float().requires_grad_(True)
    attn = attention_weights.detach().float().requires_grad_(True)
    out = msda_reference(v, spatial_shapes, loc, attn)
    out.backward(grad_out.detach().float().reshape(out.shape))
    return v.grad, loc.grad, attn.grad
