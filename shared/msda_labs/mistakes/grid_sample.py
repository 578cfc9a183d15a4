"""Known mistakes of building MSDA on ``F.grid_sample`` (lab 00): a wrong grid, a wrong mode, a
weight used twice or not at all.

Three catalogues, one per function a student writes:

* :data:`GRID`: ``bilinear_sample`` reading at other points than asked (each mistake maps the
  asked pixel points to the ones a wrong grid reads);
* :data:`ATTEND`: ``deform_attend`` combining its samples wrongly;
* :data:`MSDA_CALL`: ``msda`` handing grid_sample a wrong grid or reweighting.
"""

from __future__ import annotations

import torch

from msda_labs.mistakes.forward import FORWARD_MISTAKES, msda_variants, pixel_reads, pixel_variants
from msda_labs.mistakes.registry import Catalogue
from msda_labs.truth.reference import msda_reference

__all__ = ["ATTEND", "GRID", "MSDA_CALL", "attend_variants", "bilinear_sample_variants",
           "msda_call_variants"]

GRID = Catalogue("grid")
ATTEND = Catalogue("deform_attend")
MSDA_CALL = Catalogue("msda call")


@GRID.register("no_half_pixel", "a grid without the +0.5: g = 2 * (p + 0.5) / size - 1, since "
                                "pixel centres sit half a pixel inside the image edges")
def grid_without_half_pixel(p, size):
    return p - 0.5


@GRID.register("size_hw", "x normalized by H and y by W: x pairs with the width W, y with the "
                          "height H")
def grid_sized_hw(p, size):
    return (p + 0.5) * size / size.flip(0) - 0.5


@GRID.register("align_corners", "align_corners=True with the grid of align_corners=False: keep "
                                "align_corners=False")
def grid_align_corners(p, size):
    return (p + 0.5) * (size - 1) / size


@GRID.register("rows_first", "a grid built (row, col), y first: grid_sample reads the grid's "
                             "last axis as (x, y), x along the width, so stack (gx, gy)")
def grid_rows_first(p, size):
    # The normalized y lands where grid_sample reads x (scaled by W), the normalized x where it
    # reads y (scaled by H).
    return (p.flip(-1) + 0.5) * size / size.flip(0) - 0.5


@GRID.register("nearest", "mode='nearest': a bilinear read blends the four surrounding pixels")
def grid_nearest(p, size):
    return p.round()


def bilinear_sample_variants(img, points) -> dict[str, tuple[torch.Tensor, str]]:
    """Outputs of familiar bilinear_sample mistakes (each one is a read at other points)."""
    H, W, _ = img.shape
    size = torch.tensor([W, H], dtype=torch.float64)
    p = points.double()
    found = pixel_variants(img, points)
    for name in GRID:
        found[name] = (pixel_reads(img, GRID[name].plant(p, size)), GRID[name].why)
    return found


@ATTEND.register("unweighted", "the attention weights left out")
def attend_unweighted(value, points, weights, samples):
    return samples.sum(1)


@ATTEND.register("softmax_again", "a softmax inside deform_attend: the weights arrive ready to use")
def attend_softmax_again(value, points, weights, samples):
    return (weights.softmax(-1).unsqueeze(-1) * samples).sum(1)


@ATTEND.register("mean", "a plain mean over the K points instead of the weighted sum")
def attend_mean(value, points, weights, samples):
    return samples.mean(1)


@ATTEND.register("swap_xy", "x and y swapped: the last axis of points is (x, y), x along the "
                            "width")
def attend_swap_xy(value, points, weights, samples):
    Q, K, _ = points.shape
    swapped = pixel_reads(value, points.reshape(Q * K, 2).flip(-1)).reshape(Q, K, -1)
    return (weights.unsqueeze(-1) * swapped).sum(1)


def attend_variants(value, points, weights, samples) -> dict[str, tuple[torch.Tensor, str]]:
    """deform_attend mistakes; ``samples`` (Q, K, D) are the correct reads at ``points``."""
    return {name: (ATTEND[name].plant(value, points, weights, samples), ATTEND[name].why)
            for name in ATTEND}


@MSDA_CALL.register("grid_is_loc", "the normalized locations handed to grid_sample as they are: "
                                   "its grid is 2 * loc - 1, in [-1, 1]")
def msda_grid_is_loc(value, shapes, loc, attn):
    return msda_reference(value, shapes, (loc + 1) / 2, attn)


@MSDA_CALL.register("softmax_again", "the attention weights softmaxed again inside msda: they "
                                     "arrive ready to use")
def msda_softmax_again(value, shapes, loc, attn):
    B, Q, M, L, K = attn.shape
    again = attn.reshape(B, Q, M, L * K).softmax(-1).reshape(B, Q, M, L, K)
    return msda_reference(value, shapes, loc, again)


def msda_call_variants(inputs) -> dict[str, tuple[torch.Tensor, str]]:
    """msda mistakes: every forward mistake (and the weights left out), then the grid_sample
    call's own, each computed in float64."""
    value, shapes, _starts, loc, attn = inputs
    found = msda_variants(inputs, FORWARD_MISTAKES + ("unweighted",))
    v, lc, a = value.double(), loc.double(), attn.double()
    for name in MSDA_CALL:
        found[name] = (MSDA_CALL[name].plant(v, shapes, lc, a), MSDA_CALL[name].why)
    return found
