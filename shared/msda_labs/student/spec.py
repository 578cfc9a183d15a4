"""STUDENT-FACING SPEC: what ``python labNN.py`` compares your functions with.

This is not the grader's ground truth (that lives with the grader, and a submission may not read
it). It is a plain, slow, float64 statement of what each lab computes, written to be read and to
be compared against on one small example. Use it in ``python labNN.py`` (which runs
``msda_labs.student.check``), in a notebook or in a REPL.

A graded function may not call it: the grader flags any import of this module (or of the check)
outside ``if __name__ == "__main__":``, and the graded runs cannot read this file. A function
that only hands its work to the spec earns nothing.

Conventions are those of every lab:

    value               (B, S, M, D)        levels flattened row-major, concatenated along S
    spatial_shapes      (L, 2)              rows (H_l, W_l)
    sampling_locations  (B, Q, M, L, K, 2)  normalized (x, y); x runs along the width
    attention_weights   (B, Q, M, L, K)
    output              (B, Q, M * D)

Lab 09 has no functions here: its self-check compares with the lab's own table of what each
GPU does (``msda_labs.student.selfcheck.tool_labs``).

A normalized location (x, y) on a level of size (H, W) sits at the pixel position
(x * W - 0.5, y * H - 0.5); pixel (row i, col j) has its centre at (x = j, y = i). A bilinear read
blends the four pixels around a position; a pixel outside the level reads as 0.
"""

from __future__ import annotations

import math

import torch

__all__ = ["bilinear_at", "bilinear_pixels", "bilinear_image", "deform_attend", "msda",
           "msda_grads", "deformable_attention", "deformable_cross_attention",
           "msda_cross_attention", "flat_offset", "sectors", "forward_bytes", "histogram",
           "racy_histogram"]

F64 = torch.float64


def bilinear_at(img: torch.Tensor, x: float, y: float) -> torch.Tensor:
    """One bilinear read of an (H, W, D) image at the pixel position (x, y): (D,) float64."""
    H, W, D = img.shape
    col, row = math.floor(x), math.floor(y)
    fx, fy = x - col, y - row
    total = torch.zeros(D, dtype=F64)
    for dr, dc in ((0, 0), (0, 1), (1, 0), (1, 1)):
        r, c = row + dr, col + dc
        share = (fx if dc else 1 - fx) * (fy if dr else 1 - fy)
        if 0 <= r < H and 0 <= c < W:
            total += share * img[r, c].to(F64)
    return total


def bilinear_pixels(img: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Bilinear reads at pixel positions ``points`` (N, 2) = (x, y): (N, D) float64."""
    img = img.detach().cpu()
    return torch.stack([bilinear_at(img, float(x), float(y)) for x, y in points.tolist()])


def bilinear_image(img: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
    """Bilinear reads at normalized locations ``loc`` (Q, 2) = (x, y): (Q, D) float64."""
    H, W, _ = img.shape
    pix = loc.detach().cpu().to(F64) * torch.tensor([W, H], dtype=F64) - 0.5
    return bilinear_pixels(img, pix)


def _level_reads(img_rows, h: int, w: int, x, y):
    """Bilinear reads of one level, differentiable: ``img_rows`` (B, h * w, M, D) and pixel
    positions x, y (B, Q, M, K) -> (B, Q, M, K, D)."""
    B, _, M, D = img_rows.shape
    Q, K = x.shape[1], x.shape[3]
    col0, row0 = torch.floor(x), torch.floor(y)
    fx, fy = x - col0, y - row0
    b = torch.arange(B).view(B, 1, 1, 1)
    m = torch.arange(M).view(1, 1, M, 1)
    total = torch.zeros(B, Q, M, K, D, dtype=F64)
    for dr, dc in ((0, 0), (0, 1), (1, 0), (1, 1)):
        r, c = row0.long() + dr, col0.long() + dc
        inside = (r >= 0) & (r < h) & (c >= 0) & (c < w)
        pixel = torch.where(inside, r * w + c, torch.zeros_like(r))
        share = (fx if dc else 1 - fx) * (fy if dr else 1 - fy) * inside
        total = total + share[..., None] * img_rows[b, pixel, m]
    return total


def msda(value, spatial_shapes, sampling_locations, attention_weights) -> torch.Tensor:
    """Multi-scale deformable attention, forward: (B, Q, M * D) float64 on the CPU.

    Differentiable with respect to the three float inputs when they require grad (it works on
    float64 copies of them, so autograd reaches the originals).
    """
    v = value.cpu().to(F64)
    loc = sampling_locations.cpu().to(F64)
    attn = attention_weights.cpu().to(F64)
    B, S, M, D = v.shape
    Q = loc.shape[1]
    out = torch.zeros(B, Q, M, D, dtype=F64)
    start = 0
    for lvl, (h, w) in enumerate(torch.as_tensor(spatial_shapes).tolist()):
        rows = v[:, start:start + h * w]
        x = loc[:, :, :, lvl, :, 0] * w - 0.5
        y = loc[:, :, :, lvl, :, 1] * h - 0.5
        reads = _level_reads(rows, h, w, x, y)  # (B, Q, M, K, D)
        out = out + (attn[:, :, :, lvl, :, None] * reads).sum(3)
        start += h * w
    return out.reshape(B, Q, M * D)


def msda_grads(value, spatial_shapes, sampling_locations, attention_weights, grad_out):
    """The gradients of ``sum(msda(...) * grad_out)``: (grad_value, grad_loc, grad_attn), float64
    on the CPU, by autograd through :func:`msda`."""
    v, loc, attn = (t.detach().cpu().to(F64).requires_grad_(True)
                    for t in (value, sampling_locations, attention_weights))
    out = msda(v, spatial_shapes, loc, attn)
    return torch.autograd.grad((out * grad_out.detach().cpu().to(F64)).sum(), (v, loc, attn))


def deform_attend(value, points, weights) -> torch.Tensor:
    """One head on one (H, W, D) map: query q blends its K reads at pixel positions
    ``points[q, k]`` with ``weights[q, k]``: (Q, D) float64."""
    return torch.stack([
        sum(float(w) * bilinear_at(value.detach().cpu(), float(x), float(y))
            for (x, y), w in zip(pts.tolist(), ws))
        for pts, ws in zip(points, weights.tolist())])


def _pixels_to_normalized(pix, h: int, w: int):
    """Pixel positions (..., 2) = (x, y) as the normalized locations that land on them."""
    return (pix + 0.5) / torch.tensor([w, h], dtype=pix.dtype)


def _linear(layer, x):
    """``layer`` (an nn.Linear) applied in float64, without changing it."""
    bias = None if layer.bias is None else layer.bias.detach().to(F64)
    return torch.nn.functional.linear(x.detach().to(F64), layer.weight.detach().to(F64), bias)


def _heads(t, M: int):
    """(B, N, C) -> (B, N, M, C / M)."""
    return t.reshape(*t.shape[:2], M, -1)


def deformable_attention(layer, x) -> torch.Tensor:
    """Lab 00's deformable self-attention with ``layer``'s own four linear layers, through
    :func:`msda` on one level: (B, H, W, C) float64."""
    B, H, W, C = x.shape
    M, K = layer.num_heads, layer.num_points
    flat = x.reshape(B, H * W, C)
    value = _heads(_linear(layer.value_proj, flat), M)
    offsets = _linear(layer.offset_proj, flat).reshape(B, H * W, M, K, 2)
    logits = _linear(layer.weight_proj, flat).reshape(B, H * W, M, K)
    rows, cols = torch.arange(H, dtype=F64), torch.arange(W, dtype=F64)
    centres = torch.stack([cols.repeat(H), rows.repeat_interleave(W)], -1)  # (H * W, 2) = (x, y)
    loc = _pixels_to_normalized(centres[None, :, None, None] + offsets, H, W)
    out = msda(value, torch.tensor([[H, W]]), loc[:, :, :, None], logits.softmax(-1)[:, :, :, None])
    return _linear(layer.out_proj, out).reshape(B, H, W, C)


def deformable_cross_attention(layer, query, reference_points, value) -> torch.Tensor:
    """Lab 00's deformable cross-attention with ``layer``'s own linear layers: (B, Q, C)."""
    B, Q, C = query.shape
    _, H, W, _ = value.shape
    M, K = layer.num_heads, layer.num_points
    v = _heads(_linear(layer.value_proj, value.reshape(B, H * W, C)), M)
    offsets = _linear(layer.offset_proj, query).reshape(B, Q, M, K, 2)
    logits = _linear(layer.weight_proj, query).reshape(B, Q, M, K)
    centre = reference_points.to(F64) * torch.tensor([W, H], dtype=F64) - 0.5  # pixels
    loc = _pixels_to_normalized(centre[:, :, None, None] + offsets, H, W)
    out = msda(v, torch.tensor([[H, W]]), loc[:, :, :, None], logits.softmax(-1)[:, :, :, None])
    return _linear(layer.out_proj, out)


def msda_cross_attention(layer, query, reference_points, value, spatial_shapes) -> torch.Tensor:
    """Lab 00's multi-scale layer with ``layer``'s own linear layers: (B, Q, C) float64. An offset
    in level l's pixels moves the normalized point by offset / (W_l, H_l)."""
    B, Q, C = query.shape
    M, L, K = layer.num_heads, layer.num_levels, layer.num_points
    v = _heads(_linear(layer.value_proj, value), M)
    offsets = _linear(layer.offset_proj, query).reshape(B, Q, M, L, K, 2)
    logits = _linear(layer.weight_proj, query).reshape(B, Q, M, L * K)
    sizes = torch.as_tensor(spatial_shapes).to(F64).flip(-1)  # (L, 2) = (W_l, H_l)
    loc = reference_points.to(F64)[:, :, None, None, None] + offsets / sizes[:, None]
    out = msda(v, spatial_shapes, loc, logits.softmax(-1).reshape(B, Q, M, L, K))
    return _linear(layer.out_proj, out)


def flat_offset(index, sizes) -> int:
    """The row-major flat offset of ``index`` in a contiguous tensor of ``sizes``: each step in an
    axis skips the elements of every later axis."""
    offset = 0
    for i, (at, _) in enumerate(zip(index, sizes)):
        offset += at * math.prod(sizes[i + 1:])
    return offset


def sectors(warps, sector_bytes: int = 32) -> int:
    """Lab 03's paper GPU: the 32-byte sectors delivered for a list of warp loads (each a list of
    byte addresses), counting every warp load on its own."""
    total = 0
    for addresses in warps:
        seen = set()
        for address in list(map(int, addresses)):
            seen.add(address // sector_bytes)
        total += len(seen)
    return total


def forward_bytes(B, Q, M, D, L, K, itemsize) -> int:
    """Lab 03: the bytes the MSDA forward moves when nothing is reused, by listing every read and
    write once (only for small sizes)."""
    moved = 0
    for _sample in range(B * Q * M * L * K):
        moved += 4 * D * itemsize  # four corner rows of D channels
        moved += 3 * itemsize  # x, y and the attention weight
    for _row in range(B * Q * M):
        moved += D * itemsize  # one output row, written once
    return moved


def histogram(idx: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Exact counts of ``idx`` in ``n_bins`` bins: (n_bins,) float32."""
    counts = [0] * n_bins
    for i in idx.tolist():
        counts[i] += 1
    return torch.tensor(counts, dtype=torch.float32)


def racy_histogram(idx: torch.Tensor, n_bins: int, block: int) -> torch.Tensor:
    """What lab 08's racy histogram leaves behind in Triton's interpreter, by acting it out.

    The programs run one after another. Within one, every lane first reads its bin's count, then
    every lane writes back what it read plus one, one lane after the other (the last write to a
    bin is the one that stays).
    """
    counts = [0.0] * n_bins
    bins = idx.tolist()
    for first in range(0, len(bins), block):
        lanes = bins[first:first + block]
        read = [counts[b] for b in lanes]
        for b, old in zip(lanes, read):
            counts[b] = old + 1.0
    return torch.tensor(counts, dtype=torch.float32)
