"""Grading tests of lab 05 (the forward kernel). Run them with `nox -s lab05`.

The kernel is launched by the probes themselves (probes_lab05.py), with the signature the lab
fixes, into an output surrounded by guard bands and pre-filled with a sentinel bit pattern: an
element never written and an element written past either end are both visible, which the
interpreter (no bounds checks) would otherwise hide. Inputs sit between guard bands of NaN, so a
read outside them poisons the result instead of reading whatever memory lies there.
"""

from functools import lru_cache

import probes_lab05 as probes
import pytest
import torch
from judge_lab05 import TASKS  # noqa: F401  (the plugin reads them here)

from msda_labs.grading import expect_close, expect_tensor
from msda_labs.grading.judge.baseline import chip_function
from msda_labs.grading.judge.bigcase import BigCase, judge_big
from msda_labs.grading.judge.peaked import (
    FP16_ACC_MESSAGE,
    PEAKED,
    accumulator_near,
    fp16_running_sum,
    peaked_inputs,
)
from msda_labs.grading.judge.probes import (
    FORWARD_OVERRUN,
    check_forward_output,
    forward_guard,
    run_guarded,
)
from msda_labs.grading.judge.speedjudge import Limit, judge_msda_speed
from msda_labs.grading.speed.timing import REFERENCE_LIMIT, check_reference_speed
from msda_labs.mistakes import msda_variants
from msda_labs.student.cases import tolerance
from msda_labs.truth.cases import (
    DECODER,
    DEVICE_BOUND,
    MULTI_LEVEL,
    SINGLE,
    STANDARD_CASES,
    Case,
    MSDAInputs,
    make_inputs,
)
from msda_labs.truth.reference import msda_reference


def _reference(inputs: MSDAInputs) -> torch.Tensor:
    value, shapes, _starts, loc, attn = inputs
    return msda_reference(value.double(), shapes, loc.double(), attn.double())


def _check_kernel(submission, inputs, case: Case, dtype, block_q: int, *,
                  overrun_hint: str = FORWARD_OVERRUN, variants=None, near=None):
    """Case -> the kernel on guarded inputs -> guards intact, all written, close to the
    reference (a known mistake named when the output is that mistake's: exactly, or within
    ``near``'s reach)."""
    what = "msda_forward_kernel"
    buf = run_guarded(submission, probes.kernel_probe, inputs, block_q)
    desc = f"{case.describe()} in {str(dtype).replace('torch.', '')}, BLOCK_Q={block_q}"
    B, _, M, D = inputs.value.shape
    ref = _reference(inputs)
    rtol, atol = tolerance(dtype)
    res = check_forward_output(buf, (B, inputs.sampling_locations.shape[1], M, D),
                               inputs.value.dtype, forward_guard(block_q, M, D), what=what,
                               case=desc, overrun_hint=overrun_hint, expected=ref, rtol=rtol,
                               atol=atol)
    expect_close(res, ref, what=what, case=desc, dtype=dtype,
                 variants=variants if variants is not None else lambda: msda_variants(inputs),
                 near=near)


# -- Task 5.4: the math, fp32 ---------------------------------------------------------------------
@pytest.mark.task("5.4", points=1)
@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
@pytest.mark.rule(
    "mask-corners", "zero-padding", "half-pixel", "floor", "xy-order", "level-starts",
    "write-once",
)
def test_kernel_matches_reference(submission, case):
    _check_kernel(submission, make_inputs(case, torch.float32), case, torch.float32, 4)


@pytest.mark.task("5.4", points=1)
@pytest.mark.rule("level-starts")
def test_msda_forward_derives_level_starts(submission):
    # As labs 06 and 10 call it: the wrapper, level_start_index=None, the default BLOCK_Q (> Q).
    case = MULTI_LEVEL
    inputs = make_inputs(case, torch.float32)
    res = run_guarded(submission, probes.wrapper_probe, inputs)
    launched = res.get("launched", []) if isinstance(res, dict) else []
    if "msda_forward_kernel" not in launched:
        raise AssertionError(f"msda_forward(..., level_start_index=None, ...) launched "
                             f"{launched or 'no Triton kernel'}, not msda_forward_kernel: the "
                             f"given wrapper runs your kernel; a stand-in earns nothing here")
    res = res["out"]
    B, _, M, D = inputs.value.shape
    expect_tensor(res, "msda_forward(..., level_start_index=None, ...)",
                  shape=(B, case.Q, M * D), dtype=torch.float32)
    expect_close(res, _reference(inputs), what="msda_forward with level_start_index=None",
                 case=case.describe(), dtype=torch.float32, variants=msda_variants(inputs))


# -- Task 5.5: query tiles and masks --------------------------------------------------------------
@pytest.mark.task("5.5", points=1)
@pytest.mark.parametrize(("case", "block_q"), [(SINGLE, 1), (MULTI_LEVEL, 2), (MULTI_LEVEL, 16)],
                         ids=["BLOCK_Q1", "BLOCK_Q2", "BLOCK_Q16"])
@pytest.mark.rule("mask-query-tail", "write-once")
def test_any_block_q(submission, case, block_q):
    # One query per program (Q = 7 programs), a ragged tail (Q = 5 = 2 + 2 + 1), and one block
    # wider than Q.
    _check_kernel(submission, make_inputs(case, torch.float32), case, torch.float32, block_q)


QUERY_TAIL = Case("query_tail", B=2, Q=6, M=2, D=4, shapes=((3, 5),), K=2, loc_lo=-0.1,
                  loc_hi=1.1, seed=3)
CHANNEL_TAIL = Case("channel_tail", B=1, Q=8, M=2, D=3, shapes=((4, 3), (2, 2)), K=2, seed=4)


@pytest.mark.task("5.5", points=2)
@pytest.mark.rule("mask-query-tail")
def test_store_masks_the_query_tail(submission):
    # D = 4 is a power of two, so only the rows past Q of the last block can go astray.
    _check_kernel(submission, make_inputs(QUERY_TAIL, torch.float32), QUERY_TAIL, torch.float32,
                  4, overrun_hint="they are the rows q >= Q of the ragged last query block: the "
                                  "store mask ignores the query mask mask_q (an unmasked tail)")


@pytest.mark.task("5.5", points=2)
@pytest.mark.rule("mask-channel-tail")
def test_store_masks_the_channel_tail(submission):
    # Q = 8 is a multiple of BLOCK_Q = 4, so only the channels d >= D = 3 can go astray.
    _check_kernel(submission, make_inputs(CHANNEL_TAIL, torch.float32), CHANNEL_TAIL,
                  torch.float32, 4,
                  overrun_hint="they are channels d >= D of the last row (BLOCK_D = 4 > D = 3): "
                               "the store mask ignores mask_d (an unmasked tail)")


# -- Task 5.6: half-precision inputs, fp32 accumulation -------------------------------------------
@pytest.mark.task("5.6", points=1)
@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
@pytest.mark.rule("fp32-accumulation")
def test_fp16_matches_reference(submission, case):
    _check_kernel(submission, make_inputs(case, torch.float16), case, torch.float16, 4)


@pytest.mark.task("5.6", points=3)
@pytest.mark.rule("fp32-accumulation")
def test_accumulates_in_fp32(submission):
    # The fp16 accumulator is named when the output is an fp16 running sum's (exactly, or within
    # four fp16 steps of it); a mistake of the small cases is named here too, so that this
    # failure points back to it instead of blaming the accumulator.
    inputs = peaked_inputs()
    _check_kernel(submission, inputs, PEAKED, torch.float16, 4,
                  variants=lambda: {"fp16_acc": (fp16_running_sum(inputs), FP16_ACC_MESSAGE),
                                    **msda_variants(inputs)},
                  near=lambda: accumulator_near(inputs))


# -- Task 5.7: int64 offsets ----------------------------------------------------------------------
# Two batches of one 16384 x 16384 level with M * D = 8: batch 1 starts at element 2**31, one past
# the largest int32. The value tensor (2**32 fp32 elements, 16 GiB) is a sparse file mapped into
# memory: only the pages the test writes or the kernel reads take memory, a few hundred KiB.
HUGE = BigCase("int64_offsets", B=2, Q=6, M=1, D=8, K=2,
               corners=(((1 << 14) - 12, (1 << 14) - 20), (4, 8)), seed=11)


@lru_cache(maxsize=1)
def _huge_reference() -> torch.Tensor:
    # The windows alone as one small level: the very same samples (bigcase.py).
    return _reference(HUGE.small_inputs())


def _check_huge(submission):
    # int32 offsets are named only when the same samples on a small level come out right
    # (bigcase.judge_big): then the size alone broke the kernel.
    block_q = 4

    def run(case):
        return run_guarded(submission, probes.big_probe, case, block_q)

    def check(buf, case):
        desc = case.describe()
        what = "msda_forward_kernel"
        res = check_forward_output(buf, (case.B, case.Q, case.M, case.D), torch.float32,
                                   forward_guard(block_q, case.M, case.D), what=what, case=desc)
        expect_close(res, _huge_reference(), what=what, case=desc, dtype=torch.float32,
                     variants=lambda: msda_variants(HUGE.small_inputs()))

    judge_big(run, check, HUGE)


@pytest.mark.task("5.7", points=3)
@pytest.mark.rule("int64-offsets")
def test_int64_offsets_past_2_31(submission):
    _check_huge(submission)


@pytest.mark.task("5.7", points=2)
@pytest.mark.stage("gpu")
@pytest.mark.rule("int64-offsets")
def test_int64_offsets_past_2_31_on_gpu(submission):
    _check_huge(submission)


# -- Task 5.8: a real GPU, real sizes, every dtype ------------------------------------------------
ENCODER = Case("encoder", B=2, Q=5100, M=8, D=32, shapes=((48, 80), (24, 40), (12, 20), (6, 10)),
               K=4, loc_lo=-0.1, loc_hi=1.1, seed=5)


GPU_DTYPES = ("float32", "float16", "bfloat16")


@pytest.mark.task("5.8", points=2)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize("dtype", list(GPU_DTYPES))
@pytest.mark.parametrize("case", [DECODER, ENCODER], ids=lambda c: c.id)
def test_forward_on_gpu(submission, case, dtype):
    inputs = make_inputs(case, getattr(torch, dtype))
    res = submission.run(probes.gpu_probe, case, dtype)
    expect_close(res, _reference(inputs), what="msda_forward on the GPU",
                 case=f"{case.describe()} in {dtype}", dtype=getattr(torch, dtype))


# -- Task 5.8: speed, against the PyTorch reference -----------------------------------------------
# Timed on the judge's clock (msda_labs.grading.judge.speedjudge): the judge sends a fresh seed,
# your child draws 16 new input sets from it on the GPU, calls msda_forward on each and sends back a
# checksum of every output; the judge's clock runs from the seed to the checksums. Two timed
# outputs of every round, picked at random after its reply, are then checked against the ground
# truth with the tolerance of the correctness tests (the checksums bind the others: a call whose
# work was skipped or left unfinished sends a checksum its output does not give). The
# baseline is the grid_sample reference, which every copy of the kit carries, timed the same way by
# the judge in a process that never loaded your module; the lab 05 chip is absent from an exported
# lab 05, so its time is reported where it exists and never graded. The reference copies the whole
# value pyramid into grid_sample's layout, then gathers every channel of every corner with its own
# strided read, then stacks, weights and sums in three more passes: a kernel that follows the lab
# does one pass and is several times faster, so "no slower than the reference" is generous to right
# work and still fails a kernel that sleeps or serializes. It runs at the encoder's size
# (DEVICE_BOUND: 22,223 queries), where the kernel and not the protocol's overhead takes the time.
SPEED_CASE, SPEED_DTYPE = DEVICE_BOUND, "float16"
SPEED_LIMIT = REFERENCE_LIMIT  # your time / the reference's
SPEED_VERIFIED = 2  # outputs of each round checked in full (an encoder-sized output is 45 MB)


def speed_baselines() -> dict:
    """The calls the judge times beside yours, on each timed input set."""
    chip = chip_function("lab05", "msda_forward")
    return {"reference": lambda value, shapes, _starts, loc, attn:
            msda_reference(value, shapes, loc, attn),
            "chip": None if chip is None else (lambda *inputs: chip(*inputs))}


# Before the stage's first test, one child makes these calls at once, in threads, so that their
# kernels compile in parallel, and the judge compiles its baselines meanwhile
# (grading.judge.plugin); nothing of it is graded.
COMPILE_AHEAD = [(probes.gpu_probe, (case, dtype)) for case in (DECODER, ENCODER)
                 for dtype in GPU_DTYPES]
JUDGE_COMPILE_AHEAD = [(SPEED_CASE, SPEED_DTYPE, "forward", speed_baselines)]


@pytest.mark.task("5.8", points=2)
@pytest.mark.stage("gpu")
def test_forward_speed_against_the_reference(submission):
    case, dtype_name = SPEED_CASE, SPEED_DTYPE
    dtype = getattr(torch, dtype_name)
    desc = f"{case.describe()} in {dtype_name}"

    def close(out, expected, what):
        expect_close(out, expected, what=f"msda_forward ({what}) on the GPU", case=desc,
                     dtype=dtype)

    measured = judge_msda_speed(submission, case, dtype_name, fn="msda_forward",
                                truth=lambda inputs: _reference(inputs), close=close,
                                baselines=speed_baselines(), verify=SPEED_VERIFIED,
                                limits=[Limit("yours", "reference", SPEED_LIMIT)])
    check_reference_speed(measured, what=f"msda_forward on {desc}", chip_label="the lab 05 chip",
                          limit=SPEED_LIMIT, submission=submission)
