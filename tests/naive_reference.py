"""MSDA by its definition, one scalar bilinear read at a time: the kit's own check of the ground
truth (``msda_labs.truth.reference``) and of the mistake library's pixel reads.

It lives with the kit's tests, which no template repository carries: written with plain loops
and arithmetic, it would be the answer to lab 01 (whose rules forbid library interpolation, the
form the shipped ground truth takes), and a template must not ship the answer to its own lab.
"""

from __future__ import annotations

import math

import torch

from msda_labs.truth.reference import level_starts


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
