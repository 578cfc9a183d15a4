"""The graded cases: the named MSDA cases every lab is graded on, and lab 00's
layer cases (:class:`Layer`, :func:`layer_state`).

How a case's random inputs are drawn (:class:`Case`, :func:`make_inputs`, the salted
:func:`seeded_generator`) and the tolerance table are public and live in
:mod:`msda_labs.student.cases`, so that the process running a submission can draw inputs without
holding anything of the grader's; they are re-exported here for the judge's code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from msda_labs.student.cases import (
    BWD_TOL,
    FWD_TOL,
    Case,
    MSDAInputs,
    case_salt,
    image_and_points,
    make_inputs,
    seeded_generator,
    tolerance,
)

__all__ = [
    "Case",
    "MSDAInputs",
    "make_inputs",
    "STANDARD_CASES",
    "EXACT_KNOTS",
    "DECODER",
    "DEVICE_BOUND",
    "FWD_TOL",
    "BWD_TOL",
    "tolerance",
    "case_salt",
    "seeded_generator",
    "image_and_points",
    "OFFSET_PIXELS",
    "Layer",
    "layer_state",
]

MULTI_LEVEL = Case("multi_level", B=2, Q=5, M=2, D=4, shapes=((5, 7), (3, 4)), K=3)
SINGLE = Case("single_level_point", B=1, Q=7, M=1, D=3, shapes=((4, 6),), K=1)
OUT_OF_BOUNDS = Case("out_of_bounds", B=1, Q=4, M=2, D=5, shapes=((6, 5), (3, 3)), K=2,
                     loc_lo=-0.4, loc_hi=1.4)
EXACT_KNOTS = Case("exact_knots", B=1, Q=6, M=2, D=3, shapes=((4, 8), (2, 4)), K=2, seed=1,
                   knots=True)
# The standard edge cases: multi-level + non-square, single level and point with odd D,
# out-of-bounds with odd D, exact knots (floor at integers, the 0 and 1 borders).
STANDARD_CASES = (MULTI_LEVEL, SINGLE, OUT_OF_BOUNDS, EXACT_KNOTS)

# The decoder preset the text and lab 03 use for sizes (GPU stages run it for real).
DECODER = Case("decoder", B=4, Q=300, M=8, D=32,
               shapes=((100, 167), (50, 84), (25, 42), (13, 21)), K=4)
# The encoder's size (every pixel of the four levels a query, batch 2): where the speed trials of
# a forward kernel run. The judge's clock times what a caller waits, and at the decoder's size a
# fast forward (25-35 us on an H100) is smaller than the noise of the protocol's own overhead
# (190-240 us a call, spread 10-20 us): a chip as fast as the chip read -6.8 us net there.
DEVICE_BOUND = DECODER.with_(id="encoder", B=2, Q=22223)


# Offsets the graded weights predict: about OFFSET_PIXELS * sqrt(2) pixels (standard deviation).
OFFSET_PIXELS = 1.5


@dataclass(frozen=True)
class Layer:
    """One graded layer case: sizes, map (or pyramid) and seed."""

    id: str
    C: int
    M: int
    K: int
    B: int
    Q: int = 0  # cross-attention queries (0: self-attention, every pixel is a query)
    shapes: tuple = ()  # ((H, W),) for the single-scale layers, the pyramid for MSDA
    seed: int = 0

    @property
    def L(self) -> int:
        return len(self.shapes)

    def describe(self) -> str:
        sizes = ",".join(f"{h}x{w}" for h, w in self.shapes)
        where = f"levels {sizes}" if self.L > 1 else f"map {sizes}"
        queries = f" Q={self.Q}" if self.Q else ""
        return (f"case '{self.id}' (B={self.B}{queries} C={self.C} M={self.M} D={self.C // self.M}"
                f" K={self.K}, {where})")


def layer_state(layer: Layer, offset_rows: int, logit_rows: int, zero_predictors=False):
    """Seeded float32 weights for the four projections; the offsets they predict are a few pixels.

    ``zero_predictors`` zeroes offset_proj and weight_proj: every point then sits on its reference
    point and the points of a head weigh the same.
    """
    gen = seeded_generator(layer.seed)
    C, state = layer.C, {}
    for name, rows, scale in (("value_proj", C, 1.0), ("offset_proj", offset_rows, OFFSET_PIXELS),
                              ("weight_proj", logit_rows, 1.0), ("out_proj", C, 1.0)):
        state[f"{name}.weight"] = torch.randn(rows, C, generator=gen) * (scale / math.sqrt(C))
        state[f"{name}.bias"] = torch.randn(rows, generator=gen) * scale
    if zero_predictors:
        for name in ("offset_proj", "weight_proj"):
            state[f"{name}.weight"].zero_()
            state[f"{name}.bias"].zero_()
    return state
