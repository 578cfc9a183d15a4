"""Drawing the random inputs of a case: public code, salted by the grader.

Every random draw of the kit's graded cases goes through one CPU generator from
:func:`seeded_generator`, seeded from the case's seed mixed with a salt read from
``$MSDA_CASE_SALT`` (an integer, 0 when unset: the public cases). Tensors are drawn in fp32 on
the CPU and only then cast and moved, so a case is the same on every machine.

The drawing holds no answers, so it lives on the student's side: the process that runs a
submission may draw its own inputs from here. Only the salt is secret: for a graded run the
grader derives it from the instructor's seed and the submission's bytes, so inputs printed by one
submission say nothing about another's. Which cases are graded (the named catalogue) stays with
the grader (``msda_labs.truth.cases``); the tolerance table is here because it is public too.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace

import torch

from msda_labs.student.examples import MSDAInputs, draw_inputs

__all__ = ["Case", "MSDAInputs", "make_inputs", "case_salt", "seeded_generator",
           "image_and_points", "FWD_TOL", "BWD_TOL", "tolerance", "SALT_ENV",
           "salted"]

SALT_ENV = "MSDA_CASE_SALT"
_SEED_RANGE = 1 << 63

# rtol, atol per dtype. The kernels accumulate in fp32, so half-precision forward error is the
# rounding of inputs and output; gradients are looser (atomic order, the W/H chain factor).
FWD_TOL = {
    torch.float64: (1e-9, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (3e-2, 3e-2),
}
BWD_TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (3e-2, 3e-2),
    torch.bfloat16: (8e-2, 8e-2),
}


def tolerance(dtype: torch.dtype, backward: bool = False) -> tuple[float, float]:
    """(rtol, atol) for comparing a result of this dtype with the fp32/fp64 reference."""
    table = BWD_TOL if backward else FWD_TOL
    if dtype not in table:
        raise ValueError(f"no tolerance for dtype {dtype}; expected one of {list(table)}")
    return table[dtype]


_SALT: list[int] = []  # the judge's salt while it grades (see salted); the child reads its env


@contextlib.contextmanager
def salted(salt: int):
    """Draw every case with ``salt`` inside the block: how the judge grades one job. A child
    process gets its salt from the grader as ``$MSDA_CASE_SALT`` instead."""
    if not isinstance(salt, int) or salt < 0:
        raise ValueError(f"a case salt is a non-negative integer, got {salt!r}")
    _SALT.append(salt)
    try:
        yield salt
    finally:
        _SALT.pop()


def case_salt() -> int:
    """The salt of this grading run: the judge's (:func:`salted`), else ``$MSDA_CASE_SALT``
    (0 when unset or empty)."""
    if _SALT:
        return _SALT[-1]
    raw = (os.environ.get(SALT_ENV) or "0").strip()
    try:
        salt = int(raw)
    except ValueError:
        raise ValueError(f"{SALT_ENV} must be a non-negative integer, got {raw!r}") from None
    if salt < 0:
        raise ValueError(f"{SALT_ENV} must be a non-negative integer, got {salt}")
    return salt


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU generator for ``seed`` mixed with the run's salt (``seed`` itself when the salt is 0,
    so the public cases never change)."""
    gen = torch.Generator()
    gen.manual_seed((seed + 1_000_003 * case_salt()) % _SEED_RANGE)
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
