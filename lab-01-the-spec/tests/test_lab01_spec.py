"""Grading tests of lab 01 (the spec). Run them with `nox -s lab01`.

The child runs your functions through ``probes_lab01.py``, watched for library interpolation;
the judge compares with ``msda_labs.truth`` and names a familiar mistake from
``msda_labs.mistakes``. A function that reaches grid_sample (or any interpolation operator, by
any name) earns nothing: every test of its task checks it, and Task 1.1's tests also read exact
pixel centres beside huge pixels, and points between pixels whose huge corners cancel exactly,
where library interpolation's coordinate round trip shows in the output itself. Those reads are
checked here, by the judge: a watch inside your process can be switched off by your code, so a
run-time sighting of library interpolation costs points, but its silence earns none.
"""

import pytest
import torch
from probes_lab01 import call_watched, naive_both_ways, sample_many, smooth_msda

from msda_labs.grading import expect_close
from msda_labs.grading.judge.probes import expect_either
from msda_labs.grading.judge.rules import indirect_uses
from msda_labs.grading.judge.spies import INTERPOLATION_OPS
from msda_labs.mistakes import (
    FORWARD_MISTAKES,
    LAYOUT_MISTAKES,
    msda_variants,
    pixel_reads,
    pixel_variants,
)
from msda_labs.truth.cases import (
    STANDARD_CASES,
    image_and_points,
    make_inputs,
    seeded_generator,
)
from msda_labs.truth.reference import msda_reference

TASKS = {"1.1": "bilinear_sample", "1.2": "msda_naive_student"}

# Library interpolation would make the spec a copy of the reference, not a definition.
BANNED = ("grid_sample", "interpolate", "grid_sampler")


def _check_rules(submission, name):
    for banned in BANNED:
        if submission.source.calls(name, banned, graded_apart=TASKS.values()):
            raise AssertionError(f"rule: {name} must be plain loops and arithmetic; it calls "
                                 f"{banned}(), which is what it is graded against")
    uses = indirect_uses(submission.source, INTERPOLATION_OPS)
    if uses:
        line, what = uses[0]
        raise AssertionError(
            f"rule: lab 01 is plain loops and arithmetic; line {line} of your module uses "
            f"{what}, which can reach a function (grid_sample among them) without naming it, or "
            f"names library interpolation: the grader reads your source, and allows neither "
            f"getattr/eval/exec/importlib/sys/operator and the like nor double-underscore "
            f"attributes outside `if __name__ == \"__main__\":`")


def _check_ran(res, name):
    """A result of a watched probe: no library interpolation ran during the call."""
    found = res.get("forbidden") if isinstance(res, dict) else None
    if found:
        raise AssertionError(f"rule: {name} must be plain loops and arithmetic; while it ran, "
                             f"torch ran {', '.join(found)}: library interpolation, which is "
                             f"what it is graded against (watched at run time, whatever name "
                             f"reached it)")


# Exact pixel centres of a 7 x 9 image whose other pixels are huge. At a centre the other three
# corners weigh exactly 0, so the read is the pixel itself, exactly. Library interpolation first
# normalizes the point and then undoes it, and at these centres the round trip is off by a
# rounding error (for every usual way of normalizing): times a huge neighbour, that shows.
_KNOT_SHAPE, _KNOTS = (7, 9, 2), ((1, 0), (0, 1), (1, 1), (1, 2))
_HUGE = {torch.float64: 1e200, torch.float32: 1e30}


# Points between pixels, at multiples of 1/64 (so x - floor(x) and every weight are exact), in a
# 7 x 9 image of huge values (powers of two). Channel 0 holds, at the four corners, H * fx and
# -H * (1 - fx) in the left and right columns, so that the x weights cancel them exactly:
# (1 - fx) * H * fx - fx * H * (1 - fx) = 0 in any order of the sums, since every product is a
# small multiple of H / 2**18. Channel 1 does the same along y. Plain bilinear arithmetic reads
# exactly 0 in both channels; moving the point by one rounding error reads about H * 1e-16. The
# points are ones where library interpolation's round trip (pixel -> [-1, 1] -> pixel) is off
# for every usual way of normalizing, in float64 and float32.
_BETWEEN = ((98, 75), (160, 193), (70, 100), (73, 70))  # (x, y) in 64ths of a pixel
_POWER = {torch.float64: 2.0 ** 600, torch.float32: 2.0 ** 100}


def _between(dtype):
    big = _POWER[dtype]
    reads = []
    for x64, y64 in _BETWEEN:
        x, y = x64 / 64, y64 / 64
        col, row, fx, fy = x64 // 64, y64 // 64, (x64 % 64) / 64, (y64 % 64) / 64
        image = torch.full(_KNOT_SHAPE, big, dtype=dtype)
        for dc in (0, 1):
            for dr in (0, 1):
                image[row + dr, col + dc, 0] = big * fx if dc == 0 else -big * (1 - fx)
                image[row + dr, col + dc, 1] = big * fy if dr == 0 else -big * (1 - fy)
        what = (f"bilinear_sample at (x, y) = ({x}, {y}) of a 7x9 image of huge values whose four "
                f"corners there cancel exactly under bilinear weights (plain arithmetic reads "
                f"exactly 0; a point moved by a rounding error, as library interpolation's "
                f"coordinate round trip moves it, reads a huge value)")
        reads.append((image, (x, y), torch.zeros(_KNOT_SHAPE[2], dtype=dtype), what))
    return reads


def _knots(dtype):
    """The judge's exact reads: (image, (x, y), expected, what) of pixel centres beside huge
    pixels, then of points between pixels whose huge corners cancel."""
    gen = seeded_generator(17)
    knots = []
    for x, y in _KNOTS:
        image = torch.full(_KNOT_SHAPE, _HUGE[dtype], dtype=dtype)
        image[y, x] = torch.randn(_KNOT_SHAPE[2], generator=gen, dtype=dtype)
        knots.append((image, (x, y), image[y, x].clone(),
                      f"bilinear_sample at the pixel centre (x, y) = ({x}, {y}) of a 7x9 image "
                      f"whose other pixels hold {_HUGE[dtype]:g}: the three other corners "
                      f"weigh exactly 0 and must add nothing (library interpolation moves "
                      f"the point by a rounding error, which these pixels magnify)"))
    return knots + _between(dtype)


def _sent(knots):
    """What the child gets of the knots: (image, (x, y)) each."""
    return [(image, xy) for image, xy, _, _ in knots]


def _check_knots(res, dtype, knots):
    reads = res.get("knots") if isinstance(res, dict) else None
    if not isinstance(reads, list) or len(reads) != len(knots):
        raise AssertionError("bilinear_sample: the exact reads did not come back")
    for got, (_, _, expected, what) in zip(reads, knots):
        expect_close(got, expected, dtype=dtype, what=what)


def _reads(submission, img, points, what):
    knots = _knots(torch.float64)
    res = submission.run(sample_many, img, points, _sent(knots))
    _check_ran(res, "bilinear_sample")
    expect_close(res["out"], pixel_reads(img, points), what=what, dtype=torch.float64,
                 expect_dtype=torch.float64, variants=pixel_variants(img, points))
    _check_knots(res, torch.float64, knots)
    _check_rules(submission, "bilinear_sample")


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
    gen = seeded_generator(11)
    img = torch.randn(4, 5, 3, generator=gen, dtype=torch.float64)
    points = torch.tensor([[-0.25, 1.5], [2.5, -0.75], [-0.6, -0.4]], dtype=torch.float64)
    _reads(submission, img, points, "bilinear_sample at negative coordinates of a 4x5 image "
                                    "(-0.25, 1.5), (2.5, -0.75), (-0.6, -0.4)")


@pytest.mark.task("1.1", points=2)
@pytest.mark.rule("xy-order")
def test_bilinear_matches_reference_random(submission):
    img, points = image_and_points(seeded_generator(0), (5, 7, 3), 40, (10.0, 8.0),
                                   -1.5)
    _reads(submission, img, points, "bilinear_sample at 40 random points of a 5x7x3 image, "
                                    "many outside it")


@pytest.mark.task("1.1", points=1)
def test_bilinear_keeps_dtype_and_shape(submission):
    img = torch.randn(4, 6, 5, generator=seeded_generator(3))
    knots = _knots(torch.float32)
    watched = submission.run(call_watched, "bilinear_sample", img, 1.25, 2.5,
                             knots=_sent(knots))
    _check_ran(watched, "bilinear_sample")
    res = watched["out"]
    if not isinstance(res, torch.Tensor) or tuple(res.shape) != (5,) or res.dtype != torch.float32:
        shape = tuple(res.shape) if isinstance(res, torch.Tensor) else type(res).__name__
        dtype = res.dtype if isinstance(res, torch.Tensor) else "-"
        raise AssertionError(f"bilinear_sample on a float32 (4, 6, 5) image must return a float32 "
                             f"tensor of shape (5,); got {shape} {dtype}")
    expect_close(res, pixel_reads(img, torch.tensor([[1.25, 2.5]]))[0], dtype=torch.float32,
                 what="bilinear_sample(float32 image, 1.25, 2.5)")
    _check_knots(watched, torch.float32, knots)
    _check_rules(submission, "bilinear_sample")


# Task 1.2 is graded apart from Task 1.1: msda_naive_student runs twice, with a stand-in reader
# of the grader's in place of your bilinear_sample (probes_lab01.smooth_sample: every pixel
# weighed by a Gaussian of its distance to the point; it answers no task) and with yours. It passes
# when either run matches its reference, so a bug in bilinear_sample costs Task 1.1 only.
STAND_IN_NOTE = ("graded with the grader's stand-in reader in place of your bilinear_sample, so "
                 "that a bug in bilinear_sample counts in Task 1.1 only")


def _check_naive(submission, args, reference, stand_in_reference, *, dtype, what, case,
                 variants=None):
    res = submission.run(naive_both_ways, *args)
    if not isinstance(res, dict) or "stand_in" not in res:
        raise AssertionError(f"{what}: the probe's result has the wrong form")
    for run in (res["stand_in"], res["own"]):
        if isinstance(run, dict) and "forbidden" in run:
            _check_ran(run, "msda_naive_student")

    def against(expected, extra):
        def check(run):
            expect_close(run["out"], expected, dtype=dtype, expect_dtype=dtype, what=what,
                         case=case, **extra)
        return check

    expect_either(res, against(stand_in_reference, {}),
                  against(reference, {"variants": variants} if variants else {}),
                  note=STAND_IN_NOTE)
    _check_rules(submission, "msda_naive_student")


@pytest.mark.task("1.2", points=2)
@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
@pytest.mark.rule("xy-order", "level-starts", "half-pixel")
def test_naive_matches_reference(submission, case):
    inputs = make_inputs(case, torch.float64)
    value, shapes, _starts, loc, attn = inputs
    _check_naive(submission, (value, shapes, loc, attn), msda_reference(value, shapes, loc, attn),
                 smooth_msda(value, shapes, loc, attn), dtype=torch.float64,
                 what="msda_naive_student", case=case.describe(),
                 variants=lambda: msda_variants(inputs, FORWARD_MISTAKES + LAYOUT_MISTAKES))


@pytest.mark.task("1.2", points=1)
def test_naive_keeps_dtype(submission):
    case = STANDARD_CASES[0]
    value, shapes, _starts, loc, attn = make_inputs(case, torch.float32)
    wide = (value.double(), shapes, loc.double(), attn.double())
    _check_naive(submission, (value, shapes, loc, attn), msda_reference(*wide),
                 smooth_msda(*wide), dtype=torch.float32,
                 what="msda_naive_student on float32 inputs", case=case.describe())
