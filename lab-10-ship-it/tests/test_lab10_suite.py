"""Grading tests of lab 10, Task 10.4: the final exam, the operator's own test suite.

The CPU stage runs msda in Triton's interpreter at small sizes; the GPU stage
(``@pytest.mark.stage("gpu")``) runs it at real sizes, in every dtype, on a case whose flat value
index passes 2**31, and times one training step against the PyTorch reference. The probes are in
probes_lab10.py; the references and the checks shared with Tasks 10.1-10.3 are in
judge_lab10.py.
"""

import judge_lab10
import probes_lab10 as probes
import pytest
import torch
from judge_lab10 import (
    RAGGED,
    TWO_LEVELS,
    VCASE,
    check_compiled_kernels,
    check_grads,
    check_kernels_ran,
    check_output,
    run_msda,
)
from probes_lab10 import DTYPES, FAR, FAR_HEADS

from msda_labs.grading import expect_close
from msda_labs.grading.judge.probes import timed_output
from msda_labs.grading.judge.rejections import expect_rejections
from msda_labs.grading.judge.speedjudge import (
    Limit,
    expect_close_but_borders,
    judge_msda_speed,
    timed_tolerance,
)
from msda_labs.grading.speed.timing import REFERENCE_LIMIT, check_reference_speed
from msda_labs.truth.cases import (
    DECODER,
    DEVICE_BOUND,
    EXACT_KNOTS,
    OUT_OF_BOUNDS,
    SINGLE,
    STANDARD_CASES,
)
from msda_labs.truth.reference import msda_reference, reference_grads

# The lab as the grading plugin reads it, declared once for both test files in judge_lab10.py.
TASKS = judge_lab10.TASKS


# -- in the interpreter --------------------------------------------------------------------------
@pytest.mark.task("10.4", points=1)
@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
def test_exam_forward_float32(submission, case):
    res = run_msda(submission, case, "float32", backward=False)
    check_output(res, case, "float32", "msda")
    check_kernels_ran(submission, res, f"msda on {case.describe()}", backward=False)


@pytest.mark.task("10.4", points=1)
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_exam_forward_half_precision(submission, dtype_name):
    res = run_msda(submission, OUT_OF_BOUNDS, dtype_name, backward=False)
    check_output(res, OUT_OF_BOUNDS, dtype_name, "msda")
    check_kernels_ran(submission, res, f"msda in {dtype_name}", backward=False)


@pytest.mark.task("10.4", points=1)
def test_exam_forward_ragged_queries(submission):
    res = run_msda(submission, RAGGED, "float32", backward=False)
    check_output(res, RAGGED, "float32", "msda (more queries than one query block)")
    check_kernels_ran(submission, res, "msda (more queries than one query block)",
                      backward=False)


@pytest.mark.task("10.4", points=1)
@pytest.mark.rule("level-starts")
def test_exam_level_start_index_none(submission):
    res = run_msda(submission, TWO_LEVELS, "float32", starts_none=True)
    check_output(res, TWO_LEVELS, "float32", "msda(..., level_start_index=None, ...)")
    check_grads(res, TWO_LEVELS, "float32", "msda(..., level_start_index=None, ...)")
    check_kernels_ran(submission, res, "msda(..., level_start_index=None, ...)")


@pytest.mark.task("10.4", points=1)
@pytest.mark.parametrize("case", [OUT_OF_BOUNDS, EXACT_KNOTS, SINGLE, RAGGED],
                         ids=lambda c: c.id)
def test_exam_backward_float32(submission, case):
    res = run_msda(submission, case, "float32")
    check_grads(res, case, "float32", "msda, then backward")
    check_kernels_ran(submission, res, f"msda, then backward, on {case.describe()}")


@pytest.mark.task("10.4", points=1)
@pytest.mark.parametrize("dtype_name,flag", [("float32", True), ("float16", False),
                                             ("float16", True), ("bfloat16", "auto")],
                         ids=["float32-fp32acc", "float16-native", "float16-fp32acc",
                              "bfloat16-auto"])
def test_exam_backward_dtypes_and_accumulators(submission, dtype_name, flag):
    res = run_msda(submission, OUT_OF_BOUNDS, dtype_name, flag=flag)
    given = "no flag" if flag == "auto" else f"fp32_grad_accum={flag}"
    check_output(res, OUT_OF_BOUNDS, dtype_name, f"msda ({given})")
    check_grads(res, OUT_OF_BOUNDS, dtype_name, f"msda ({given}), then backward")
    check_kernels_ran(submission, res, f"msda ({given}), then backward")


def _check_paths_agree(submission, case, where="", note=""):
    res = submission.run(probes.paths_probe, case)
    native, fp32 = res["grads"]
    if native is None or fp32 is None:
        raise AssertionError("msda's backward left value.grad empty")
    expect_close(native, fp32, what=f"grad_value with fp32_grad_accum=False vs True{where}",
                 case=f"{case.describe()} in float32{note}", rtol=1e-5, atol=1e-5)
    for flag, launched in zip((False, True), res["launched"]):
        check_kernels_ran(submission, {"launched": launched},
                          f"msda with fp32_grad_accum={flag}{where}")


@pytest.mark.task("10.4", points=1)
@pytest.mark.rule("accumulator-switch")
def test_exam_accumulator_paths_agree_in_float32(submission):
    _check_paths_agree(submission, TWO_LEVELS, note=" (both paths add fp32 numbers)")


# -- on a GPU: real sizes, every dtype, past 2**31 -----------------------------------------------
@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_gpu_exam_forward_decoder(submission, dtype_name):
    res = run_msda(submission, DECODER, dtype_name, backward=False)
    check_output(res, DECODER, dtype_name, "msda on the GPU")
    check_kernels_ran(submission, res, "msda on the GPU", backward=False)


@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize("flag", [False, True], ids=["native", "fp32acc"])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_gpu_exam_backward_decoder(submission, dtype_name, flag):
    res = run_msda(submission, DECODER, dtype_name, flag=flag)
    check_grads(res, DECODER, dtype_name, f"msda on the GPU (fp32_grad_accum={flag}), backward")
    check_kernels_ran(submission, res, f"msda on the GPU (fp32_grad_accum={flag})")


EDGE_CASES = (*STANDARD_CASES, RAGGED, TWO_LEVELS)


@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_gpu_exam_edge_cases(submission, dtype_name):
    results = submission.run(probes.cases_probe, EDGE_CASES, dtype_name)
    for case, res in zip(EDGE_CASES, results):
        check_output(res, case, dtype_name, "msda on the GPU")
        check_grads(res, case, dtype_name, "msda on the GPU, backward")
        check_kernels_ran(submission, res, f"msda on the GPU on {case.describe()}")
    # Observed from outside: on the first case Triton compiles every kernel afresh, and the judge
    # reads the kernels written to its cache on the disk during the forward and the backward.
    # Once a stage (in fp32): the launch record above already watches every dtype, and a fresh
    # cache means compiling everything again.
    if dtype_name != "float32":
        return
    case = EDGE_CASES[0]
    res = judge_lab10.run_compiled(submission, case, dtype_name)
    check_output(res, case, dtype_name, "msda on the GPU (Triton's cache in a fresh folder)")
    check_grads(res, case, dtype_name, "msda on the GPU (Triton's cache in a fresh folder)")
    check_compiled_kernels(res, f"msda on the GPU on {case.describe()} in {dtype_name}")


def _far_reference(dtype_name):
    """fp64 output and fp32 gradients of FAR_HEADS alone, as a problem of their own."""
    value, loc, attn, grad = probes.far_parts(dtype_name)
    shapes = torch.tensor(FAR.shapes, dtype=torch.int64)
    out = msda_reference(value.double(), shapes, loc.double(), attn.double())
    return out, reference_grads(value, shapes, loc, attn, grad.reshape(out.shape))


@pytest.mark.task("10.4", points=2)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.rule("int64-offsets")
def test_gpu_exam_int64_far_end(submission, dtype_name):
    res = submission.run(probes.far_probe, dtype_name)
    dtype = DTYPES[dtype_name]
    desc = (f"case '{FAR.id}' (B=2 Q=5 M=8192 D=32 K=2, one 65x64 level: 2**31 + 2**25 value "
            f"elements; heads {FAR_HEADS} compared) in {dtype_name}")
    for name, count in zip(("output", "value.grad", "sampling_locations.grad",
                            "attention_weights.grad"), res["outside"]):
        if count:
            raise AssertionError(f"msda on {desc}: {count} nonzero elements of the {name} in "
                                 f"heads whose inputs are all zero: something read or wrote the "
                                 f"wrong place (an int32 offset past 2**31?)")
    ref_out, ref_grads = _far_reference(dtype_name)
    expect_close(res["out"], ref_out, what="msda", case=desc, dtype=dtype)
    for name, got, ref in zip(("value", "sampling_locations", "attention_weights"),
                              res["grads"], ref_grads):
        expect_close(got, ref, what=f"msda, then backward: the gradient of {name}", case=desc,
                     dtype=dtype, backward=True)
    check_kernels_ran(submission, res, f"msda on {desc}")


@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
def test_gpu_exam_rejects_cpu_and_mixed_devices(submission):
    cases = [("CPU tensors on a machine with a GPU", None, ["value", "cuda", "cpu"]),
             ("sampling_locations on the CPU, value on the GPU", None,
              ["sampling_locations", "cpu", "cuda"])]
    expect_rejections(submission.run(probes.devices_probe, VCASE), cases, entry="msda")


@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
def test_gpu_exam_flag_follows_the_device(submission):
    from msda_labs.chips.lab09 import use_fp32_grad_accum

    capability = torch.cuda.get_device_capability()
    runs = [(SINGLE, "bfloat16", "auto"), (SINGLE, "float16", "auto"), (SINGLE, "float32", "auto")]
    seen = submission.run(probes.flag_probe, runs)
    for (_, dtype_name, _), calls in zip(runs, seen):
        want = use_fp32_grad_accum(DTYPES[dtype_name], capability)
        if calls != [want]:
            raise AssertionError(f"msda({dtype_name} inputs) on a GPU of capability {capability}: "
                                 f"msda_backward got fp32_grad_accum {calls or 'never'}, expected "
                                 f"[{want}]; ask torch.cuda.get_device_capability(value.device)")
    judge_lab10.check_records_believed(submission, "the flag msda handed msda_backward")


@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
def test_gpu_exam_accumulator_paths_agree_in_float32(submission):
    case = DECODER.with_(B=2, Q=100, shapes=((24, 32), (12, 16)))
    _check_paths_agree(submission, case, where=" on the GPU")


# -- on a GPU: speed, against the PyTorch reference ----------------------------------------------
# One training step of the operator (forward, then all three gradients through autograd) is timed
# on the judge's clock against the same step of the grid_sample reference, which every copy of the
# kit carries; the lab 10 chip is absent from an exported lab 10, so its time is reported where it
# exists and never graded. The kernels here are always the shipped ones (msda_labs.student.shipped):
# what this measures is the operator around them (validation, copies, the flag, the autograd
# glue), and a step that follows the lab costs a fraction of the reference's forty or so torch
# operations. fp32: atomics of the element type itself on every GPU. The step is first run once,
# untimed, at the decoder's size: right there with the correctness tests' tolerance, and with the
# lab's kernels launched. It is timed at the encoder's size (DEVICE_BOUND: 22,223 queries), where
# the step and not the protocol's own overhead per call (about 350 us) takes the time.
CHECK_CASE, SPEED_CASE, SPEED_DTYPE = DECODER, DEVICE_BOUND, "float32"
SPEED_LIMIT = REFERENCE_LIMIT  # your step's time / the reference's


@pytest.mark.task("10.4", points=2)
@pytest.mark.stage("gpu")
def test_gpu_speed_against_the_reference(submission):
    case, dtype_name = CHECK_CASE, SPEED_DTYPE
    measured = submission.run(probes.step_probe, case, dtype_name)
    step = timed_output(measured)
    what = "msda then backward (the step that is timed) on the GPU"
    # A fast wrong answer earns nothing: the step's output and gradients are checked first.
    if not isinstance(step, (tuple, list)) or len(step) != 4:
        raise AssertionError(f"{what}: expected the output and three gradients on "
                             f"{case.describe()}")
    res = {"out": step[0], "grads": list(step[1:])}
    check_output(res, case, dtype_name, what)
    check_grads(res, case, dtype_name, what)
    check_kernels_ran(submission, measured, what)
    case = SPEED_CASE
    desc = f"msda forward + backward on {case.describe()} in {dtype_name}"
    ref_label = "the same step of the PyTorch reference (grid_sample, autograd)"
    judged = judge_msda_speed(submission, case, dtype_name, fn="msda", call="autograd",
                              truth=_step_truth, close=_step_close(case, dtype_name),
                              baselines=_step_baselines(), verify=SPEED_VERIFIED,
                              limits=[Limit("yours", "reference", SPEED_LIMIT)])
    check_reference_speed(judged, what=desc, reference_label=ref_label,
                          chip_label="the lab 10 chip", limit=SPEED_LIMIT, submission=submission)


# The judge's clock (msda_labs.grading.judge.speedjudge): 16 steps a round on input sets drawn from
# a seed your child sees only when the clock starts; one step of every round, picked at random
# afterwards, is checked in full (the checksums sent inside the timed window bind the others).
# One, not two: a step's output and three gradients at the encoder's size are 160 MB to send back
# and check, 1.3 s each on an H100 host, most of the speed test's time.
SPEED_VERIFIED = 1


def _step_truth(inputs):
    value, shapes, _starts, loc, attn, grad = inputs
    out = msda_reference(value.double(), shapes, loc.double(), attn.double())
    return (out, *reference_grads(value, shapes, loc, attn, grad))


def _step_close(case, dtype_name):
    def close(res, expected, what):
        names = ("the output", "the gradient of value", "the gradient of sampling_locations",
                 "the gradient of attention_weights")
        for i, (name, got, ref) in enumerate(zip(names, res, expected)):
            where = dict(what=f"msda then backward ({what}) on the GPU: {name}",
                         case=f"{case.describe()} in {dtype_name}", dtype=DTYPES[dtype_name])
            if i > 0:  # a gradient: the timed tolerance (speedjudge.TIMED_SLACK)
                where["rtol"], where["atol"] = timed_tolerance(DTYPES[dtype_name])
            if i == 2:  # a few elements may fall on the other side of a pixel border
                expect_close_but_borders(got, ref, **where)
            else:
                expect_close(got, ref, backward=i > 0, **where)
    return close


def _step_baselines() -> dict:
    """The steps the judge times beside yours: the reference's, and the lab 10 chip's where this
    copy of the kit carries it (the chip is never in your process)."""
    from msda_labs.grading.judge.baseline import chip_function

    def step(forward):
        def run(value, shapes, starts, loc, attn, grad):
            leaves = [t.detach().requires_grad_(True) for t in (value, loc, attn)]
            out = forward(leaves[0], shapes, starts, leaves[1], leaves[2])
            return (out, *torch.autograd.grad(out, leaves, grad))
        return run

    chip = chip_function("lab10", "msda")
    return {"reference": step(lambda value, shapes, _starts, loc, attn:
                              msda_reference(value, shapes, loc, attn)),
            "chip": None if chip is None else step(chip)}


# Before the stage's first test, one child makes these calls at once, in threads, so that their
# kernels compile in parallel, and the judge compiles its baselines meanwhile
# (grading.judge.plugin); nothing of it is graded. (Task 10.4's fresh-cache check compiles anew
# by design, and the far case's 2**31 elements stay with their own test.)
COMPILE_AHEAD = [
    *((probes.msda_probe, (DECODER, dtype, flag)) for dtype in DTYPES for flag in (False, True)),
    *((probes.cases_probe, (EDGE_CASES, dtype)) for dtype in DTYPES),
]
JUDGE_COMPILE_AHEAD = [(SPEED_CASE, SPEED_DTYPE, "autograd", _step_baselines)]
