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
    left = math.floor(x)
    top = math.floor(y)
    frac_x = x - left
    frac_y = y - top
    total = img.new_zeros(D)
    for dy in (0, 1):
        wy = frac_y if dy else 1.0 - frac_y
        r = top + dy
        if r < 0 or r >= H:
            continue
        for dx in (0, 1):
            c = left + dx
            if 0 <= c < W:
                wx = frac_x if dx else 1.0 - frac_x
                total = total + (wx * wy) * img[r, c]
    return total


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
    shapes = [tuple(int(v) for v in row) for row in spatial_shapes.tolist()]
    offsets = [0]
    for h, w in shapes:
        offsets.append(offsets[-1] + h * w)
    result = value.new_zeros(B, Q, M * D)
    for b in range(B):
        for lvl, (h, w) in enumerate(shapes):
            level = value[b, offsets[lvl]:offsets[lvl + 1]]
            for m in range(M):
                image = level[:, m].reshape(h, w, D)
                channels = slice(m * D, (m + 1) * D)
                for q in range(Q):
                    for k in range(K):
                        px, py = sampling_locations[b, q, m, lvl, k].tolist()
                        read = bilinear_sample(image, px * w - 0.5, py * h - 0.5)
                        result[b, q, channels] += attention_weights[b, q, m, lvl, k] * read
    return result


if __name__ == "__main__":
    # Run your functions on one small example and compare them with the student-facing spec
    # (msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not
    # the grade; `nox -s lab01` is.
    from msda_labs.student.check import run_lab

    run_lab(1, globals())
