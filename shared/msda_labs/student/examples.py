"""Example inputs for running a lab module by hand (``python labNN.py``).

:func:`draw_inputs` is the one random draw of MSDA inputs in the kit: the grader's cases
(``msda_labs.student.cases``) draw through it too, with their own shapes and seeds. It holds no
answers, so a lab module may use it; the graded cases themselves stay with the grader.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["MSDAInputs", "draw_inputs", "draw_peaked", "example_inputs"]


class MSDAInputs(NamedTuple):
    value: torch.Tensor
    spatial_shapes: torch.Tensor
    level_start_index: torch.Tensor
    sampling_locations: torch.Tensor
    attention_weights: torch.Tensor


def draw_inputs(gen: torch.Generator, *, B: int, Q: int, M: int, D: int, K: int,
                shapes: tuple[tuple[int, int], ...], loc_lo: float = 0.0,
                loc_hi: float = 1.0) -> MSDAInputs:
    """Random fp32 CPU inputs from ``gen``: value ~ N(0,1), locations ~ U[loc_lo, loc_hi), and
    weights softmaxed jointly over the L*K points of each (query, head)."""
    L = len(shapes)
    S = sum(h * w for h, w in shapes)
    value = torch.randn(B, S, M, D, generator=gen)
    loc = loc_lo + (loc_hi - loc_lo) * torch.rand(B, Q, M, L, K, 2, generator=gen)
    attn = torch.rand(B, Q, M, L * K, generator=gen).softmax(-1).reshape(B, Q, M, L, K)
    spatial_shapes = torch.tensor(shapes, dtype=torch.int64)
    sizes = spatial_shapes[:, 0] * spatial_shapes[:, 1]
    starts = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    return MSDAInputs(value, spatial_shapes, starts, loc, attn)


def draw_peaked(gen: torch.Generator, *, B: int, Q: int, M: int, D: int, K: int,
                shapes: tuple[tuple[int, int], ...], loc_lo: float = 0.25,
                loc_hi: float = 0.75) -> MSDAInputs:
    """fp16 inputs that expose an accumulator held in fp16: values near 54 (where fp16's spacing
    is 1/32), locations well inside every level, and a sharply peaked softmax (one point of each
    (query, head) carries about 98% of the weight, the other L*K - 1 about 0.0002 each: added one
    at a time to an fp16 running sum near 54, each of those rounds away)."""
    L = len(shapes)
    S = sum(h * w for h, w in shapes)
    value = 48 + 12 * torch.rand(B, S, M, D, generator=gen)
    loc = loc_lo + (loc_hi - loc_lo) * torch.rand(B, Q, M, L, K, 2, generator=gen)
    logits = -8.5 + 0.4 * torch.rand(B, Q, M, L * K, generator=gen)
    logits[..., 0] = 0.0
    attn = logits.softmax(-1).reshape(B, Q, M, L, K)
    spatial_shapes = torch.tensor(shapes, dtype=torch.int64)
    sizes = spatial_shapes[:, 0] * spatial_shapes[:, 1]
    starts = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    half = torch.float16
    return MSDAInputs(value.to(half), spatial_shapes, starts, loc.to(half), attn.to(half))


def example_inputs(dtype: torch.dtype = torch.float32, device="cpu", seed: int = 0) -> MSDAInputs:
    """Small seeded inputs with two levels (5x7 and 3x4; B=2, Q=5, M=2, D=4, K=3), cast to
    ``dtype`` and placed on ``device``."""
    gen = torch.Generator().manual_seed(seed)
    value, shapes, starts, loc, attn = draw_inputs(gen, B=2, Q=5, M=2, D=4, K=3,
                                                   shapes=((5, 7), (3, 4)))
    return MSDAInputs(value.to(dtype=dtype, device=device), shapes.to(device),
                      starts.to(device), loc.to(dtype=dtype, device=device),
                      attn.to(dtype=dtype, device=device))
