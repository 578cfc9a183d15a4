"""Ground truth for every lab: the grid_sample reference, the naive loops, a vectorized float64
forward whose bilinear steps are named (:class:`Sampling`), and the gradients.

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

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = [
    "level_starts",
    "msda_reference",
    "msda_naive",
    "msda_float64",
    "bilinear_pixel",
    "bilinear_reads",
    "bilinear_corners",
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


def bilinear_pixel(img, x: float, y: float) -> torch.Tensor:
    """Bilinear read of an (H, W, D) image at pixel coordinates (x, y) with zero padding."""
    H, W, _ = img.shape
    x0, y0 = math.floor(x), math.floor(y)
    lx, ly = x - x0, y - y0
    out = torch.zeros(img.shape[-1], dtype=img.dtype, device=img.device)
    for row, col, weight in ((y0, x0, (1 - lx) * (1 - ly)), (y0, x0 + 1, lx * (1 - ly)),
                             (y0 + 1, x0, (1 - lx) * ly), (y0 + 1, x0 + 1, lx * ly)):
        if 0 <= row < H and 0 <= col < W:
            out = out + weight * img[row, col]
    return out


def msda_naive(value, spatial_shapes, sampling_locations, attention_weights):
    """MSDA by definition, five Python loops; float64 accumulation. Only for tiny inputs."""
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    hw = [(int(h), int(w)) for h, w in torch.as_tensor(spatial_shapes).tolist()]
    starts = level_starts(spatial_shapes).tolist()
    v = value.detach().to(torch.float64).cpu()
    loc = sampling_locations.detach().to(torch.float64).cpu()
    attn = attention_weights.detach().to(torch.float64).cpu()
    out = torch.zeros(B, Q, M, D, dtype=torch.float64)
    for b in range(B):
        for q in range(Q):
            for m in range(M):
                for lvl, (h, w) in enumerate(hw):
                    img = v[b, starts[lvl]:starts[lvl] + h * w, m].reshape(h, w, D)
                    for k in range(K):
                        x = float(loc[b, q, m, lvl, k, 0]) * w - 0.5
                        y = float(loc[b, q, m, lvl, k, 1]) * h - 0.5
                        out[b, q, m] += float(attn[b, q, m, lvl, k]) * bilinear_pixel(img, x, y)
    return out.reshape(B, Q, M * D).to(value.dtype)


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


@dataclass(frozen=True)
class Sampling:
    """The steps that turn one pixel coordinate into four weighted corner reads.

    Each default is the spec; :mod:`msda_labs.mistakes` builds wrong outputs by replacing one.

    Attributes:
        cell: pixel coordinate -> the top-left corner of its cell (``floor``).
        centre: ``x_pix = x * W - centre``; pixel centres sit at integers, so 0.5.
        corner: ``(col, row, H, W) -> (col, row, valid)``: which corner is read and whether it
            counts (:func:`zero_padding`).
    """

    cell: Callable = torch.floor
    centre: float = 0.5
    corner: Callable = zero_padding


SPEC = Sampling()


def bilinear_corners(x, y, height: int, width: int, sampling: Sampling = SPEC):
    """The four corners of float64 pixel coordinates ``x``, ``y`` (tensors of one shape).

    Yields:
        ``(col, row, weight, valid)`` per corner, top-left, top-right, bottom-left, bottom-right.
    """
    x0, y0 = sampling.cell(x), sampling.cell(y)
    fx, fy = x - x0, y - y0
    for dy, dx, weight in ((0, 0, (1 - fx) * (1 - fy)), (0, 1, fx * (1 - fy)),
                           (1, 0, (1 - fx) * fy), (1, 1, fx * fy)):
        col, row, valid = sampling.corner((x0 + dx).long(), (y0 + dy).long(), height, width)
        yield col, row, weight, valid


def bilinear_reads(img, points, sampling: Sampling = SPEC) -> torch.Tensor:
    """(N, D) float64 bilinear reads of ``img`` (H, W, D) at pixel ``points`` (N, 2) = (x, y)."""
    H, W, D = img.shape
    flat = img.detach().to("cpu", torch.float64).reshape(H * W, D)
    pts = points.detach().to("cpu", torch.float64)
    out = torch.zeros(pts.shape[0], D, dtype=torch.float64)
    for col, row, weight, valid in bilinear_corners(pts[:, 0], pts[:, 1], H, W, sampling):
        vals = flat[(row * W + col).clamp(0, H * W - 1)]
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
    b_idx = torch.arange(B).view(B, 1, 1)
    m_idx = torch.arange(M).view(1, 1, M)
    out = torch.zeros(B, Q, M, D, dtype=torch.float64)
    for lvl, (h, w) in enumerate(hw):
        start = int(starts[lvl])
        for k in range(K):
            x = loc[:, :, :, lvl, k, 0] * w - sampling.centre
            y = loc[:, :, :, lvl, k, 1] * h - sampling.centre
            a = attn[:, :, :, lvl, k]
            for col, row, weight, valid in bilinear_corners(x, y, h, w, sampling):
                rows = (start + row * w + col).clamp(0, S - 1)
                out += (a * weight * valid)[..., None] * v[b_idx, rows, m_idx]  # [B, Q, M, D]
    return out.reshape(B, Q, M * D)


def reference_grads(value, spatial_shapes, sampling_locations, attention_weights, grad_out):
    """fp32 autograd of the grid_sample reference: (grad_value, grad_loc, grad_attn), all fp32."""
    v = value.detach().float().requires_grad_(True)
    loc = sampling_locations.detach().float().requires_grad_(True)
    attn = attention_weights.detach().float().requires_grad_(True)
    out = msda_reference(v, spatial_shapes, loc, attn)
    out.backward(grad_out.detach().float().reshape(out.shape))
    return v.grad, loc.grad, attn.grad
