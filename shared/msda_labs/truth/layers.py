"""Ground truth for lab 00's layers: the deformable-attention layers built on the reference.

Three layers share four projections (``value_proj``, ``offset_proj``, ``weight_proj``,
``out_proj``, all ``nn.Linear`` with bias) and differ in where their queries look from:

* :func:`deformable_attention`: self-attention on one (B, H, W, C) map; every pixel is a query and
  looks from its own centre.
* :func:`deformable_cross_attention`: Q queries with normalized (x, y) reference points on one map.
* :func:`msda_cross_attention`: the same over a pyramid of L levels (MSDA).

Each is computed in float64 from a ``state`` dict of weights, with the projection steps named in
:class:`LayerSteps` (defaults: the spec) so that :mod:`msda_labs.mistakes.layers` can build the
output of a familiar mistake by replacing one step. :class:`Layer` and :func:`layer_state` make the
graded cases: seeded weights whose offsets are a few pixels, some reaching outside the map.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from msda_labs.truth.cases import OFFSET_PIXELS, Layer, layer_state
from msda_labs.truth.reference import msda_reference

__all__ = ["OFFSET_PIXELS", "Layer", "LayerSteps", "LAYER_SPEC", "bilinear_sample",
           "collapsed_attention", "collapsed_cross_attention", "collapsed_msda_attention",
           "deform_attend", "deformable_attention", "deformable_cross_attention", "layer_state",
           "linear", "msda_cross_attention"]

def bilinear_sample(img, points):
    """A correct bilinear_sample: (H, W, D) image, (N, 2) pixel points (x, y) -> (N, D)."""
    H, W, D = img.shape
    size = torch.tensor([W, H], dtype=img.dtype, device=img.device)
    loc = ((points.to(img.dtype) + 0.5) / size).reshape(1, -1, 1, 1, 1, 2)
    ones = loc.new_ones(loc.shape[:-1])
    return msda_reference(img.reshape(1, H * W, 1, D), [[H, W]], loc, ones)[0]


def deform_attend(value, points, weights):
    """A correct deform_attend: (H, W, D) map, (Q, K, 2) points, (Q, K) weights -> (Q, D)."""
    Q, K, _ = points.shape
    samples = bilinear_sample(value, points.reshape(Q * K, 2)).reshape(Q, K, -1)
    return (weights.unsqueeze(-1) * samples).sum(dim=1)


def linear(state, name, x):
    """The projection ``name`` of ``state`` applied to x (as nn.Linear does)."""
    return x @ state[f"{name}.weight"].T + state[f"{name}.bias"]


def split_heads(v, M):
    """(..., C) -> (..., M, D): head m owns channels m * D .. m * D + D - 1."""
    return v.unflatten(-1, (M, v.shape[-1] // M))


def head_softmax(logits, M, L, K):
    """(..., M * L * K) logits -> (..., M, L, K) weights: one softmax over the L * K of a head."""
    return logits.unflatten(-1, (M, L * K)).softmax(-1).unflatten(-1, (L, K))


def pixel_centres(H, W, dtype):
    """(H * W, 2) pixel centres (x = column, y = row), row-major: where each pixel looks from."""
    rows, cols = torch.meshgrid(torch.arange(H, dtype=dtype), torch.arange(W, dtype=dtype),
                                indexing="ij")
    return torch.stack([cols, rows], dim=-1).reshape(H * W, 2)


def reference_pixels(ref, size):
    """Normalized (x, y) reference points -> pixel coordinates; ``size`` is (W, H)."""
    return ref * size - 0.5


def level_sizes(shapes, dtype):
    """(L, 2) rows (H_l, W_l) -> (L, 2) rows (W_l, H_l), what an (x, y) offset divides by."""
    return shapes.flip(-1).to(dtype)


def merge_heads(out, M):
    """(..., M * D) head-major: what out_proj reads, as it is."""
    return out


def _identity(t):
    return t


@dataclass(frozen=True)
class LayerSteps:
    """The steps of a layer that a familiar mistake gets wrong; each default is the spec."""

    split_heads: Callable = split_heads  # (..., C), M -> (..., M, D)
    merge_heads: Callable = merge_heads  # (..., M * D), M -> what out_proj reads
    weights: Callable = head_softmax  # logits, M, L, K -> (..., M, L, K)
    offsets: Callable = _identity  # (..., 2) predicted offsets, (x, y)
    centres: Callable = pixel_centres  # H, W, dtype -> (H * W, 2) self-attention query points
    reference_pixels: Callable = reference_pixels  # ref, (W, H) -> pixel coordinates
    level_sizes: Callable = level_sizes  # shapes, dtype -> (L, 2) divisors (W_l, H_l)
    # value (B, S, M, D), shapes, locations, weights -> (B, Q, M * D): how the points are read
    # (a judge may put a stand-in reader of its own here, to grade a layer apart from its parts)
    sample: Callable = msda_reference


LAYER_SPEC = LayerSteps()


def deformable_attention(s, x, M, K, steps: LayerSteps = LAYER_SPEC):
    """DeformableAttention from weights ``s``: (B, H, W, C) -> (B, H, W, C)."""
    B, H, W, C = x.shape
    D = C // M
    value = steps.split_heads(linear(s, "value_proj", x), M).reshape(B, H * W, M, D)
    offsets = steps.offsets(linear(s, "offset_proj", x).reshape(B, H * W, M, K, 2))
    attn = steps.weights(linear(s, "weight_proj", x).reshape(B, H * W, M * K), M, 1, K)
    centres = steps.centres(H, W, x.dtype).reshape(1, H * W, 1, 1, 2)
    loc = (centres + offsets + 0.5) / torch.tensor([W, H], dtype=x.dtype)
    out = steps.sample(value, [[H, W]], loc.unsqueeze(3), attn)
    return linear(s, "out_proj", steps.merge_heads(out, M)).reshape(B, H, W, C)


def deformable_cross_attention(s, query, ref_points, value, M, K,
                               steps: LayerSteps = LAYER_SPEC):
    """DeformableCrossAttention from weights ``s``: query (B, Q, C), reference points (B, Q, 2),
    value (B, H, W, C) -> (B, Q, C)."""
    B, Q, C = query.shape
    _, H, W, _ = value.shape
    D = C // M
    v = steps.split_heads(linear(s, "value_proj", value), M).reshape(B, H * W, M, D)
    offsets = steps.offsets(linear(s, "offset_proj", query).reshape(B, Q, M, K, 2))
    attn = steps.weights(linear(s, "weight_proj", query), M, 1, K)
    size = torch.tensor([W, H], dtype=query.dtype)
    ref_pix = steps.reference_pixels(ref_points[:, :, None, None, :], size)
    loc = (ref_pix + offsets + 0.5) / size
    out = steps.sample(v, [[H, W]], loc.unsqueeze(3), attn)
    return linear(s, "out_proj", steps.merge_heads(out, M))


def msda_cross_attention(s, query, ref_points, value, shapes, M, L, K,
                         steps: LayerSteps = LAYER_SPEC):
    """MSDACrossAttention from weights ``s``: query (B, Q, C), reference points (B, Q, 2), value
    (B, S, C) over the levels ``shapes`` (L, 2) -> (B, Q, C)."""
    B, Q, C = query.shape
    v = steps.split_heads(linear(s, "value_proj", value), M)
    offsets = steps.offsets(linear(s, "offset_proj", query).reshape(B, Q, M, L, K, 2))
    attn = steps.weights(linear(s, "weight_proj", query), M, L, K)
    size = steps.level_sizes(shapes, query.dtype)
    loc = ref_points[:, :, None, None, None, :] + offsets / size[:, None, :]
    out = steps.sample(v, shapes, loc, attn)
    return linear(s, "out_proj", steps.merge_heads(out, M))


# With offset_proj and weight_proj zeroed, every point sits on its query's reference point and
# the points of a head weigh the same: each layer collapses to a simpler formula, computed here
# without the attention machinery (an independent check of it).
def collapsed_attention(s, x):
    """DeformableAttention with zeroed predictors: out_proj(value_proj(x)), pixel by pixel."""
    return linear(s, "out_proj", linear(s, "value_proj", x))


def collapsed_cross_attention(s, query, ref_points, value):
    """DeformableCrossAttention with zeroed predictors: one bilinear lookup of all C channels of
    value_proj(value) at each reference point, then out_proj."""
    projected = linear(s, "value_proj", value).permute(0, 3, 1, 2)  # [B, C, H, W]
    grid = (2 * ref_points - 1).unsqueeze(2)  # [B, Q, 1, 2]
    looked_up = F.grid_sample(projected, grid, mode="bilinear", padding_mode="zeros",
                              align_corners=False)[..., 0].transpose(1, 2)  # [B, Q, C]
    return linear(s, "out_proj", looked_up)


def collapsed_msda_attention(s, query, ref_points, value, shapes, M, L, K):
    """MSDACrossAttention with zeroed predictors: MSDA with every point on the reference point
    and each of the L * K points weighing 1 / (L * K)."""
    B, Q, C = query.shape
    projected = linear(s, "value_proj", value).reshape(B, -1, M, C // M)
    loc = ref_points[:, :, None, None, None, :].expand(B, Q, M, L, K, 2)
    uniform = torch.full((B, Q, M, L, K), 1.0 / (L * K), dtype=torch.float64)
    return linear(s, "out_proj", msda_reference(projected, shapes, loc, uniform))
