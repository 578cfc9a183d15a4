"""A case built to expose a half-precision accumulator (labs 05 and 06).

Values near 54, one sampling point carrying about 98% of the attention and 63 points about
0.0002 each: added one at a time to an fp16 running sum near 54 (where fp16's spacing is 1/32),
each small term rounds away, while an fp32 accumulator keeps them.
"""

from __future__ import annotations

import torch

from msda_labs.student.cases import Case, MSDAInputs, seeded_generator
from msda_labs.truth.reference import msda_float64

__all__ = ["PEAKED", "ACC_HINT", "FP16_ACC_MESSAGE", "NEAR_FP16_ACC", "peaked_inputs",
           "fp16_running_sum", "accumulator_near"]

PEAKED = Case("peaked_attention", B=1, Q=3, M=1, D=4, shapes=((4, 4), (2, 2)), K=32,
              loc_lo=0.25, loc_hi=0.75, seed=7)
# Printed only with evidence (compare.expect_close's ``near``): the output lies within
# NEAR_FP16_ACC (four fp16 steps near 54) of an fp16 running sum, and nearer to it than to the
# reference. Elsewhere the first wrong element is the whole story.
NEAR_FP16_ACC = 4 / 32
ACC_HINT = ("this is an accumulator held in fp16: your output lies within four fp16 steps of an "
            "fp16 running sum on this case, built to expose one: values near 54, one point "
            "carrying 98% of the weight and 63 points about 0.0002 each; added one by one to an "
            "fp16 running sum near 54 (spacing 1/32), each of those rounds away. Keep acc in fp32")
FP16_ACC_MESSAGE = ("an accumulator held in fp16: 63 small terms were rounded away; accumulate "
                    "in fp32 and cast once, at the store")


def peaked_inputs(case: Case = PEAKED) -> MSDAInputs:
    """Large positive values, locations well inside every level, a sharply peaked softmax; fp16."""
    gen = seeded_generator(case.seed)
    B, Q, M, D, L, K = case.B, case.Q, case.M, case.D, case.L, case.K
    value = 48 + 12 * torch.rand(B, case.S, M, D, generator=gen)
    loc = case.loc_lo + (case.loc_hi - case.loc_lo) * torch.rand(B, Q, M, L, K, 2, generator=gen)
    logits = -8.5 + 0.4 * torch.rand(B, Q, M, L * K, generator=gen)
    logits[..., 0] = 0.0
    attn = logits.softmax(-1).reshape(B, Q, M, L, K)
    shapes = torch.tensor(case.shapes, dtype=torch.int64)
    sizes = shapes[:, 0] * shapes[:, 1]
    starts = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    half = torch.float16
    return MSDAInputs(value.to(half), shapes, starts, loc.to(half), attn.to(half))


def fp16_running_sum(inputs: MSDAInputs) -> torch.Tensor:
    """What a kernel whose accumulator is rounded to fp16 after every point returns (float64)."""
    value, shapes, starts, loc, attn = inputs
    L, K = loc.shape[3], loc.shape[4]
    acc = None
    for lvl in range(L):
        h, w = (int(s) for s in shapes[lvl])
        start = int(starts[lvl])
        level = value[:, start:start + h * w]
        for k in range(K):
            part = msda_float64(level, shapes[lvl:lvl + 1], loc[:, :, :, lvl:lvl + 1, k:k + 1],
                                attn[:, :, :, lvl:lvl + 1, k:k + 1])
            acc = part if acc is None else acc.half().double() + part
    return acc.half().double()


def accumulator_near(inputs: MSDAInputs) -> dict:
    """``expect_close``'s ``near`` for the peaked case: an fp16 running sum, within reach."""
    return {"fp16_acc": (fp16_running_sum(inputs), NEAR_FP16_ACC, ACC_HINT)}
