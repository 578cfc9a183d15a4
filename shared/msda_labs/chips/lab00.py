"""Lab 00 - The idea: deformable attention in plain PyTorch.

Goal: see what (multi-scale) deformable attention computes, and why it is built that way, by
writing it from one differentiable bilinear read up to the cross-attention layer of a Deformable
DETR decoder.

In this lab you will:
  * read an image at many fractional pixel positions with a single F.grid_sample call;
  * let each query look at K points and blend what it reads there (deform_attend);
  * make a layer predict where to look and how much each point counts: DeformableAttention
    (every pixel of a feature map is a query) and DeformableCrossAttention (queries read a map);
  * read L pyramid levels at once: the MSDA operator msda, one grid_sample per level;
  * assemble MSDACrossAttention, the layer whose core the rest of the course makes fast.

Conventions (the same in every lab):
  value               (B, S, M, D)        levels flattened row-major and concatenated along S
  spatial_shapes      (L, 2)              rows are (H_l, W_l), height first
  sampling_locations  (B, Q, M, L, K, 2)  normalized (x, y) in [0, 1]; x runs along the width
  attention_weights   (B, Q, M, L, K)
  output              (B, Q, M * D)       heads concatenated: channel m * D + d

Pixel coordinates put the centre of pixel (row i, col j) at (x = j, y = i). A normalized location
(x, y) on a level of size (H, W) is the pixel position x * W - 0.5, y * H - 0.5.
"""

import torch
import torch.nn.functional as F  # noqa: F401 (the starter leaves it unused)
from torch import nn


def bilinear_sample(img: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Bilinear reads of an image at many pixel positions, zero padding outside.

    Args:
        img: (H, W, D) image; pixel (row, col) is ``img[row, col]``.
        points: (N, 2) pixel coordinates (x, y): x counts columns, y counts rows, and the centre of
            pixel (row i, col j) is (x = j, y = i).

    Returns:
        (N, D) tensor of ``img``'s dtype, differentiable with respect to ``img`` and ``points``.
    """
    H, W, D = img.shape
    # TODO(Task 0.1): one F.grid_sample call, no loop over the points (about 5 lines).
    #   1. grid_sample reads a batch of images shaped (batch, channels, H, W): make img
    #      (1, D, H, W).
    #   2. Its grid runs from -1 (left edge of the first pixel) to +1 (right edge of the last
    #      one), so a pixel coordinate p becomes g = 2 * (p + 0.5) / size - 1, with size W for x
    #      and H for y. Shape the grid (1, N, 1, 2), last axis (x, y).
    #   3. mode="bilinear", padding_mode="zeros", align_corners=False; the result is
    #      (1, D, N, 1): bring it back to (N, D).
    # BEGIN SOLUTION
    size = torch.tensor([W, H], dtype=img.dtype, device=img.device)
    grid = (2 * (points.to(img.dtype) + 0.5) / size - 1).view(1, -1, 1, 2)
    image = img.permute(2, 0, 1).unsqueeze(0)
    out = F.grid_sample(image, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out[0, :, :, 0].transpose(0, 1)
    # STARTER
    # raise NotImplementedError("Task 0.1: bilinear_sample")
    # END SOLUTION


def deform_attend(value: torch.Tensor, points: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """One head of deformable attention on one image: each query blends K bilinear samples.

    Args:
        value: (H, W, D) feature map.
        points: (Q, K, 2) pixel coordinates (x, y) where query q looks (reference + offset).
        weights: (Q, K) how much each point counts, used as given (no softmax in here).

    Returns:
        (Q, D): ``out[q] = sum over k of weights[q, k] * bilinear_sample(value, points[q, k])``.
    """
    Q, K, _ = points.shape
    # TODO(Task 0.2): read all Q * K points with ONE bilinear_sample call, view the result as
    # (Q, K, D) and take the weighted sum over K (about 3 lines).
    # BEGIN SOLUTION
    samples = bilinear_sample(value, points.reshape(Q * K, 2)).reshape(Q, K, -1)
    return (weights.unsqueeze(-1) * samples).sum(dim=1)
    # STARTER
    # raise NotImplementedError("Task 0.2: deform_attend")
    # END SOLUTION


class DeformableAttention(nn.Module):
    """Deformable self-attention on one feature map: every position is a query.

    Position (row i, col j) has the reference point (x = j, y = i), the centre of its own pixel.
    From the feature vector there, linear layers predict for each of the M heads K offsets (in
    pixels) and K attention logits (softmax over the K points); head m reads its D = C / M value
    channels at reference + offset with ``deform_attend``.

    Submodules (the grader loads its own weights into them, so their names and sizes matter; all
    are ``nn.Linear`` with bias):
        value_proj:  C -> C           output viewed (..., M, D)
        offset_proj: C -> M * K * 2   output viewed (..., M, K, 2), last axis (x, y) in pixels
        weight_proj: C -> M * K       output viewed (..., M, K), softmax over K
        out_proj:    C -> C           applied to the heads side by side (channel m * D + d)
    """

    def __init__(self, embed_dim: int, num_heads: int, num_points: int):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not a multiple of num_heads {num_heads}")
        self.embed_dim, self.num_heads, self.num_points = embed_dim, num_heads, num_points
        self.head_dim = embed_dim // num_heads
        # TODO(Task 0.3): the four nn.Linear layers listed in the class docstring, 4 lines; with
        # forward below, the whole class is (about 20 lines).
        # BEGIN SOLUTION
        self.value_proj = nn.Linear(embed_dim, embed_dim)
        self.offset_proj = nn.Linear(embed_dim, num_heads * num_points * 2)
        self.weight_proj = nn.Linear(embed_dim, num_heads * num_points)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        # STARTER
        # raise NotImplementedError("Task 0.3: DeformableAttention.__init__")
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend from every position of ``x``.

        Args:
            x: (B, H, W, C) feature map.

        Returns:
            (B, H, W, C).
        """
        B, H, W, C = x.shape
        M, K, D = self.num_heads, self.num_points, self.head_dim
        # TODO(Task 0.3): the forward pass (about 15 lines).
        #   1. value (B, H, W, M, D); offsets (B, H * W, M, K, 2); weights (B, H * W, M, K),
        #      softmax over K.
        #   2. Reference points (H * W, 2): position (i, j) -> (x = j, y = i); careful,
        #      torch.meshgrid(rows, cols, indexing="ij") gives rows first. Add the offsets.
        #   3. For each b and m: deform_attend(value[b, :, :, m], points[b, :, m], weights[b, :, m])
        #      is (H * W, D).
        #   4. Heads side by side (channel m * D + d), back to (B, H, W, C), then out_proj.
        # BEGIN SOLUTION
        value = self.value_proj(x).view(B, H, W, M, D)
        offsets = self.offset_proj(x).view(B, H * W, M, K, 2)
        weights = self.weight_proj(x).view(B, H * W, M, K).softmax(dim=-1)
        rows = torch.arange(H, dtype=x.dtype, device=x.device)
        cols = torch.arange(W, dtype=x.dtype, device=x.device)
        grid_y, grid_x = torch.meshgrid(rows, cols, indexing="ij")
        ref = torch.stack([grid_x, grid_y], dim=-1).view(1, H * W, 1, 1, 2)
        points = ref + offsets  # [B, H*W, M, K, 2]
        batches = []
        for b in range(B):
            heads = [deform_attend(value[b, :, :, m], points[b, :, m], weights[b, :, m])
                     for m in range(M)]
            batches.append(torch.stack(heads, dim=1))  # [H*W, M, D]
        out = torch.stack(batches).reshape(B, H, W, C)
        return self.out_proj(out)
        # STARTER
        # raise NotImplementedError("Task 0.3: DeformableAttention.forward")
        # END SOLUTION


class DeformableCrossAttention(nn.Module):
    """Deformable cross-attention: Q queries read one feature map around their reference points.

    The offsets and logits are predicted from the query (never from the map). A reference point
    is normalized (x, y) in [0, 1]; on a map of size (H, W) it sits at the pixel position
    (x * W - 0.5, y * H - 0.5), and the offsets, in pixels, are added to that.

    Submodules: the same four ``nn.Linear`` layers as :class:`DeformableAttention` (value_proj
    C -> C on the map, offset_proj C -> M * K * 2, weight_proj C -> M * K, out_proj C -> C).
    """

    def __init__(self, embed_dim: int, num_heads: int, num_points: int):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not a multiple of num_heads {num_heads}")
        self.embed_dim, self.num_heads, self.num_points = embed_dim, num_heads, num_points
        self.head_dim = embed_dim // num_heads
        # TODO(Task 0.4): the same four nn.Linear layers, 4 lines; with forward below, the whole
        # class is (about 18 lines).
        # BEGIN SOLUTION
        self.value_proj = nn.Linear(embed_dim, embed_dim)
        self.offset_proj = nn.Linear(embed_dim, num_heads * num_points * 2)
        self.weight_proj = nn.Linear(embed_dim, num_heads * num_points)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        # STARTER
        # raise NotImplementedError("Task 0.4: DeformableCrossAttention.__init__")
        # END SOLUTION

    def forward(self, query: torch.Tensor, reference_points: torch.Tensor,
                value: torch.Tensor) -> torch.Tensor:
        """Let every query read ``value`` around its reference point.

        Args:
            query: (B, Q, C).
            reference_points: (B, Q, 2) normalized (x, y) in [0, 1].
            value: (B, H, W, C) feature map.

        Returns:
            (B, Q, C).
        """
        B, Q, C = query.shape
        _, H, W, _ = value.shape
        M, K, D = self.num_heads, self.num_points, self.head_dim
        # TODO(Task 0.4): the forward pass (about 14 lines). Three changes from
        # DeformableAttention: value_proj reads the map, offset_proj and weight_proj read the
        # queries, and the reference point is reference_points * (W, H) - 0.5 (x pairs with W).
        # BEGIN SOLUTION
        value = self.value_proj(value).view(B, H, W, M, D)
        offsets = self.offset_proj(query).view(B, Q, M, K, 2)
        weights = self.weight_proj(query).view(B, Q, M, K).softmax(dim=-1)
        size = torch.tensor([W, H], dtype=query.dtype, device=query.device)
        ref = reference_points * size - 0.5  # [B, Q, 2] pixels
        points = ref[:, :, None, None, :] + offsets  # [B, Q, M, K, 2]
        batches = []
        for b in range(B):
            heads = [deform_attend(value[b, :, :, m], points[b, :, m], weights[b, :, m])
                     for m in range(M)]
            batches.append(torch.stack(heads, dim=1))  # [Q, M, D]
        out = torch.stack(batches).reshape(B, Q, C)
        return self.out_proj(out)
        # STARTER
        # raise NotImplementedError("Task 0.4: DeformableCrossAttention.forward")
        # END SOLUTION


def msda(value: torch.Tensor, spatial_shapes: torch.Tensor, sampling_locations: torch.Tensor,
         attention_weights: torch.Tensor) -> torch.Tensor:
    """Multi-scale deformable attention: one grid_sample per pyramid level.

    Args:
        value: (B, S, M, D), the L levels flattened row-major and concatenated along S.
        spatial_shapes: (L, 2) int64, rows (H_l, W_l).
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y).
        attention_weights: (B, Q, M, L, K), used as given.

    Returns:
        (B, Q, M * D) in ``value``'s dtype, differentiable with respect to the three float inputs.
    """
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    # TODO(Task 0.5): a loop over the levels only, batch and heads go together (about 12 lines).
    #   1. Split value along S into the levels (sizes H_l * W_l).
    #   2. Per level: the image (B * M, D, H_l, W_l), the grid 2 * loc - 1 of that level as
    #      (B * M, Q, K, 2), one grid_sample -> (B * M, D, Q, K).
    #   3. Stack the levels to (B * M, D, Q, L * K), multiply by the weights laid out as
    #      (B * M, 1, Q, L * K), sum the last axis, and rearrange (B * M, D, Q) to (B, Q, M * D).
    # BEGIN SOLUTION
    shapes = [(int(h), int(w)) for h, w in spatial_shapes.tolist()]
    levels = value.split([h * w for h, w in shapes], dim=1)
    grids = 2 * sampling_locations - 1
    sampled = []
    for lvl, (h, w) in enumerate(shapes):
        image = levels[lvl].permute(0, 2, 3, 1).reshape(B * M, D, h, w)
        grid = grids[:, :, :, lvl].transpose(1, 2).reshape(B * M, Q, K, 2)
        sampled.append(F.grid_sample(image, grid, mode="bilinear", padding_mode="zeros",
                                     align_corners=False))  # [B*M, D, Q, K]
    stacked = torch.stack(sampled, dim=-2).flatten(-2)  # [B*M, D, Q, L*K]
    weights = attention_weights.transpose(1, 2).reshape(B * M, 1, Q, L * K)
    out = (stacked * weights).sum(dim=-1)  # [B*M, D, Q]
    return out.view(B, M, D, Q).permute(0, 3, 1, 2).reshape(B, Q, M * D)
    # STARTER
    # raise NotImplementedError("Task 0.5: msda")
    # END SOLUTION


class MSDACrossAttention(nn.Module):
    """Multi-scale deformable cross-attention, the Deformable DETR decoder's layer.

    Each query predicts, per head, K offsets on each of the L levels (in that level's pixels) and
    L * K logits that share ONE softmax, so a head can move its whole budget to one scale. An
    offset (dx, dy) on level l of size (H_l, W_l) moves the normalized reference point by
    (dx / W_l, dy / H_l). The core is :func:`msda`.

    Submodules (all ``nn.Linear`` with bias):
        value_proj:  C -> C               on the flattened pyramid, output viewed (B, S, M, D)
        offset_proj: C -> M * L * K * 2   output viewed (B, Q, M, L, K, 2), (x, y) in pixels
        weight_proj: C -> M * L * K       output viewed (B, Q, M, L * K), softmax over L * K
        out_proj:    C -> C
    """

    def __init__(self, embed_dim: int, num_heads: int, num_levels: int, num_points: int):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not a multiple of num_heads {num_heads}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.num_levels, self.num_points = num_levels, num_points
        self.head_dim = embed_dim // num_heads
        # TODO(Task 0.6): the four nn.Linear layers of the class docstring, 4 lines; with forward
        # below, the whole class is (about 12 lines).
        # BEGIN SOLUTION
        self.value_proj = nn.Linear(embed_dim, embed_dim)
        self.offset_proj = nn.Linear(embed_dim, num_heads * num_levels * num_points * 2)
        self.weight_proj = nn.Linear(embed_dim, num_heads * num_levels * num_points)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        # STARTER
        # raise NotImplementedError("Task 0.6: MSDACrossAttention.__init__")
        # END SOLUTION

    def forward(self, query: torch.Tensor, reference_points: torch.Tensor, value: torch.Tensor,
                spatial_shapes: torch.Tensor) -> torch.Tensor:
        """Let every query read the pyramid around its reference point.

        Args:
            query: (B, Q, C).
            reference_points: (B, Q, 2) normalized (x, y), the same point on every level.
            value: (B, S, C) the flattened pyramid.
            spatial_shapes: (L, 2) int64, rows (H_l, W_l).

        Returns:
            (B, Q, C).
        """
        B, Q, C = query.shape
        S = value.shape[1]
        M, L, K, D = self.num_heads, self.num_levels, self.num_points, self.head_dim
        # TODO(Task 0.6): the forward pass (about 8 lines): value (B, S, M, D); offsets
        # (B, Q, M, L, K, 2) divided by each level's (W_l, H_l) (spatial_shapes is (H, W): flip
        # it) and added to the reference point; weights: one softmax over L * K; msda; out_proj.
        # BEGIN SOLUTION
        value = self.value_proj(value).view(B, S, M, D)
        offsets = self.offset_proj(query).view(B, Q, M, L, K, 2)
        weights = self.weight_proj(query).view(B, Q, M, L * K).softmax(dim=-1)
        weights = weights.view(B, Q, M, L, K)
        size = spatial_shapes.flip(-1).to(query.dtype)  # [L, 2] as (W_l, H_l)
        loc = reference_points[:, :, None, None, None, :] + offsets / size[:, None, :]
        return self.out_proj(msda(value, spatial_shapes, loc, weights))
        # STARTER
        # raise NotImplementedError("Task 0.6: MSDACrossAttention.forward")
        # END SOLUTION


if __name__ == "__main__":
    # Run your functions on one small example and compare them with the student-facing spec
    # (msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not
    # the grade; `nox -s lab00` is.
    from msda_labs.student.check import run_lab

    run_lab(0, globals())
