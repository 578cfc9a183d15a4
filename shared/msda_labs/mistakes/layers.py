"""Known mistakes in lab 00's attention layers, each one step of :class:`LayerSteps` replaced.

A mistake is a small function registered in :data:`LAYERS` that takes the spec's steps and
returns them with one step wrong; :func:`layer_variants` runs a layer reference of
:mod:`msda_labs.truth.layers` with each, for ``expect_close(variants=...)``.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from msda_labs.mistakes.registry import Catalogue
from msda_labs.truth.layers import LAYER_SPEC, LayerSteps, level_sizes, pixel_centres

__all__ = ["CROSS_MISTAKES", "LAYERS", "MSDA_LAYER_MISTAKES", "SELF_MISTAKES", "layer_variants"]

LAYERS = Catalogue("layer")


# -- the three layers ---------------------------------------------------------------------------
@LAYERS.register("offsets_yx", "offsets read as (y, x): the last axis of the offsets is (x, y)")
def offsets_yx(steps: LayerSteps) -> LayerSteps:
    return replace(steps, offsets=lambda offsets: offsets.flip(-1))


@LAYERS.register("softmax_heads", "the softmax taken across the heads: each head's weights sum "
                                  "to 1 on their own")
def softmax_heads(steps: LayerSteps) -> LayerSteps:
    def weights(logits, M, L, K):
        return logits.unflatten(-1, (M, L * K)).softmax(-2).unflatten(-1, (L, K))

    return replace(steps, weights=weights)


@LAYERS.register("softmax_joint", "one softmax over all heads together: each head's weights sum "
                                  "to 1 on their own")
def softmax_joint(steps: LayerSteps) -> LayerSteps:
    return replace(steps, weights=lambda logits, M, L, K: logits.softmax(-1)
                   .unflatten(-1, (M, L, K)))


@LAYERS.register("no_softmax", "the attention logits used without a softmax")
def no_softmax(steps: LayerSteps) -> LayerSteps:
    return replace(steps, weights=lambda logits, M, L, K: logits.unflatten(-1, (M, L, K)))


@LAYERS.register("value_split_dm", "the value split into heads as (D, M): head m owns channels "
                                   "m * D to m * D + D - 1, so view (..., M, D)")
def value_split_dm(steps: LayerSteps) -> LayerSteps:
    return replace(steps, split_heads=lambda v, M: v.unflatten(-1, (v.shape[-1] // M, M))
                   .transpose(-1, -2))


@LAYERS.register("heads_interleaved", "heads put side by side in the wrong order: channel "
                                      "m * D + d belongs to head m")
def heads_interleaved(steps: LayerSteps) -> LayerSteps:
    return replace(steps, merge_heads=lambda out, M: out.unflatten(-1, (M, out.shape[-1] // M))
                   .transpose(-1, -2).flatten(-2))


# -- DeformableAttention: where a pixel looks from ----------------------------------------------
@LAYERS.register("ref_half_pixel", "a reference grid shifted by half a pixel: the centre of pixel "
                                   "(row i, col j) is (x = j, y = i), not (j + 0.5, i + 0.5)")
def ref_half_pixel(steps: LayerSteps) -> LayerSteps:
    return replace(steps, centres=lambda H, W, dtype: pixel_centres(H, W, dtype) + 0.5)


@LAYERS.register("ref_swapped", "the reference grid built as (x = row, y = col): position (i, j) "
                                "looks from x = j, y = i (meshgrid with indexing='ij' gives the "
                                "rows first)")
def ref_swapped(steps: LayerSteps) -> LayerSteps:
    return replace(steps, centres=lambda H, W, dtype: pixel_centres(H, W, dtype).flip(-1))


# -- DeformableCrossAttention: the reference point in pixels ------------------------------------
@LAYERS.register("ref_hw", "the reference point scaled by (H, W): x pairs with the width, "
                           "x_pix = x * W - 0.5")
def ref_hw(steps: LayerSteps) -> LayerSteps:
    return replace(steps, reference_pixels=lambda ref, size: ref * size.flip(0) - 0.5)


@LAYERS.register("ref_no_half", "a missing -0.5 on the reference point: x_pix = x * W - 0.5")
def ref_no_half(steps: LayerSteps) -> LayerSteps:
    return replace(steps, reference_pixels=lambda ref, size: ref * size)


# -- MSDACrossAttention: offsets per level, one softmax per head --------------------------------
@LAYERS.register("norm_hw", "offsets divided by (H_l, W_l): spatial_shapes rows are (H, W), so "
                            "dx divides by W_l and dy by H_l")
def norm_hw(steps: LayerSteps) -> LayerSteps:
    return replace(steps, level_sizes=lambda shapes, dtype: shapes.to(dtype))


@LAYERS.register("softmax_per_level", "a softmax per level: the L * K weights of a head share one "
                                      "softmax")
def softmax_per_level(steps: LayerSteps) -> LayerSteps:
    return replace(steps, weights=lambda logits, M, L, K: logits.unflatten(-1, (M, L, K))
                   .softmax(-1))


@LAYERS.register("norm_first_level", "every level's offsets divided by the first level's size: "
                                     "level l uses its own (W_l, H_l)")
def norm_first_level(steps: LayerSteps) -> LayerSteps:
    def first_level(shapes, dtype):
        return level_sizes(shapes, dtype)[:1].expand(shapes.shape[0], 2)

    return replace(steps, level_sizes=first_level)


@LAYERS.register("not_normalized", "offsets added to the normalized reference point without "
                                   "dividing by (W_l, H_l)")
def not_normalized(steps: LayerSteps) -> LayerSteps:
    return replace(steps, level_sizes=lambda shapes, dtype: torch.ones_like(
        level_sizes(shapes, dtype)))


_COMMON = ("offsets_yx", "softmax_heads", "softmax_joint", "no_softmax", "value_split_dm",
           "heads_interleaved")
SELF_MISTAKES = ("ref_half_pixel", "ref_swapped", *_COMMON)
CROSS_MISTAKES = ("ref_hw", "ref_no_half", *_COMMON)
MSDA_LAYER_MISTAKES = ("norm_hw", "softmax_per_level", "norm_first_level", "not_normalized",
                       *_COMMON)


def layer_variants(reference, names, *args) -> dict[str, tuple[torch.Tensor, str]]:
    """``{mistake: (reference(*args, steps=wrong steps), explanation)}`` for ``expect_close``.

    Args:
        reference: a layer of :mod:`msda_labs.truth.layers` (takes ``steps=``).
        names: which mistakes (e.g. :data:`SELF_MISTAKES`).
        args: the reference's arguments.
    """
    return {name: (reference(*args, steps=LAYERS[name].plant(LAYER_SPEC)), LAYERS[name].why)
            for name in names}
