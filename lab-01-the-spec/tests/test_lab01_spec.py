"""Grading tests of lab 01 (the spec). Run them with `nox -s lab01`.

The child runs your functions (directly, or through ``probes_lab01.py``); the judge compares with
``msda_labs.truth`` and names a familiar mistake from ``msda_labs.mistakes``.
"""

import pytest
import torch
from probes_lab01 import sample_many

from msda_labs.grading import expect_close
from msda_labs.mistakes import msda_variants, pixel_reads, pixel_variants
from msda_labs.truth.cases import STANDARD_CASES, image_and_points, make_inputs
from msda_labs.truth.reference import msda_reference

LAB = "lab01"
TITLE = "The spec"
MODE = "cpu"
TASKS = {"1.1": "bilinear_sample", "1.2": "msda_naive_student"}

# Library interpolation would make the spec a copy of the reference, not a definition.
BANNED = ("grid_sample", "interpolate", "grid_sampler")


def _check_rules(submission, name):
    for banned in BANNED:
        if submission.source.calls(name, banned):
            raise AssertionError(f"rule: {name} must be plain loops and arithmetic; it calls "
                                 f"{banned}(), which is what it is graded against")


def _reads(submission, img, points, what):
    res = submission.run(sample_many, img, points)
    expect_close(res, pixel_reads(img, points), what=what, dtype=torch.float64,
                 variants=pixel_variants(img, points))


@pytest.mark.task("1.1", points=1)
@pytest.mark.rule("half-pixel")
def test_bilinear_on_pixel_centre(submission):
    # 3 rows x 4 columns holding 0..11: x picks the column, y the row -> img[1, 2] = 6.
    img = torch.arange(12, dtype=torch.float64).reshape(3, 4, 1)
    points = torch.tensor([[2.0, 1.0], [0.0, 0.0], [3.0, 2.0]], dtype=torch.float64)
    _reads(submission, img, points,
           "bilinear_sample at the integer points (x, y) = (2, 1), (0, 0), (3, 2) of a 3x4 image "
           "holding 0..11 (the last is the bottom-right pixel)")


@pytest.mark.task("1.1", points=1)
def test_bilinear_between_pixels(submission):
    img = torch.tensor([[0.0, 1.0], [2.0, 3.0]], dtype=torch.float64).reshape(2, 2, 1)
    points = torch.tensor([[0.5, 0.5], [0.25, 0.0], [0.0, 0.75]], dtype=torch.float64)
    _reads(submission, img, points, "bilinear_sample between the pixels of a 2x2 image "
                                    "[[0, 1], [2, 3]]")


@pytest.mark.task("1.1", points=1)
@pytest.mark.rule("zero-padding")
def test_bilinear_zero_padding(submission):
    # Left corners outside: half the weight is lost at x = -0.5, all of it at x = -1.
    img = torch.ones(3, 3, 2, dtype=torch.float64)
    points = torch.tensor([[-0.5, 1.0], [-1.0, 1.0], [1.0, 2.5], [2.75, 2.75]], dtype=torch.float64)
    _reads(submission, img, points, "bilinear_sample at the edge of a 3x3 image of ones "
                                    "(x = -0.5, x = -1, y = 2.5, the bottom-right corner)")


@pytest.mark.task("1.1", points=1)
@pytest.mark.rule("floor")
def test_bilinear_negative_coordinates_round_down(submission):
    gen = torch.Generator().manual_seed(11)
    img = torch.randn(4, 5, 3, generator=gen, dtype=torch.float64)
    points = torch.tensor([[-0.25, 1.5], [2.5, -0.75], [-0.6, -0.4]], dtype=torch.float64)
    _reads(submission, img, points, "bilinear_sample at negative coordinates of a 4x5 image "
                                    "(-0.25, 1.5), (2.5, -0.75), (-0.6, -0.4)")


@pytest.mark.task("1.1", points=2)
@pytest.mark.rule("xy-order")
def test_bilinear_matches_reference_random(submission):
    _check_rules(submission, "bilinear_sample")
    img, points = image_and_points(torch.Generator().manual_seed(0), (5, 7, 3), 40, (10.0, 8.0),
                                   -1.5)
    _reads(submission, img, points, "bilinear_sample at 40 random points of a 5x7x3 image, "
                                    "many outside it")


@pytest.mark.task("1.1", points=1)
def test_bilinear_keeps_dtype_and_shape(submission):
    img = torch.randn(4, 6, 5, generator=torch.Generator().manual_seed(3))
    res = submission.call("bilinear_sample", img, 1.25, 2.5)
    if not isinstance(res, torch.Tensor) or tuple(res.shape) != (5,) or res.dtype != torch.float32:
        shape = tuple(res.shape) if isinstance(res, torch.Tensor) else type(res).__name__
        dtype = res.dtype if isinstance(res, torch.Tensor) else "-"
        raise AssertionError(f"bilinear_sample on a float32 (4, 6, 5) image must return a float32 "
                             f"tensor of shape (5,); got {shape} {dtype}")
    expect_close(res, pixel_reads(img, torch.tensor([[1.25, 2.5]]))[0], dtype=torch.float32,
                 what="bilinear_sample(float32 image, 1.25, 2.5)")


@pytest.mark.task("1.2", points=2)
@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
@pytest.mark.rule("xy-order", "level-starts", "half-pixel")
def test_naive_matches_reference(submission, case):
    inputs = make_inputs(case, torch.float64)
    value, shapes, _starts, loc, attn = inputs
    res = submission.call("msda_naive_student", value, shapes, loc, attn)
    _check_rules(submission, "msda_naive_student")
    expect_close(res, msda_reference(value, shapes, loc, attn), dtype=torch.float64,
                 what="msda_naive_student", case=case.describe(), variants=msda_variants(inputs))


@pytest.mark.task("1.2", points=1)
def test_naive_keeps_dtype(submission):
    case = STANDARD_CASES[0]
    value, shapes, _starts, loc, attn = make_inputs(case, torch.float32)
    res = submission.call("msda_naive_student", value, shapes, loc, attn)
    expect_close(res, msda_reference(value.double(), shapes, loc.double(), attn.double()),
                 dtype=torch.float32, expect_dtype=torch.float32,
                 what="msda_naive_student on float32 inputs", case=case.describe())
