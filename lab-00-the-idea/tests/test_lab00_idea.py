"""Grading tests of lab 00 (the idea). Run them with `nox -s lab00`.

How the layers are graded: the child process that runs your code builds your layer (after
``torch.manual_seed(0)``) and loads the test's own seeded random weights into its four Linear
layers, so your initialisation never matters, only the submodules' names and sizes. The offsets
those weights predict are random and non-zero (a few pixels, some reaching outside the map). The
judge recomputes the expected output from the same weights with its own reference
(``truth_lab00.py``, which a template repository holds recorded) and compares; when your output is
exactly what a known mistake gives, the feedback names it.

Each task is graded on its own: a layer (and ``deform_attend``) runs twice, with your
``bilinear_sample``, ``deform_attend`` and ``msda``, and with stand-ins of the grader's that read
a map their own way (not the answer to any task: ``probes_lab00.py``); it passes when either run
matches the reference computed the same way (``judge_lab00.py``), so a bug costs points once.
This file grades the functions (tasks 0.1, 0.2, 0.5); ``test_lab00_layers.py`` the
layers (0.3, 0.4, 0.6).
"""

import pytest
import torch
from judge_lab00 import expect_either
from probes_lab00 import probe_function, smooth_sample
from truth_lab00 import (
    attend_variants,
    bilinear_sample_grads,
    bilinear_sample_variants,
    msda_call_variants,
    msda_reference,
    pixel_reads,
    reference_grads,
)

from msda_labs.grading import expect_close
from msda_labs.grading.judge.rules import watch_untouched
from msda_labs.truth.cases import (
    MULTI_LEVEL,
    STANDARD_CASES,
    image_and_points,
    make_inputs,
    seeded_generator,
)

TASKS = {
    "0.1": "bilinear_sample",
    "0.2": "deform_attend",
    "0.3": "DeformableAttention",
    "0.4": "DeformableCrossAttention",
    "0.5": "msda",
    "0.6": "MSDACrossAttention",
}

NO_GRADIENT = ("is something rounded (int(), .item(), round(), .long()) or detached on the way? "
               "Bilinear reading is differentiable so that the gradient can reach the positions")


def expect_grads(result, refs, whats, hint, dtype):
    """Compare the gradients a probe sent back with the judge's, in order."""
    for res, ref, what in zip(result.get("grads") or [None] * len(refs), refs, whats):
        if res is None:
            raise AssertionError(f"{what}: no gradient came back; {hint}")
        if isinstance(res, torch.Tensor) and bool((res == 0).all()) and bool((ref != 0).any()):
            raise AssertionError(f"{what}: the gradient is all zeros; {hint}")
        expect_close(res, ref, what=what, dtype=dtype, backward=True)


def _expect_calls(submission, name, args, want, message, ref, dtype=torch.float64):
    """A rule on how many grid_sample calls ``name(*args)`` makes; ``{calls}`` in the message.
    The rule earns its point only on a call whose output is right (``ref``): one call that
    returns zeros is not the exercise."""
    res = submission.run(probe_function, name, args, count=True)
    if res["calls"] != want:
        raise AssertionError(message.replace("{calls}", str(res["calls"])))
    expect_close(res.get("out"), ref, dtype=dtype, expect_dtype=dtype,
                 what=f"{name}, graded for its number of grid_sample calls only when its output "
                      f"is right")
    # The count is made in your process, where a module could hide calls from it: it earns the
    # point only where the judge reads in your source that nothing can (grid_sample reached as
    # F.grid_sample, and nothing that reaches a watch: msda_labs.grading.judge.rules.tamper_uses).
    watch_untouched(submission.source, f"the count of grid_sample calls of {name}",
                    names=("grid_sampler",))


# == Task 0.1: bilinear_sample ===================================================================
def _reads(submission, img, points, what, dtype=torch.float64):
    res = submission.run(probe_function, "bilinear_sample", (img, points))["out"]
    expect_close(res, pixel_reads(img, points), what=what, dtype=dtype, expect_dtype=img.dtype,
                 variants=bilinear_sample_variants(img, points))


@pytest.mark.task("0.1", points=1)
def test_bilinear_reads_pixel_centres(submission):
    # 4 rows x 6 columns holding 0..23: x picks the column, y the row; (5, 3) is the bottom-right
    # pixel, whose right and lower neighbours are outside with weight 0.
    img = torch.arange(24, dtype=torch.float32).reshape(4, 6, 1)
    points = torch.tensor([[2.0, 1.0], [0.0, 0.0], [5.0, 3.0]])
    _reads(submission, img, points, "bilinear_sample(float32 4x6 image holding 0..23) at the "
                                    "pixel centres (x, y) = (2, 1), (0, 0), (5, 3)",
           dtype=torch.float32)


@pytest.mark.task("0.1", points=1)
def test_bilinear_zero_padding(submission):
    # Half the weight is outside at x = -0.5, all of it at x = -1; a quarter of a quarter is
    # inside at (2.75, 2.75).
    img = torch.ones(3, 3, 2, dtype=torch.float64)
    points = torch.tensor([[-0.5, 1.0], [-1.0, 1.0], [1.0, 2.5], [2.75, 2.75], [1.0, -0.25]],
                          dtype=torch.float64)
    _reads(submission, img, points, "bilinear_sample at the edges of a 3x3 image of ones "
                                    "(x = -0.5, x = -1, y = 2.5, (2.75, 2.75), y = -0.25)")


@pytest.mark.task("0.1", points=2)
def test_bilinear_matches_reference(submission):
    img, points = image_and_points(seeded_generator(100), (5, 7, 3), 40, (10.0, 8.0), -1.5)
    _reads(submission, img, points, "bilinear_sample(float64 5x7x3 image) at 40 random points in "
                                    "x in [-1.5, 8.5), y in [-1.5, 6.5), many outside")


@pytest.mark.task("0.1", points=1)
def test_bilinear_float32(submission):
    img, points = image_and_points(seeded_generator(101), (6, 4, 5), 25, (5.0, 7.0), -0.5,
                                   dtype=torch.float32)
    _reads(submission, img, points, "bilinear_sample(float32 6x4x5 image) at 25 random points",
           dtype=torch.float32)


@pytest.mark.task("0.1", points=1)
def test_bilinear_gradients(submission):
    gen = seeded_generator(102)
    img, points = image_and_points(gen, (4, 5, 2), 8, (5.6, 4.6), -0.8)
    grad_out = torch.randn(8, 2, generator=gen, dtype=torch.float64)
    result = submission.run(probe_function, "bilinear_sample", (img, points), grad_out=grad_out)
    refs = bilinear_sample_grads(img, points, grad_out)
    expect_grads(result, refs, ["gradient of bilinear_sample (4x5x2 image, 8 points) with "
                                "respect to img",
                                "gradient of bilinear_sample with respect to points"],
                 NO_GRADIENT, torch.float64)


@pytest.mark.task("0.1", points=1)
def test_bilinear_one_grid_sample_no_loop(submission):
    gen = seeded_generator(103)
    img = torch.randn(5, 6, 2, generator=gen, dtype=torch.float64)
    points = torch.rand(40, 2, generator=gen, dtype=torch.float64) * 5
    _expect_calls(submission, "bilinear_sample", (img, points), 1,
                  "rule: bilinear_sample must read all N points with one F.grid_sample call; "
                  "reading 40 points made {calls} calls", pixel_reads(img, points))
    loops = submission.source.loops("bilinear_sample", graded_apart=TASKS.values())
    if loops:
        raise AssertionError(f"rule: bilinear_sample must not loop (no for/while or "
                             f"comprehension); there is one at line {loops[0].lineno}")


# == Task 0.2: deform_attend =====================================================================
def _attend_case(seed, H, W, D, Q, K, softmaxed):
    gen = seeded_generator(seed)
    value = torch.randn(H, W, D, generator=gen, dtype=torch.float64)
    points = torch.rand(Q, K, 2, generator=gen, dtype=torch.float64) \
        * torch.tensor([W + 2.0, H + 2.0]) - 1
    weights = torch.rand(Q, K, generator=gen, dtype=torch.float64)
    return value, points, (weights.softmax(-1) if softmaxed else 2 * weights)


def _expect_attend(submission, value, points, weights, what):
    # Your deform_attend with the grader's stand-in bilinear_sample, and with yours: either must
    # match (a bug in your bilinear_sample is Task 0.1's).
    # The stand-in run counts only when your deform_attend read the points through the
    # bilinear_sample it was given: one that reads the map itself the stand-in's way answers
    # nothing of Task 0.2.
    Q, K, _ = points.shape
    result = submission.run(probe_function, "deform_attend", (value, points, weights),
                            stand_ins=("bilinear_sample",))

    def against(samples, stand_in):
        # taken before either check
        variants = attend_variants(value, points, weights, "smooth" if stand_in else "pixel")

        def check(run):
            if stand_in and not run.get("sample_calls"):
                raise AssertionError(f"{what}: deform_attend must read its points with "
                                     f"bilinear_sample; with the grader's stand-in "
                                     f"bilinear_sample it made no call")
            expect_close(run.get("out"), (weights.unsqueeze(-1) * samples).sum(1), what=what,
                         dtype=torch.float64, expect_dtype=torch.float64, variants=variants)

        return check

    flat = points.reshape(Q * K, 2)
    expect_either(result, against(smooth_sample(value, flat).reshape(Q, K, -1), True),
                  against(pixel_reads(value, flat).reshape(Q, K, -1), False))


@pytest.mark.task("0.2", points=2)
def test_deform_attend_matches_reference(submission):
    value, points, weights = _attend_case(110, H=6, W=5, D=4, Q=5, K=3, softmaxed=True)
    _expect_attend(submission, value, points, weights,
                   "deform_attend(6x5x4 map, 5 queries x 3 points, some outside, softmaxed "
                   "weights)")


@pytest.mark.task("0.2", points=1)
def test_deform_attend_uses_weights_as_given(submission):
    value, points, weights = _attend_case(111, H=4, W=7, D=3, Q=4, K=2, softmaxed=False)
    _expect_attend(submission, value, points, weights,
                   "deform_attend(4x7x3 map, 4 queries x 2 points) with weights that do not sum "
                   "to 1")


@pytest.mark.task("0.2", points=1)
def test_deform_attend_one_sampling_call(submission):
    # Read off your source by the judge: no loop in deform_attend. Counted in your process, with
    # the grader's stand-in bilinear_sample: one call for the 5 x 3 points.
    # bilinear_sample is Task 0.1's, graded apart: a loop there costs that task's point alone.
    loops = submission.source.loops("deform_attend", graded_apart=TASKS.values())
    if loops:
        raise AssertionError(f"rule: deform_attend must read all Q * K points with one "
                             f"bilinear_sample call, without a loop (for/while or "
                             f"comprehension); there is one at line {loops[0].lineno}")
    value, points, weights = _attend_case(112, H=5, W=5, D=2, Q=5, K=3, softmaxed=True)
    result = submission.run(probe_function, "deform_attend", (value, points, weights),
                            stand_ins=("bilinear_sample",))
    calls = result["stand_in"]["sample_calls"]
    if calls != 1:
        raise AssertionError(f"rule: deform_attend must read all Q * K points with one "
                             f"bilinear_sample call; 5 queries x 3 points made {calls} calls")
    # The one-call rule earns its point only on a deform_attend whose output is right.
    Q, K, _ = points.shape
    samples = smooth_sample(value, points.reshape(Q * K, 2)).reshape(Q, K, -1)
    expect_close(result["stand_in"].get("out"), (weights.unsqueeze(-1) * samples).sum(1),
                 dtype=torch.float64, expect_dtype=torch.float64,
                 what="deform_attend with the grader's stand-in bilinear_sample, graded for its "
                      "number of calls only when its output is right")


# == Task 0.5: msda ===============================================================================
def _expect_msda(submission, inputs, ref, what, case, dtype):
    value, shapes, _starts, loc, attn = inputs
    res = submission.run(probe_function, "msda", (value, shapes, loc, attn))["out"]
    expect_close(res, ref, what=what, case=case.describe(), dtype=dtype, expect_dtype=dtype,
                 variants=msda_call_variants(inputs))


@pytest.mark.task("0.5", points=1)
@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
def test_msda_standard_cases(submission, case):
    inputs = make_inputs(case, torch.float64)
    value, shapes, _starts, loc, attn = inputs
    _expect_msda(submission, inputs, msda_reference(value, shapes, loc, attn),
                 "msda (float64)", case, torch.float64)


@pytest.mark.task("0.5", points=1)
def test_msda_float32(submission):
    case = STANDARD_CASES[2]  # out of bounds, odd D
    inputs = make_inputs(case, torch.float32)
    value, shapes, _starts, loc, attn = inputs
    ref = msda_reference(value.double(), shapes, loc.double(), attn.double())
    _expect_msda(submission, inputs, ref, "msda (float32)", case, torch.float32)


@pytest.mark.task("0.5", points=1)
def test_msda_gradients(submission):
    case = MULTI_LEVEL
    value, shapes, _starts, loc, attn = make_inputs(case, torch.float32)
    grad_out = torch.randn(case.B, case.Q, case.M * case.D, generator=seeded_generator(7))
    result = submission.run(probe_function, "msda", (value, shapes, loc, attn), grad_out=grad_out)
    refs = reference_grads(value, shapes, loc, attn, grad_out)
    names = ("value", "sampling_locations", "attention_weights")
    expect_grads(result, refs, [f"gradient of msda with respect to {n} on {case.describe()}"
                                for n in names], NO_GRADIENT, torch.float32)


@pytest.mark.task("0.5", points=1)
def test_msda_one_grid_sample_per_level(submission):
    case = MULTI_LEVEL  # B=2, M=2, L=2
    value, shapes, _starts, loc, attn = make_inputs(case, torch.float64)
    _expect_calls(submission, "msda", (value, shapes, loc, attn), case.L,
                  f"rule: msda must make one grid_sample call per level, with batch and heads "
                  f"together in the image's first axis (B * M); on {case.describe()} it made "
                  f"{{calls}} calls for {case.L} levels", msda_reference(value, shapes, loc, attn))
