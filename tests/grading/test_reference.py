"""The ground truth agrees with itself: grid_sample reference, naive loops, float64 forward."""

import pytest
import torch
from naive_reference import msda_naive

from msda_labs.truth.cases import EXACT_KNOTS, STANDARD_CASES, make_inputs
from msda_labs.truth.reference import msda_float64, msda_reference, reference_grads


@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
def test_reference_matches_naive_and_float64(case):
    value, shapes, _, loc, attn = make_inputs(case, torch.float64)
    ref = msda_reference(value, shapes, loc, attn)
    torch.testing.assert_close(msda_naive(value, shapes, loc, attn), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(msda_float64(value, shapes, loc, attn), ref, rtol=1e-12,
                               atol=1e-12)


def test_knots_are_exact_grid_points():
    _, shapes, _, loc, _ = make_inputs(EXACT_KNOTS)
    sizes = torch.tensor([[w, h] for h, w in EXACT_KNOTS.shapes], dtype=torch.float32)
    pix = loc * sizes.view(1, 1, 1, -1, 1, 2) - 0.5
    assert torch.equal(pix * 2, torch.round(pix * 2))
    assert (loc == 0).any() and (loc == 1).any()


def test_inputs_are_seeded_and_the_case_salt_changes_them(monkeypatch):
    monkeypatch.delenv("MSDA_CASE_SALT", raising=False)
    a = make_inputs(STANDARD_CASES[0]).value
    assert torch.equal(a, make_inputs(STANDARD_CASES[0]).value)
    monkeypatch.setenv("MSDA_GRADE_SEED", "17")  # the secret alone changes nothing: the salt does
    assert torch.equal(a, make_inputs(STANDARD_CASES[0]).value)
    monkeypatch.setenv("MSDA_CASE_SALT", str((1 << 63) - 5))  # any int63, without overflow
    assert not torch.equal(a, make_inputs(STANDARD_CASES[0]).value)


def test_reference_grads_match_finite_differences():
    case = STANDARD_CASES[0].with_(B=1, Q=2)
    value, shapes, _, loc, attn = make_inputs(case, torch.float64)
    g = torch.randn(1, 2, case.M * case.D, generator=torch.Generator().manual_seed(7),
                    dtype=torch.float64)
    _, grad_loc, _ = reference_grads(value, shapes, loc, attn, g)
    eps = 1e-6
    bumped = loc.clone()
    bumped[0, 0, 0, 0, 0, 0] += eps
    numeric = ((msda_reference(value, shapes, bumped, attn) - msda_reference(value, shapes, loc,
                                                                             attn)) * g).sum() / eps
    assert abs(float(grad_loc[0, 0, 0, 0, 0, 0]) - float(numeric)) < 1e-3
