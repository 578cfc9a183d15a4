"""Lab 01 - The spec: multi-scale deformable attention in plain Python loops.

Goal: write MSDA by its definition, so plainly that it is obviously right; every later lab is
graded against exactly this behaviour.

In this lab you will:
  * read one bilinear sample of an (H, W, D) image at pixel coordinates, with zero padding;
  * loop over batch, query, head, level and point to build the MSDA output.

Conventions (the same in every lab):
  value               (B, S, M, D)        levels flattened row-major and concatenated along S
  spatial_shapes      (L, 2)              rows are (H_l, W_l), height first
  sampling_locations  (B, Q, M, L, K, 2)  normalized (x, y) in [0, 1]; x runs along the width
  attention_weights   (B, Q, M, L, K)
  output              (B, Q, M * D)       heads concatenated: channel m * D + d

A normalized location (x, y) on a level of size (H, W) is the pixel position
x_pix = x * W - 0.5, y_pix = y * H - 0.5: pixel centres sit at integer coordinates.
"""

import math

import torch


def bilinear_sample(img: torch.Tensor, x: float, y: float) -> torch.Tensor:
    """Bilinear read of ``img`` at pixel coordinates (x, y), zero padding outside.

    Args:
        img: (H, W, D) image; pixel (row, col) is ``img[row, col]``.
        x: column coordinate in pixels (a Python float; may be negative or >= W).
        y: row coordinate in pixels.

    Returns:
        (D,) tensor of ``img``'s dtype: the four surrounding pixels blended by their weights;
        a corner outside the image contributes 0 (no clamping to the border).
    """
    H, W, D = img.shape
    # TODO(Task 1.1): floor both coordinates, take the fractional parts, and add up the four
    # corners (row, col, weight) that lie inside the image (about 10 lines).
    # BEGIN SOLUTION
    x0, y0 = math.floor(x), math.floor(y)
    lx, ly = x - x0, y - y0
    out = torch.zeros(D, dtype=img.dtype, device=img.device)
    corners = (
        (y0, x0, (1 - lx) * (1 - ly)),
        (y0, x0 + 1, lx * (1 - ly)),
        (y0 + 1, x0, (1 - lx) * ly),
        (y0 + 1, x0 + 1, lx * ly),
    )
    for row, col, weight in corners:
        if 0 <= row < H and 0 <= col < W:
            out = out + weight * img[row, col]
    return out
    # STARTER
    # raise NotImplementedError("Task 1.1: bilinear_sample")
    # END SOLUTION


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    """MSDA forward by definition: five nested loops over (b, q, m, level, k).

    Args:
        value: (B, S, M, D).
        spatial_shapes: (L, 2) int64, rows (H_l, W_l).
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y).
        attention_weights: (B, Q, M, L, K).

    Returns:
        (B, Q, M * D) tensor of ``value``'s dtype.
    """
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    # TODO(Task 1.2): walk the levels keeping a running start along S; view each level of head m
    # as an (H, W, D) image; map every location to pixels and accumulate
    # attention * bilinear_sample(...) into out[b, q, m] (about 15 lines).
    # BEGIN SOLUTION
    out = torch.zeros(B, Q, M, D, dtype=value.dtype, device=value.device)
    for b in range(B):
        for q in range(Q):
            for m in range(M):
                start = 0
                for lvl in range(L):
                    h, w = int(spatial_shapes[lvl, 0]), int(spatial_shapes[lvl, 1])
                    img = value[b, start:start + h * w, m].reshape(h, w, D)
                    for k in range(K):
                        x = float(sampling_locations[b, q, m, lvl, k, 0]) * w - 0.5
                        y = float(sampling_locations[b, q, m, lvl, k, 1]) * h - 0.5
                        weight = attention_weights[b, q, m, lvl, k]
                        out[b, q, m] += weight * bilinear_sample(img, x, y)
                    start += h * w
    return out.reshape(B, Q, M * D)
    # STARTER
    # raise NotImplementedError("Task 1.2: msda_naive_student")
    # END SOLUTION


if __name__ == "__main__":
    # Run your functions on one small example and compare them with the student-facing spec
    # (msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not
    # the grade; `nox -s lab01` is.
    from msda_labs.student.check import run_lab

    run_lab(1, globals())
