"""Grading tests of lab 07 (the other direction). Run them with `nox -s lab07`.

Every gradient is compared with fp32 autograd of the grid_sample reference on the same seeded
inputs and a seeded upstream gradient, at the backward tolerance of fp32. The probes
(probes_lab07.py) call the student's functions in the isolated child; this file judges.
"""

import probes_lab07 as probes
import pytest
import torch

from msda_labs.grading import expect_close
from msda_labs.grading.judge.rules import watch_untouched
from msda_labs.mistakes import grad_variants, lost_update_grad_value
from msda_labs.truth.cases import STANDARD_CASES, Case, make_inputs, seeded_generator
from msda_labs.truth.reference import reference_grads

TASKS = {
    "7.1": "grad_attention_weights",
    "7.2": "grad_sampling_locations",
    "7.3": "scatter_grad_value",
}

# Beyond the standard cases: a quarter of the locations so far out that all four corners are
# outside, where every gradient must be exactly zero.
FAR_OUT = Case(
    "far_out_of_bounds", B=2, Q=6, M=2, D=4, shapes=((5, 7),), K=2, loc_lo=-0.5, loc_hi=1.5, seed=3
)
CASES = (*STANDARD_CASES, FAR_OUT)
FUNCTION = {
    "grad_attn": "grad_attention_weights",
    "grad_loc": "grad_sampling_locations",
    "grad_value": "scatter_grad_value",
}
WHICH = {"grad_value": 0, "grad_loc": 1, "grad_attn": 2}


def upstream(case: Case) -> torch.Tensor:
    """The seeded upstream gradient dLoss/d(output), (B, Q, M * D) fp32."""
    gen = seeded_generator(case.seed + 7)
    return torch.randn(case.B, case.Q, case.M * case.D, generator=gen)


def _as_grad_value(res, shape):
    """Rows (B*S*M, D) back to (B, S, M, D) for readable feedback."""
    if isinstance(res, torch.Tensor) and res.dim() == 2 and res.numel() == shape.numel():
        return res.view(shape)
    return res


# Differentiating by machine would skip the derivation this lab is about.
BANNED = ("backward", "grad", "vjp", "jacobian", "requires_grad_", "grid_sample", "grid_sampler")


def _check_rules(submission, which):
    name = FUNCTION[which]
    for banned in BANNED:
        if submission.source.calls(name, banned, graded_apart=TASKS.values()):
            raise AssertionError(
                f"rule: {name} must compute its gradient from the formulas you derived; it calls "
                f"{banned}(), which lets autograd (or the reference) do it"
            )


def _reference(inputs, grad_out, which) -> torch.Tensor:
    """fp32 autograd of the grid_sample reference: the gradient ``which``."""
    value, shapes, _starts, loc, attn = inputs
    return reference_grads(value, shapes, loc, attn, grad_out)[WHICH[which]]


def _expect_gradient(res, ref, which, case_text, variants=None):
    if which == "grad_value":
        res = _as_grad_value(res, ref.shape)
    expect_close(res, ref, what=f"{FUNCTION[which]} ({which})", case=case_text,
                 dtype=torch.float32, backward=True, expect_dtype=torch.float32,
                 variants=variants)


def _check(submission, which, case):
    _check_rules(submission, which)
    inputs, grad_out = make_inputs(case), upstream(case)
    res = submission.run(probes.one_gradient, which, *inputs, grad_out)
    _expect_gradient(res, _reference(inputs, grad_out, which), which, case.describe(),
                     grad_variants(inputs, grad_out, which))


SMALL = Case("small", B=1, Q=2, M=1, D=2, shapes=((3, 4), (2, 2)), K=2)
BIG = Case("big", B=3, Q=24, M=4, D=5, shapes=((3, 4), (2, 2)), K=2, seed=2)


def _check_vectorized(submission, which):
    _check_rules(submission, which)
    small = (make_inputs(SMALL), upstream(SMALL))
    big = (make_inputs(BIG), upstream(BIG))
    (n_small, n_big), res, (lines_small, lines_big) = submission.run(probes.torch_calls, which,
                                                                      small, big)
    _expect_gradient(res, _reference(*big, which), which, BIG.describe())
    if int(n_big) > int(n_small):
        raise AssertionError(
            f"rule: {FUNCTION[which]} makes {n_small} torch calls for B=1 Q=2 M=1 D=2 but "
            f"{n_big} for B=3 Q=24 M=4 D=5 (same levels and points): it loops over batch, "
            f"queries, heads or channels in Python. Work on whole tensors (loops over levels, "
            f"points or the four corners are fine)"
        )
    # A loop over numbers read out of the tensors (.tolist()) makes no torch call per step, but
    # runs lines of your module per step.
    if int(lines_big) > int(lines_small) + 2:
        raise AssertionError(
            f"rule: {FUNCTION[which]} runs {lines_small} lines of your module for B=1 Q=2 M=1 "
            f"D=2 but {lines_big} for B=3 Q=24 M=4 D=5 (same levels and points): it loops over "
            f"batch, queries, heads or channels in Python, on tensors or on numbers read out of "
            f"them. Work on whole tensors (loops over levels, points or the four corners are "
            f"fine)"
        )
    # The count is made in your process, where a module could hide its calls from it: it earns
    # the point only where the judge reads in your source that nothing can.
    watch_untouched(submission.source, f"the count of torch calls of {FUNCTION[which]}")


# -- Task 7.1 ----------------------------------------------------------------------------------
@pytest.mark.task("7.1", points=1)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_grad_attention_weights(submission, case):
    _check(submission, "grad_attn", case)


@pytest.mark.task("7.1", points=1)
def test_grad_attention_weights_is_vectorized(submission):
    _check_vectorized(submission, "grad_attn")


# -- Task 7.2 ----------------------------------------------------------------------------------
@pytest.mark.task("7.2", points=2)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@pytest.mark.rule("xy-order")
def test_grad_sampling_locations(submission, case):
    _check(submission, "grad_loc", case)


@pytest.mark.task("7.2", points=1)
def test_grad_sampling_locations_is_vectorized(submission):
    _check_vectorized(submission, "grad_loc")


# -- Task 7.3 ----------------------------------------------------------------------------------
@pytest.mark.task("7.3", points=2)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@pytest.mark.rule("mask-corners", "zero-padding")
def test_scatter_grad_value(submission, case):
    _check(submission, "grad_value", case)


SHARED = Case("shared_pixels", B=1, Q=8, M=1, D=3, shapes=((4, 5),), K=1, seed=5)


@pytest.mark.task("7.3", points=2)
@pytest.mark.rule("atomics")
def test_scatter_grad_value_shared_pixels(submission):
    # Eight queries sample the very same point with the same weight and the same upstream
    # gradient: each of its four pixels must receive eight equal shares.
    case = SHARED
    value, shapes, starts, _, _ = make_inputs(case)
    loc = torch.tensor([0.43, 0.61]).expand(1, 8, 1, 1, 1, 2).contiguous()
    attn = torch.full((1, 8, 1, 1, 1), 0.75)
    grad_out = upstream(case)[:, :1].expand(1, 8, 3).contiguous()
    inputs = type(make_inputs(case))(value, shapes, starts, loc, attn)
    ref = reference_grads(value, shapes, loc, attn, grad_out)[0]
    writes = (ref != 0).long() * case.Q
    variants = {"lost_updates": lost_update_grad_value(ref, writes, (writes > 0).long())}
    variants.update(grad_variants(inputs, grad_out, "grad_value"))
    what = (
        f"{case.describe()}, all 8 queries at the same point (x, y) = (0.43, 0.61) with the "
        f"same weight and upstream gradient"
    )
    _check_rules(submission, "grad_value")
    res = submission.run(probes.one_gradient, "grad_value", *inputs, grad_out)
    _expect_gradient(res, ref, "grad_value", what, variants)


@pytest.mark.task("7.3", points=1)
def test_scatter_grad_value_is_vectorized(submission):
    _check_vectorized(submission, "grad_value")
