"""The mistake catalogues: every mistake is registered once, changes what it says it changes and
nothing else, and the correct engines agree with the ground truth."""

import pytest
import torch
from naive_reference import bilinear_pixel

from msda_labs.mistakes import (
    FORWARD,
    GRAD,
    MISTAKES,
    PIXEL_MISTAKES,
    msda_backward_variant,
    msda_variant,
    pixel_reads,
)
from msda_labs.mistakes.gradients import GRAD_OUTPUTS
from msda_labs.mistakes.registry import Catalogue
from msda_labs.truth.cases import STANDARD_CASES, make_inputs
from msda_labs.truth.reference import msda_reference, reference_grads

CASE = STANDARD_CASES[2]


def _grad_case():
    inputs = make_inputs(CASE, torch.float64)
    value, _, _, loc, _ = inputs
    g = torch.randn(loc.shape[0], loc.shape[1], value.shape[2] * value.shape[3],
                    generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    return inputs, g


def test_catalogue_refuses_unknown_and_duplicate_names():
    cat = Catalogue("toy")
    cat.register("a", "why a")(lambda x: x)
    with pytest.raises(ValueError, match="registered twice"):
        cat.register("a", "again")
    with pytest.raises(ValueError, match=r"unknown toy mistake 'b'; known: \['a'\]"):
        cat["b"]
    with pytest.raises(ValueError, match="unknown forward mistake"):
        msda_variant(*[make_inputs(CASE)[i] for i in (0, 1, 3, 4)], mistake="nope")


@pytest.mark.parametrize("name", list(FORWARD))
def test_each_forward_mistake_changes_the_output(name):
    value, shapes, _, loc, attn = make_inputs(CASE, torch.float64)
    right = msda_reference(value, shapes, loc, attn)
    torch.testing.assert_close(msda_variant(value, shapes, loc, attn), right, rtol=1e-12,
                               atol=1e-12)
    wrong = msda_variant(value, shapes, loc, attn, mistake=name)
    assert not torch.allclose(wrong, right, rtol=1e-6, atol=1e-6), name
    assert MISTAKES[name] == FORWARD[name].why


def test_pixel_reads_match_the_scalar_spec_and_refuse_msda_only_mistakes():
    img = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    points = torch.tensor([[0.25, 0.5], [-0.5, 1.0], [3.5, 2.25], [1.0, -1.0]], dtype=torch.float64)
    want = torch.stack([bilinear_pixel(img, float(x), float(y)) for x, y in points.tolist()])
    torch.testing.assert_close(pixel_reads(img, points), want, rtol=1e-12, atol=1e-12)
    for name in PIXEL_MISTAKES:
        assert not torch.allclose(pixel_reads(img, points, name), want), name
    with pytest.raises(ValueError, match="cannot show in a single pixel read"):
        pixel_reads(img, points, "unweighted")


def test_float64_backward_matches_autograd_of_the_reference():
    inputs, g = _grad_case()
    value, shapes, _, loc, attn = inputs
    refs = reference_grads(value, shapes, loc, attn, g)
    for res, ref in zip(msda_backward_variant(inputs, g), refs):
        torch.testing.assert_close(res, ref.double(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(GRAD))
def test_each_backward_mistake_shows_exactly_where_it_says(name):
    inputs, g = _grad_case()
    right = msda_backward_variant(inputs, g)
    wrong = msda_backward_variant(inputs, g, name)
    for output, res, ref in zip(GRAD_OUTPUTS, wrong, right):
        changed = not torch.allclose(res, ref, rtol=1e-9, atol=1e-9)
        assert changed == (output in GRAD[name].why), (name, output)


def test_every_name_the_package_lists_loads():
    import msda_labs.mistakes as package

    assert sorted(package.__all__) == sorted(n for names in package._HOMES.values() for n in names)
    for name in package.__all__:
        assert getattr(package, name) is not None
