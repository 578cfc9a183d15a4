"""Ground truth for every lab: the grid_sample reference, the naive loops, and their gradients.

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

import torch
import torch.nn.functional as F

__all__ = [
    "level_starts",
    "msda_reference",
    "msda_naive",
    "msda_variant",
    "bilinear_pixel",
    "reference_grads",
    "MISTAKES",
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


# A known mistake -> 'what: why'. Tests pick the ones that apply to what they check.
MISTAKES = {
    "truncate": "truncation toward zero (int()) instead of floor: negative coordinates must round "
                "down",
    "no_half_pixel": "a missing -0.5: pixel centres sit at integers, so x_pix = x * W - 0.5",
    "swap_xy": "x and y swapped: the last axis of the locations is (x, y) and x runs along the "
               "width",
    "swap_hw": "H and W swapped: spatial_shapes rows are (H, W), height first",
    "clamp": "clamping to the border instead of zero padding: a corner outside the image adds 0",
    "flat_bounds": "a bounds test on the flat index instead of per axis: a column outside the "
                   "image aliases into the next row",
    "level_zero_start": "every level read from the start of value instead of from its "
                        "level_start_index",
    "unweighted": "the attention weights left out",
}


def msda_variant(value, spatial_shapes, sampling_locations, attention_weights, mistake=None):
    """MSDA forward with one known mistake planted (None: the correct result), float64 math.

    Vectorized over (B, Q, M), a loop over levels and points; used to recognise what a wrong
    output is. Returns (B, Q, M * D) in float64 on the CPU.
    """
    if mistake is not None and mistake not in MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; known: {sorted(MISTAKES)}")
    v = value.detach().to(torch.float64).cpu()
    loc = sampling_locations.detach().to(torch.float64).cpu()
    attn = attention_weights.detach().to(torch.float64).cpu()
    B, S, M, D = v.shape
    _, Q, _, L, K, _ = loc.shape
    hw = [(int(h), int(w)) for h, w in torch.as_tensor(spatial_shapes).tolist()]
    starts = level_starts(spatial_shapes).tolist()
    flat = v.reshape(B, S, M, D)
    b_idx = torch.arange(B).view(B, 1, 1)
    m_idx = torch.arange(M).view(1, 1, M)
    out = torch.zeros(B, Q, M, D, dtype=torch.float64)
    rnd = torch.trunc if mistake == "truncate" else torch.floor
    for lvl, (h, w) in enumerate(hw):
        start = 0 if mistake == "level_zero_start" else starts[lvl]
        if mistake == "swap_hw":
            h, w = w, h
        for k in range(K):
            lx_n, ly_n = loc[:, :, :, lvl, k, 0], loc[:, :, :, lvl, k, 1]
            if mistake == "swap_xy":
                lx_n, ly_n = ly_n, lx_n
            shift = 0.0 if mistake == "no_half_pixel" else 0.5
            x, y = lx_n * w - shift, ly_n * h - shift
            x0, y0 = rnd(x), rnd(y)
            fx, fy = x - x0, y - y0
            a = 1.0 if mistake == "unweighted" else attn[:, :, :, lvl, k]
            for dy, dx, wt in ((0, 0, (1 - fx) * (1 - fy)), (0, 1, fx * (1 - fy)),
                               (1, 0, (1 - fx) * fy), (1, 1, fx * fy)):
                cx, cy = (x0 + dx).long(), (y0 + dy).long()
                if mistake == "clamp":
                    cx, cy = cx.clamp(0, w - 1), cy.clamp(0, h - 1)
                    valid = torch.ones_like(cx, dtype=torch.bool)
                elif mistake == "flat_bounds":
                    pos = cy * w + cx
                    valid = (pos >= 0) & (pos < h * w)
                else:
                    valid = (cx >= 0) & (cx < w) & (cy >= 0) & (cy < h)
                row = (start + cy * w + cx).clamp(0, S - 1)
                vals = flat[b_idx, row, m_idx]  # [B, Q, M, D]
                out += (a * wt * valid)[..., None] * vals
    return out.reshape(B, Q, M * D)


def reference_grads(value, spatial_shapes, sampling_locations, attention_weights, grad_out):
    """fp32 autograd of the grid_sample reference: (grad_value, grad_loc, grad_attn), all fp32."""
    v = value.detach().float().requires_grad_(True)
    loc = sampling_locations.detach().float().requires_grad_(True)
    attn = attention_weights.detach().float().requires_grad_(True)
    out = msda_reference(v, spatial_shapes, loc, attn)
    out.backward(grad_out.detach().float().reshape(out.shape))
    return v.grad, loc.grad, attn.grad
