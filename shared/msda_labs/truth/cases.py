"""Seeded MSDA inputs, the standard edge cases every lab is graded on, and the tolerance table.

Every random draw goes through one CPU generator seeded from the case (plus, when an instructor
regrades with ``--seed``, a secret offset read from ``MSDA_GRADE_SEED``), so a case is the same on
every machine; tensors are drawn in fp32 and only then cast and moved.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch

from msda_labs.student.examples import MSDAInputs, draw_inputs
from msda_labs.student.tolerances import BWD_TOL, FWD_TOL, tolerance  # one table, student-side

__all__ = [
    "Case",
    "MSDAInputs",
    "make_inputs",
    "STANDARD_CASES",
    "EXACT_KNOTS",
    "DECODER",
    "FWD_TOL",
    "BWD_TOL",
    "tolerance",
    "grade_seed",
    "seeded_generator",
    "image_and_points",
]

def grade_seed() -> int:
    """The secret seed offset of an instructor regrade (0 when grading normally)."""
    raw = os.environ.get("MSDA_GRADE_SEED", "0") or "0"
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"MSDA_GRADE_SEED must be an integer, got {raw!r}") from None


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU generator for ``seed`` mixed with the regrade seed."""
    gen = torch.Generator()
    gen.manual_seed(seed + 1_000_003 * grade_seed())
    return gen


def image_and_points(gen: torch.Generator, shape: tuple[int, int, int], n_points: int,
                     span: tuple[float, float], low: float,
                     dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """A random (H, W, C) image and ``n_points`` pixel-space points (x, y) for a bilinear sampler:
    x drawn uniformly from [low, low + span[0]), y from [low, low + span[1])."""
    image = torch.randn(*shape, generator=gen, dtype=dtype)
    points = torch.rand(n_points, 2, generator=gen, dtype=dtype) * torch.tensor(span) + low
    return image, points


@dataclass(frozen=True)
class Case:
    """One MSDA problem size plus how its locations are drawn."""

    id: str
    B: int
    Q: int
    M: int
    D: int
    shapes: tuple[tuple[int, int], ...]
    K: int
    loc_lo: float = 0.0
    loc_hi: float = 1.0
    seed: int = 0
    knots: bool = False  # every location on an exact pixel centre or pixel edge

    @property
    def L(self) -> int:
        return len(self.shapes)

    @property
    def S(self) -> int:
        return sum(h * w for h, w in self.shapes)

    def with_(self, **changes) -> Case:
        return replace(self, **changes)

    def describe(self) -> str:
        levels = ",".join(f"{h}x{w}" for h, w in self.shapes)
        if self.knots:
            where = "locations on exact pixel knots"
        elif self.loc_lo < 0 or self.loc_hi > 1:
            where = f"locations in [{self.loc_lo:g}, {self.loc_hi:g}) (out of bounds)"
        else:
            where = f"locations in [{self.loc_lo:g}, {self.loc_hi:g})"
        return (f"case '{self.id}' (B={self.B} Q={self.Q} M={self.M} D={self.D} K={self.K} "
                f"levels {levels}, {where})")


def make_inputs(case: Case, dtype: torch.dtype = torch.float32, device="cpu") -> MSDAInputs:
    """Seeded inputs for ``case``: value ~ N(0,1), locations ~ U[lo, hi), weights softmaxed jointly
    over L*K. Drawn in fp32 on the CPU, then cast to ``dtype`` and moved to ``device``."""
    gen = seeded_generator(case.seed)
    value, spatial_shapes, starts, loc, attn = draw_inputs(
        gen, B=case.B, Q=case.Q, M=case.M, D=case.D, K=case.K, shapes=case.shapes,
        loc_lo=case.loc_lo, loc_hi=case.loc_hi)
    B, Q, M, L, K = case.B, case.Q, case.M, case.L, case.K
    if case.knots:
        # x * W - 0.5 lands on an integer (a pixel centre) or a half-integer (a pixel edge); the
        # image borders 0 and 1 are among the choices. Levels use power-of-two sizes so that the
        # normalized knot is exact in binary floating point.
        sizes = torch.tensor([[w, h] for h, w in case.shapes], dtype=torch.float32)
        steps = (2 * sizes).view(1, 1, 1, L, 1, 2)
        pick = torch.randint(0, 1 << 30, (B, Q, M, L, K, 2), generator=gen)
        loc = (pick % (steps.long() + 1)).float() / steps
    return MSDAInputs(
        value.to(dtype=dtype, device=device),
        spatial_shapes.to(device),
        starts.to(device),
        loc.to(dtype=dtype, device=device),
        attn.to(dtype=dtype, device=device),
    )


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
