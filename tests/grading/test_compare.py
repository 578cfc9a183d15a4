import pytest
import torch

from msda_labs.grading import expect_close, expect_equal
from msda_labs.mistakes import MISTAKES, msda_variant, msda_variants
from msda_labs.truth.cases import STANDARD_CASES, make_inputs
from msda_labs.truth.reference import msda_reference


def test_close_passes_within_tolerance():
    ref = torch.linspace(-1, 1, 10, dtype=torch.float64)
    expect_close(ref + 1e-7, ref, what="x", dtype=torch.float32)


def test_failure_names_count_index_and_values():
    ref = torch.zeros(2, 3, dtype=torch.float64)
    res = ref.clone()
    res[1, 2] = 0.5
    with pytest.raises(AssertionError, match=r"1 of 6 elements differ.*first at \[1, 2\]: "
                                             r"yours 0.5, reference 0"):
        expect_close(res, ref, what="x", case="tiny", dtype=torch.float32)


def test_non_tensor_and_shape_fail_clearly():
    ref = torch.zeros(3)
    with pytest.raises(AssertionError, match="expected a torch.Tensor, got NoneType"):
        expect_close(None, ref, what="f")
    with pytest.raises(AssertionError, match=r"shape \(4,\), expected \(3,\)"):
        expect_close(torch.zeros(4), ref, what="f")
    with pytest.raises(AssertionError, match="an object of type numpy.ndarray"):
        expect_close({"__unsupported__": "numpy.ndarray"}, ref, what="f")


def test_nan_is_reported_and_never_close():
    ref = torch.zeros(4)
    res = torch.tensor([0.0, float("nan"), 0.0, 0.0])
    with pytest.raises(AssertionError, match="1 NaN"):
        expect_close(res, ref, what="f", dtype=torch.float32)


@pytest.mark.parametrize("mistake", ["truncate", "no_half_pixel", "swap_xy", "swap_hw", "clamp"])
def test_known_mistake_is_named(mistake):
    inputs = make_inputs(STANDARD_CASES[2], torch.float64)
    value, shapes, _, loc, attn = inputs
    wrong = msda_variant(value, shapes, loc, attn, mistake=mistake)
    with pytest.raises(AssertionError, match="this is exactly the output of") as info:
        expect_close(wrong, msda_reference(value, shapes, loc, attn), what="msda",
                     dtype=torch.float64, variants=msda_variants(inputs))
    assert MISTAKES[mistake] in str(info.value)


def test_expect_equal_is_strict_about_bools():
    expect_equal(True, True, what="b")
    with pytest.raises(AssertionError, match="expected the bool True"):
        expect_equal(1, True, what="b")
    with pytest.raises(AssertionError, match="got 239.0"):
        expect_equal(239.0, 239, what="n")


def test_no_explanation_without_evidence():
    ref = torch.zeros(4, dtype=torch.float64)
    res = torch.tensor([1.0, 0.0, 0.0, 0.0])
    same = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    other = torch.tensor([2.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    # one mistake fits: named; two different mistakes fit this case alike: neither is named
    with pytest.raises(AssertionError, match="this is exactly the output of slip A$"):
        expect_close(res, ref, what="f", variants={"a": (same, "slip A"), "b": (other, "B")})
    with pytest.raises(AssertionError) as info:
        expect_close(res, ref, what="f", variants={"a": (same, "slip A"), "b": (same, "slip B")})
    assert "slip" not in str(info.value) and "2 known mistakes give exactly this" in str(info.value)
    # near: named within its distance and nearer to the mistake than to the reference, else not
    near = {"n": (torch.tensor([0.9, 0.0, 0.0, 0.0], dtype=torch.float64), 0.2, "this is a Z: z")}
    with pytest.raises(AssertionError, match="this is a Z: z$"):
        expect_close(res, ref, what="f", near=near)
    far = {"n": (torch.tensor([0.5, 0.0, 0.0, 0.0], dtype=torch.float64), 0.2, "this is a Z: z")}
    with pytest.raises(AssertionError) as info:
        expect_close(res, ref, what="f", near=far)
    assert "Z" not in str(info.value)
