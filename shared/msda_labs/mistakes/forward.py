"""Known forward mistakes: what a wrong-in-a-familiar-way output looks like, for feedback.

Each mistake is a small function registered in :data:`FORWARD`. It receives a :class:`Planted`
(the inputs as the code under test reads them, and the bilinear steps of the spec,
:class:`msda_labs.truth.reference.Sampling`) and returns it with one thing changed; the ground
truth then runs on the result. So the spec holds no mistake, and a mistake is the one line that
makes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from msda_labs.mistakes.registry import Catalogue
from msda_labs.truth.reference import SPEC, Sampling, bilinear_reads, msda_float64

__all__ = ["FORWARD", "FORWARD_MISTAKES", "LAYOUT_MISTAKES", "MISTAKES", "PIXEL_MISTAKES",
           "Planted", "msda_variant", "msda_variants", "pixel_reads", "pixel_variants"]

FORWARD = Catalogue("forward")


@dataclass(frozen=True)
class Planted:
    """What a forward mistake may change.

    Attributes:
        locations: (..., 2) = (x, y): normalized sampling locations, or pixel points.
        sampling: the bilinear steps (the spec unless a mistake replaced one).
        spatial_shapes, level_start_index, attention_weights: the MSDA inputs (None for a
            single-image pixel read; ``level_start_index`` None means "from the shapes").
        finish: what becomes of the right (B, Q, M * D) output on its way out (None: nothing;
            a mistake in where the values are written, not in how they are computed).
    """

    locations: torch.Tensor
    sampling: Sampling = SPEC
    spatial_shapes: torch.Tensor | None = None
    level_start_index: torch.Tensor | None = None
    attention_weights: torch.Tensor | None = None
    finish: Callable[[torch.Tensor], torch.Tensor] | None = None


def _clamp_to_border(col, row, height, width):
    return col.clamp(0, width - 1), row.clamp(0, height - 1), torch.ones_like(col, dtype=torch.bool)


def _flat_bounds(col, row, height, width):
    pos = row * width + col
    return col, row, (pos >= 0) & (pos < height * width)


@FORWARD.register("truncate", "truncation toward zero (int()) instead of floor: negative "
                              "coordinates must round down")
def truncate(planted: Planted) -> Planted:
    return replace(planted, sampling=replace(planted.sampling, cell=torch.trunc))


@FORWARD.register("no_half_pixel", "a missing -0.5: pixel centres sit at integers, so x_pix = "
                                   "x * W - 0.5")
def no_half_pixel(planted: Planted) -> Planted:
    return replace(planted, sampling=replace(planted.sampling, centre=0.0))


@FORWARD.register("swap_xy", "x and y swapped: the last axis of the locations is (x, y) and x "
                             "runs along the width")
def swap_xy(planted: Planted) -> Planted:
    return replace(planted, locations=planted.locations.flip(-1))


@FORWARD.register("swap_hw", "H and W swapped: spatial_shapes rows are (H, W), height first")
def swap_hw(planted: Planted) -> Planted:
    return replace(planted, spatial_shapes=planted.spatial_shapes.flip(-1))


@FORWARD.register("scale_swapped", "x scaled by H and y by W: x_pix = x * W - 0.5 and y_pix = "
                                   "y * H - 0.5, x runs along the width")
def scale_swapped(planted: Planted) -> Planted:
    height, width = planted.spatial_shapes.to(planted.locations.dtype).unbind(-1)  # [L] each
    factor = torch.stack((height / width, width / height), dim=-1)  # [L, 2]
    return replace(planted, locations=planted.locations * factor[:, None, :])


def _crossed_weights(fx, fy):
    top_left, top_right, bottom_left, bottom_right = SPEC.weights(fx, fy)
    return top_left, bottom_left, top_right, bottom_right


@FORWARD.register("weights_crossed", "the weights of two corners exchanged: corner (x0 + 1, y0) "
                                     "weighs fx * (1 - fy) and corner (x0, y0 + 1) weighs "
                                     "(1 - fx) * fy, the weight of x's neighbour grows with fx")
def weights_crossed(planted: Planted) -> Planted:
    return replace(planted, sampling=replace(planted.sampling, weights=_crossed_weights))


@FORWARD.register("clamp", "clamping to the border instead of zero padding: a corner outside the "
                           "image adds 0")
def clamp(planted: Planted) -> Planted:
    return replace(planted, sampling=replace(planted.sampling, corner=_clamp_to_border))


@FORWARD.register("flat_bounds", "a bounds test on the flat index instead of per axis: a column "
                                 "outside the image aliases into the next row")
def flat_bounds(planted: Planted) -> Planted:
    return replace(planted, sampling=replace(planted.sampling, corner=_flat_bounds))


@FORWARD.register("level_zero_start", "every level read from the start of value instead of from "
                                      "its level_start_index")
def level_zero_start(planted: Planted) -> Planted:
    levels = planted.spatial_shapes.shape[0]
    return replace(planted, level_start_index=torch.zeros(levels, dtype=torch.int64))


@FORWARD.register("unweighted", "the attention weights left out")
def unweighted(planted: Planted) -> Planted:
    return replace(planted, attention_weights=torch.ones_like(planted.attention_weights))


@FORWARD.register("heads_interleaved", "heads interleaved in the output channels: head m's "
                                       "channel d belongs at m * D + d (each head's D channels "
                                       "side by side), not at d * M + m")
def heads_interleaved(planted: Planted) -> Planted:
    B, Q, M = planted.attention_weights.shape[:3]

    def interleave(out: torch.Tensor) -> torch.Tensor:
        return out.view(B, Q, M, -1).transpose(2, 3).reshape(B, Q, -1)

    return replace(planted, finish=interleave)


# A known mistake -> 'what: why'. Tests pick the ones that apply to what they check.
MISTAKES: dict[str, str] = FORWARD.explanations()
FORWARD_MISTAKES = ("truncate", "no_half_pixel", "swap_xy", "swap_hw", "scale_swapped", "clamp",
                    "flat_bounds", "level_zero_start")
PIXEL_MISTAKES = ("truncate", "swap_xy", "clamp", "flat_bounds", "weights_crossed")
# Where the output's values are written: for a test of a function that lays out the output
# itself (lab 01's msda_naive_student).
LAYOUT_MISTAKES = ("heads_interleaved",)


def msda_variant(value, spatial_shapes, sampling_locations, attention_weights, mistake=None):
    """MSDA forward with one known mistake planted (None: the correct result).

    Returns:
        (B, Q, M * D) float64 on the CPU.
    """
    planted = Planted(sampling_locations.detach().to("cpu", torch.float64),
                      spatial_shapes=torch.as_tensor(spatial_shapes).to("cpu", torch.int64),
                      attention_weights=attention_weights)
    if mistake is not None:
        planted = FORWARD[mistake].plant(planted)
    out = msda_float64(value, planted.spatial_shapes, planted.locations,
                       planted.attention_weights, planted.level_start_index, planted.sampling)
    return out if planted.finish is None else planted.finish(out)


def msda_variants(inputs, mistakes=FORWARD_MISTAKES) -> dict[str, tuple[torch.Tensor, str]]:
    """``{mistake: (forward output with that mistake, explanation)}`` for ``expect_close``."""
    value, shapes, _starts, loc, attn = inputs
    return {name: (msda_variant(value, shapes, loc, attn, mistake=name), MISTAKES[name])
            for name in mistakes}


def pixel_reads(img, points, mistake=None) -> torch.Tensor:
    """(N, D) float64 bilinear reads of ``img`` (H, W, D) at pixel ``points`` (N, 2) = (x, y).

    ``mistake``: one of :data:`PIXEL_MISTAKES` (the others need the MSDA inputs), or None.
    """
    planted = Planted(points.detach().to("cpu", torch.float64))
    if mistake is not None:
        if mistake not in PIXEL_MISTAKES:
            raise ValueError(f"{mistake!r} cannot show in a single pixel read; those that can: "
                             f"{list(PIXEL_MISTAKES)}")
        planted = FORWARD[mistake].plant(planted)
    return bilinear_reads(img, planted.locations, planted.sampling)


def pixel_variants(img, points, mistakes=PIXEL_MISTAKES) -> dict[str, tuple[torch.Tensor, str]]:
    """``{mistake: (pixel reads with that mistake, explanation)}`` for ``expect_close``."""
    return {name: (pixel_reads(img, points, name), MISTAKES[name]) for name in mistakes}
