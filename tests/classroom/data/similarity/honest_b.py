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
    col = int(math.floor(x))
    row = int(math.floor(y))
    ax, ay = x - col, y - row
    picks = []
    for r, c, share in ((row, col, (1 - ax) * (1 - ay)), (row + 1, col, (1 - ax) * ay),
                        (row, col + 1, ax * (1 - ay)), (row + 1, col + 1, ax * ay)):
        inside = 0 <= r < H and 0 <= c < W
        picks.append(img[r, c] * share if inside else torch.zeros_like(img[0, 0]))
    return torch.stack(picks).sum(dim=0)


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
    sizes = spatial_shapes.tolist()
    counts = torch.tensor([h * w for h, w in sizes])
    starts = (torch.cumsum(counts, 0) - counts).tolist()
    pieces = []
    for b in range(B):
        per_query = []
        for q in range(Q):
            heads = []
            for m in range(M):
                acc = torch.zeros(D, dtype=value.dtype)
                for lvl, (h, w) in enumerate(sizes):
                    grid = value[b, starts[lvl]:starts[lvl] + h * w, m].view(h, w, D)
                    for k in range(K):
                        loc = sampling_locations[b, q, m, lvl, k]
                        sample = bilinear_sample(grid, float(loc[0]) * w - 0.5,
                                                 float(loc[1]) * h - 0.5)
                        acc = acc + attention_weights[b, q, m, lvl, k] * sample
                heads.append(acc)
            per_query.append(torch.cat(heads))
        pieces.append(torch.stack(per_query))
    return torch.stack(pieces)


if __name__ == "__main__":
    # Run your functions on one small example and compare them with the student-facing spec
    # (msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not
    # the grade; `nox -s lab01` is.
    from msda_labs.student.check import run_lab

    run_lab(1, globals())
