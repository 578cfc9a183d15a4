"""Lab 07 - The other direction: the three gradients of MSDA, in vectorized torch.

Goal: derive by hand what the backward pass of multi-scale deformable attention computes, and
write it as a handful of whole-tensor torch operations; this module is the spec of the lab 08
backward kernel.

In this lab you will:
  * differentiate the output with respect to the attention weights (the output is linear in them);
  * differentiate it with respect to the sampling locations: a corner difference, then the chain
    factor W (or H) that turns pixels into normalized coordinates;
  * send the gradient back to the value pixels: the forward *gathers*, so the backward *scatters*,
    and pixels shared by several samples must add up all of their shares.

Conventions (as in every lab):
  value               (B, S, M, D)        levels flattened row-major, concatenated along S
  spatial_shapes      (L, 2) int64        rows (H_l, W_l)
  level_start_index   (L,) int64          where each level begins along S (or None)
  sampling_locations  (B, Q, M, L, K, 2)  normalized (x, y)
  attention_weights   (B, Q, M, L, K)
  grad_out            (B, Q, M * D)       dLoss/d(output), the upstream gradient

For one sample (b, q, m, l, k) with weight A at pixel position X = x * W - 0.5, Y = y * H - 0.5:
x0 = floor(X), y0 = floor(Y), lx = X - x0, ly = Y - y0, and the four corners, row first,

    corner  pixel (row, col)   weight w_c
    00      (y0,     x0)       (1 - lx) * (1 - ly)
    01      (y0,     x0 + 1)   lx * (1 - ly)
    10      (y0 + 1, x0)       (1 - lx) * ly
    11      (y0 + 1, x0 + 1)   lx * ly

sampled = sum_c w_c * v_c (a D-vector; v_c = 0 for a corner outside the level) and
out[b, q, m] = sum over (l, k) of A * sampled. With g = grad_out[b, q, m] (a D-vector), the lab's
three functions return dLoss/dA, dLoss/d(x, y) and dLoss/dvalue.
"""

from typing import NamedTuple

import torch


class Corners(NamedTuple):
    """The four bilinear corners of every sample point, stacked along a leading axis of 4.

    The corner axis is ordered 00, 01, 10, 11 (row first), as in the table of the module
    docstring. Every sample shape below is (B, Q, M, L, K).
    """

    v: torch.Tensor  # (4, B, Q, M, L, K, D) fp32 corner pixels; exactly 0 outside the level
    w: torch.Tensor  # (4, B, Q, M, L, K) fp32 bilinear weights w_c
    valid: torch.Tensor  # (4, B, Q, M, L, K) bool: the corner lies inside its level
    row: torch.Tensor  # (4, B, Q, M, L, K) int64 row of value.reshape(B * S * M, D); clamped
    #                    into the level (so always a legal row) when the corner is outside
    lx: torch.Tensor  # (B, Q, M, L, K) fp32 fractional parts X - x0
    ly: torch.Tensor  # (B, Q, M, L, K) fp32 fractional parts Y - y0
    W: torch.Tensor  # (L, 1) fp32 level widths; broadcasts against (B, Q, M, L, K)
    H: torch.Tensor  # (L, 1) fp32 level heights


CORNER_OFFSETS = ((0, 0), (0, 1), (1, 0), (1, 1))  # (dy, dx) of corners 00, 01, 10, 11


def gather_corners(value, spatial_shapes, level_start_index, sampling_locations) -> Corners:
    """Read the four corners of every sample (given: this is labs 02 and 05 in torch).

    Out-of-bounds corners use the clamp-and-zero trick: the row index is clamped into the level,
    so every read is legal, and the value read is multiplied by the corner's validity.

    Args:
        value: (B, S, M, D), any float dtype.
        spatial_shapes: (L, 2) int, rows (H_l, W_l).
        level_start_index: (L,) int, or None (then derived from spatial_shapes).
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y).

    Returns:
        :class:`Corners`, all floating tensors in fp32.
    """
    B, S, M, D = value.shape
    L = spatial_shapes.shape[0]
    shapes = spatial_shapes.to(device=value.device, dtype=torch.int64)
    if level_start_index is None:
        sizes = shapes[:, 0] * shapes[:, 1]
        level_start_index = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    start = level_start_index.to(device=value.device, dtype=torch.int64).view(L, 1)
    h_int, w_int = shapes[:, 0].view(L, 1), shapes[:, 1].view(L, 1)
    h, w = h_int.float(), w_int.float()
    loc = sampling_locations.float()
    x = loc[..., 0] * w - 0.5  # [B, Q, M, L, K] pixel coordinates
    y = loc[..., 1] * h - 0.5
    x0, y0 = torch.floor(x), torch.floor(y)
    lx, ly = x - x0, y - y0
    x0, y0 = x0.long(), y0.long()
    b = torch.arange(B, device=value.device).view(B, 1, 1, 1, 1)
    m = torch.arange(M, device=value.device).view(1, 1, M, 1, 1)
    rows_of_value = value.float().reshape(B * S * M, D)
    v, wts, valid, rows = [], [], [], []
    for dy, dx in CORNER_OFFSETS:
        xc, yc = x0 + dx, y0 + dy
        inside = (xc >= 0) & (xc < w_int) & (yc >= 0) & (yc < h_int)
        xc = torch.minimum(xc.clamp(min=0), w_int - 1)
        yc = torch.minimum(yc.clamp(min=0), h_int - 1)
        row = (b * S + start + yc * w_int + xc) * M + m  # [B, Q, M, L, K]
        v.append(rows_of_value[row] * inside[..., None])
        wts.append((lx if dx else 1 - lx) * (ly if dy else 1 - ly))
        valid.append(inside)
        rows.append(row)
    return Corners(
        torch.stack(v), torch.stack(wts), torch.stack(valid), torch.stack(rows), lx, ly, w, h
    )


def grad_attention_weights(corners: Corners, g: torch.Tensor) -> torch.Tensor:
    """dLoss/dA for every sample: the output is linear in A, so it is <g, sampled>.

    Args:
        corners: the sample points' corners (:func:`gather_corners`).
        g: (B, Q, M, D) fp32 upstream gradient of each head's output.

    Returns:
        (B, Q, M, L, K) fp32.
    """
    # TODO(Task 7.1): blend the four corners with their weights into sampled [B, Q, M, L, K, D],
    # then take its dot product with g over D (broadcast g over L and K) (about 3 lines).
    raise NotImplementedError("Task 7.1: grad_attention_weights")


def grad_sampling_locations(
    corners: Corners, g: torch.Tensor, attention_weights: torch.Tensor
) -> torch.Tensor:
    """dLoss/d(x, y) for every sample: a corner difference in pixels, times the chain factor.

    Args:
        corners: the sample points' corners (:func:`gather_corners`).
        g: (B, Q, M, D) fp32 upstream gradient of each head's output.
        attention_weights: (B, Q, M, L, K) fp32.

    Returns:
        (B, Q, M, L, K, 2) fp32; the last axis is (x, y), like the locations.
    """
    # TODO(Task 7.2): d sampled / dX and d sampled / dY from corner differences (each blended by
    # the other axis' fractions), dotted with g over D, times A, times the chain factor of
    # X = x * W - 0.5 (W for x, H for y); stack as (x, y) (about 8 lines).
    raise NotImplementedError("Task 7.2: grad_sampling_locations")


def scatter_grad_value(
    grad_value_rows: torch.Tensor,
    corners: Corners,
    g: torch.Tensor,
    attention_weights: torch.Tensor,
) -> torch.Tensor:
    """dLoss/dvalue: every corner that a sample read receives A * w_c * g, summed over samples.

    Args:
        grad_value_rows: (B * S * M, D) fp32 zeros, value's gradient as rows (the same rows as
            ``corners.row`` index); add into it in place.
        corners: the sample points' corners (:func:`gather_corners`).
        g: (B, Q, M, D) fp32 upstream gradient of each head's output.
        attention_weights: (B, Q, M, L, K) fp32.

    Returns:
        ``grad_value_rows``, holding the gradient.
    """
    D = g.shape[-1]
    # TODO(Task 7.3): each corner's share A * w_c (zero for a corner outside its level) times g,
    # [4, B, Q, M, L, K, D]; add all of them into the rows corners.row with one index_add_ (two
    # samples may share a pixel: their shares must add up) (about 4 lines).
    raise NotImplementedError("Task 7.3: scatter_grad_value")


def msda_backward_torch(
    value, spatial_shapes, level_start_index, sampling_locations, attention_weights, grad_out
):
    """The MSDA backward: the gradients of the output with respect to its three float inputs.

    Args:
        value: (B, S, M, D).
        spatial_shapes: (L, 2) int, rows (H_l, W_l).
        level_start_index: (L,) int, or None.
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y).
        attention_weights: (B, Q, M, L, K).
        grad_out: (B, Q, M * D) upstream gradient.

    Returns:
        (grad_value (B, S, M, D), grad_loc (B, Q, M, L, K, 2), grad_attn (B, Q, M, L, K)), all
        fp32 whatever the input dtype.
    """
    B, S, M, D = value.shape
    Q = sampling_locations.shape[1]
    corners = gather_corners(value, spatial_shapes, level_start_index, sampling_locations)
    g = grad_out.float().reshape(B, Q, M, D)
    attn = attention_weights.float()
    grad_attn = grad_attention_weights(corners, g)
    grad_loc = grad_sampling_locations(corners, g, attn)
    rows = torch.zeros(B * S * M, D, dtype=torch.float32, device=value.device)
    grad_value = scatter_grad_value(rows, corners, g, attn).view(B, S, M, D)
    return grad_value, grad_loc, grad_attn


if __name__ == "__main__":
    # Run your functions on one small example and compare them with the student-facing spec
    # (msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not
    # the grade; `nox -s lab07` is.
    from msda_labs.student.check import run_lab

    run_lab(7, globals())
