"""Grading tests of lab 08 (concurrent writes). Run them with `nox -s lab08`.

The kernels run in Triton's interpreter (the lab's interpret stage) on tiny seeded inputs, and on a
GPU in the GPU stage. The probes (probes_lab08.py) launch the kernels themselves, with the
signatures the lab fixes, into outputs surrounded by guard bands: a write past either end, and an
element never written, are both visible, which the interpreter (no bounds checks) would otherwise
hide. Gradients are compared with fp32 autograd of the grid_sample reference on the same (rounded)
inputs and a seeded upstream gradient; the checks of each buffer are in judge_lab08.py.
"""


import judge_lab08 as judge
import probes_lab08 as probes
import pytest
import torch
from probes_lab08 import upstream

from msda_labs.grading import expect_close
from msda_labs.grading.judge.baseline import chip_function
from msda_labs.grading.judge.bigcase import BigCase, judge_big
from msda_labs.grading.judge.probes import run_guarded, shared_run
from msda_labs.grading.judge.speedjudge import (
    Limit,
    expect_close_but_borders,
    judge_msda_speed,
    timed_tolerance,
)
from msda_labs.grading.speed.timing import REFERENCE_LIMIT, add_note, check_reference_speed
from msda_labs.mistakes import grad_variants
from msda_labs.truth.cases import (
    DECODER,
    MULTI_LEVEL,
    OUT_OF_BOUNDS,
    SINGLE,
    STANDARD_CASES,
    Case,
    make_inputs,
    seeded_generator,
)
from msda_labs.truth.reference import msda_reference, reference_grads

TASKS = {
    "8.1": "predict_racy_histogram",
    "8.2": "histogram_atomic_kernel",
    "8.3": "msda_backward_kernel",
    "8.4": "on a real GPU",
}
CRASH_HINT = judge.CRASH_HINT


# -- Task 8.1: predict the racy histogram ---------------------------------------------------------
# Every (n, n_bins, BLOCK, seed, skew) whose racy kernel the grader runs: all of them in one child
# of their own (probes.racy_probe), never in a child that runs your prediction. No case is
# saturated (every program holding every bin): the indices of each are drawn so that the counts
# differ between bins and from every known wrong model of the race (judge.separating_indices), so
# an answer computed from the sizes alone, or from a wrong model, scores nothing.
MEASURED_RACES = ((2000, 200, 256, 1, False), (1000, 64, 64, 2, False), (37, 24, 16, 3, False),
                  (60, 10, 2, 4, False), (500, 16, 32, 5, True))


def _racy_kernel_output(submission, n, n_bins, block, seed, skew):
    runs = [(judge.separating_indices(n_, bins_, block_, seed_, skew_), bins_, block_)
            for n_, bins_, block_, seed_, skew_ in MEASURED_RACES]
    outputs = shared_run(submission, "racy", probes.racy_probe, runs, hint=CRASH_HINT)
    return outputs[MEASURED_RACES.index((n, n_bins, block, seed, skew))]


def _check_prediction(submission, n, n_bins, block, seed, measure=True, skew=False):
    judge.rule_no_kernels(submission)
    idx = judge.separating_indices(n, n_bins, block, seed, skew)
    pred = submission.run(probes.race_probe, idx, n_bins, block)
    measured = _racy_kernel_output(submission, n, n_bins, block, seed, skew) if measure else None
    where = f"{n} seeded indices into {n_bins} bins, BLOCK={block}"
    ref, what = judge.racy_target(measured, idx, n_bins, block, where)
    expect_close(pred, ref, what=what, case=where, rtol=0, atol=0,
                 variants=judge.racy_variants(idx, n_bins, block))


@pytest.mark.task("8.1", points=1)
@pytest.mark.parametrize(("n", "n_bins", "block", "seed"),
                         [(2000, 200, 256, 1), (1000, 64, 64, 2), (37, 24, 16, 3), (60, 10, 2, 4)],
                         ids=["2000_into_200_BLOCK256", "1000_into_64_BLOCK64",
                              "ragged_37_BLOCK16", "BLOCK2"])
def test_predict_racy_histogram(submission, n, n_bins, block, seed):
    _check_prediction(submission, n, n_bins, block, seed)


@pytest.mark.task("8.1", points=1)
def test_predict_racy_histogram_skewed(submission):
    # Most indices fall into the first bins, the last bins are rare: counts of 0, 1 and many.
    _check_prediction(submission, 500, 16, 32, 5, skew=True)


@pytest.mark.task("8.1", points=2)
@pytest.mark.parametrize(("n", "n_bins", "block"), [(1000, 150, 100), (50, 7, 3), (40, 12, 13)],
                         ids=["BLOCK100", "BLOCK3", "ragged_40_BLOCK13"])
def test_predict_racy_histogram_any_block(submission, n, n_bins, block):
    # Blocks that are not powers of two: no kernel can run them, the rule still holds.
    _check_prediction(submission, n, n_bins, block, 6, measure=False)


# -- Task 8.2: the atomic histogram ---------------------------------------------------------------
def _check_histogram(submission, idx, n_bins, block, where):
    buf = run_guarded(submission, probes.hist_probe, idx, n_bins, block, hint=CRASH_HINT)
    judge.check_histogram(buf, idx, n_bins, block, probes.hist_guard(block), where)


@pytest.mark.task("8.2", points=1)
@pytest.mark.parametrize(("n", "n_bins", "block", "seed"),
                         [(2000, 8, 256, 11), (1000, 64, 64, 12), (37, 5, 16, 13), (5, 4, 64, 14)],
                         ids=["2000_into_8_BLOCK256", "1000_into_64_BLOCK64", "ragged_37_BLOCK16",
                              "n_below_BLOCK"])
@pytest.mark.rule("atomics", "mask-query-tail")
def test_histogram_atomic(submission, n, n_bins, block, seed):
    idx = torch.randint(0, n_bins, (n,), generator=seeded_generator(seed))
    _check_histogram(submission, idx, n_bins, block,
                     f"{n} seeded indices into {n_bins} bins, BLOCK={block}")


@pytest.mark.task("8.2", points=2)
@pytest.mark.rule("atomics")
def test_histogram_atomic_one_bin(submission):
    # The worst contention there is: every lane of every program adds into bin 3.
    idx = torch.full((300,), 3, dtype=torch.int64)
    _check_histogram(submission, idx, 5, 128, "300 indices all equal to 3 (5 bins), BLOCK=128")


# -- Task 8.3: the backward kernel ----------------------------------------------------------------
FAR_OUT = Case("far_out_of_bounds", B=2, Q=6, M=2, D=4, shapes=((5, 7),), K=2, loc_lo=-0.5,
               loc_hi=1.5, seed=3)
# (case, BLOCK_Q): ragged last blocks (Q = 7 = 4 + 3, Q = 6 = 4 + 2), one block wider than Q
# (Q = 5 < 8), one exact block (Q = 4). A quarter of FAR_OUT's samples have all four corners out.
FP32_RUNS = [(MULTI_LEVEL, 8), (SINGLE, 4), (OUT_OF_BOUNDS, 4), (STANDARD_CASES[3], 4),
             (FAR_OUT, 4)]
OUTPUTS = ("grad_attn", "grad_loc", "grad_value")


def _check_kernel_output(submission, output, case, block_q, inputs=None, grad_out=None,
                         variants=None, key=None):
    """Case -> one kernel run (shared by the three outputs' tests) -> that output's buffer:
    guards intact, every element written, close to fp32 autograd of the reference."""
    inputs = inputs if inputs is not None else make_inputs(case, torch.float32)
    grad_out = grad_out if grad_out is not None else upstream(case)
    buffers = shared_run(submission, key or (case.id, block_q), probes.kernel_probe, inputs,
                         grad_out, block_q, hint=CRASH_HINT)
    judge.check_gradient_buffer(
        buffers, output, inputs, grad_out, block_q,
        where=f"{case.describe()} in float32, BLOCK_Q={block_q}",
        variants=variants if variants is not None else grad_variants(inputs, grad_out, output))


@pytest.mark.task("8.3", points=1)
@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize(("case", "block_q"), FP32_RUNS, ids=[c.id for c, _ in FP32_RUNS])
@pytest.mark.rule(
    "mask-query-tail", "mask-channel-tail", "mask-corners", "zero-padding", "half-pixel", "floor",
    "xy-order", "level-starts", "write-once", "fp32-accumulation",
)
def test_backward_kernel(submission, case, block_q, output):
    _check_kernel_output(submission, output, case, block_q)


SHARED = Case("shared_pixels", B=1, Q=8, M=1, D=4, shapes=((4, 5),), K=1, seed=5)


@pytest.mark.task("8.3", points=2)
@pytest.mark.rule("atomics")
def test_backward_kernel_shared_pixels(submission):
    # Eight queries sample the very same point with the same weight and the same upstream
    # gradient, four per program: each of its four pixels must receive eight equal shares, four
    # of them from lanes of the same program at the same moment.
    case, block_q = SHARED, 4
    inputs, grad_out, variants = judge.shared_pixels(case, upstream(case), block_q)
    _check_kernel_output(submission, "grad_value", case, block_q, inputs, grad_out, variants,
                         key="shared_pixels")


CROWDED = Case("crowded_level", B=1, Q=16, M=1, D=4, shapes=((2, 3),), K=2, loc_lo=-0.1,
               loc_hi=1.1, seed=9)


@pytest.mark.task("8.3", points=3)
@pytest.mark.rule("atomics")
def test_backward_kernel_crowded_level(submission):
    # Sixteen queries, one program, a level of six pixels: in every (l, k) step many lanes of the
    # program add into the same pixel at once. Only an atomic add keeps all their shares.
    try:
        _check_kernel_output(submission, "grad_value", CROWDED, 16)
    except AssertionError as exc:
        if "this is exactly" in str(exc):
            raise
        raise AssertionError(
            f"{exc}; here many lanes of one program add into the same pixel at once: if your "
            f"other grad_value tests pass, the scatter loses updates (use tl.atomic_add)"
        ) from None


# Two batches of one 16384 x 16384 level with M * D = 12: batch 1 starts at element 12 * 2**28 of
# value and of grad_value, past 2**31. Both are sparse files mapped into memory (bigcase.py).
BIG = BigCase("int64_offsets", B=2, Q=6, M=2, D=6, K=2,
              corners=(((1 << 14) - 12, (1 << 14) - 20), (4, 8)), seed=81)


@pytest.mark.task("8.3", points=2)
@pytest.mark.rule("int64-offsets")
def test_backward_kernel_int64_offsets(submission):
    block_q = 4
    # int32 offsets are named only when the same samples on a small level come out right.
    judge_big(lambda case: run_guarded(submission, probes.big_probe, case, block_q,
                                       hint=CRASH_HINT),
              lambda res, case: judge.check_big_gradients(res, case, block_q), BIG)


# -- through the given wrapper: half precision, the fp32 accumulator, the contract of lab 10 ------
def _check_wrapper(submission, case, dtype, *, starts=True, **kwargs):
    inputs = make_inputs(case, dtype)
    grad_out = upstream(case).to(dtype)
    res = judge.bf16_atomics_hint(
        dtype, lambda: run_guarded(submission, probes.wrapper_probe, inputs, grad_out, starts,
                                   kwargs, hint=CRASH_HINT))
    args = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    what = f"msda_backward({'level_start_index=None, ' if not starts else ''}{args})"
    res = judge.launched_backward_kernel(res, what)
    judge.check_three_gradients(res, inputs, grad_out, dtype, what=what,
                                where=f"{case.describe()} in {str(dtype).replace('torch.', '')}",
                                named=True)


@pytest.mark.task("8.3", points=2)
@pytest.mark.parametrize(("dtype", "fp32_grad_accum"),
                         [("float16", False), ("float16", True), ("bfloat16", True)],
                         ids=["fp16", "fp16_fp32_accum", "bf16_fp32_accum"])
@pytest.mark.rule("fp32-accumulation", "accumulator-switch")
def test_backward_half_precision(submission, dtype, fp32_grad_accum):
    # bf16 only through the fp32 accumulator here: the interpreter has no bf16 atomic add (the GPU
    # stage runs the bf16 buffer too). Arithmetic must be fp32 whatever the dtype.
    _check_wrapper(submission, OUT_OF_BOUNDS, getattr(torch, dtype), BLOCK_Q=4,
                   fp32_grad_accum=fp32_grad_accum)


@pytest.mark.task("8.3", points=1)
def test_backward_wrapper_defaults(submission):
    # As lab 10 calls it: level_start_index=None and the default BLOCK_Q (16 > Q).
    _check_wrapper(submission, OUT_OF_BOUNDS, torch.float32, starts=False)


# -- Task 8.4: on a real GPU ----------------------------------------------------------------------
@pytest.mark.task("8.4", points=2)
@pytest.mark.stage("gpu")
def test_race_at_scale_on_gpu(submission):
    racy, atomic = run_guarded(submission, probes.gpu_race_probe, hint=CRASH_HINT)
    n, bins = probes.RACE_N, probes.RACE_BINS
    exact = torch.bincount(probes.race_indices(), minlength=bins).float()
    expect_close(atomic, exact, what="histogram_atomic on the GPU", rtol=0, atol=0,
                 case=f"{n:,} seeded indices into {bins} bins, BLOCK=256")
    kept = float(racy.sum())
    add_note(submission, f"race on the GPU: the racy histogram kept {kept:,.0f} of {n:,} "
                         f"updates ({100 * (1 - kept / n):.2f}% lost); the atomic one kept "
                         f"all of them")
    # Every block of 256 holds duplicate bins, so even one program alone loses updates.
    assert kept < n, f"the racy histogram kept all {n:,} updates on the GPU"


GPU_BACKWARDS = [("float32", False), ("float16", False), ("bfloat16", True), ("bfloat16", False)]


@pytest.mark.task("8.4", points=2)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize(("dtype", "fp32_grad_accum"), GPU_BACKWARDS,
                         ids=["fp32", "fp16", "bf16_fp32_accum", "bf16_native_atomics"])
def test_backward_decoder_on_gpu(submission, dtype, fp32_grad_accum):
    case, torch_dtype = DECODER, getattr(torch, dtype)
    res = run_guarded(submission, probes.gpu_backward_probe, case, dtype, fp32_grad_accum,
                      hint=CRASH_HINT)
    judge.check_three_gradients(
        res, make_inputs(case, torch_dtype), upstream(case).to(torch_dtype), torch_dtype,
        what="msda_backward", where=f"{case.describe()} in {dtype}, "
                                    f"fp32_grad_accum={fp32_grad_accum}", suffix=" on the GPU")


# -- Task 8.4: speed, against autograd of the PyTorch reference -----------------------------------
# Timed on the judge's clock (msda_labs.grading.judge.speedjudge): the judge sends a fresh seed,
# your child draws 16 new input sets (and upstream gradients) from it on the GPU, calls
# msda_backward on each and sends back a checksum of every call's three gradients; the judge's clock
# runs from the seed to the checksums. Two calls of every round, picked at random afterwards, are
# checked in full against the reference's gradients (the checksums bind every call to its output).
# The baseline is the backward of the grid_sample reference through autograd (every copy of the kit
# carries it; the lab 08 chip, absent from an exported lab 08, is only reported): its forward +
# backward less its forward alone, both timed the same way by the judge in a process that never
# loaded your module. fp32: atomics of the element type on every GPU. grid_sample adds every channel
# of every corner with its own atomic and copies the pyramid twice more; a kernel that follows the
# lab adds rows of D channels at once, so "no slower than the reference" is generous to right work
# and still fails a kernel that sleeps or serializes.
SPEED_CASE, SPEED_DTYPE = DECODER, "float32"
SPEED_LIMIT = REFERENCE_LIMIT  # your backward's time / the reference's backward's
SPEED_VERIFIED = 2  # calls of each timed round checked in full


def speed_baselines() -> dict:
    """The calls the judge times beside yours, on each timed input set: the reference's forward
    + backward, its forward alone, and the lab 08 chip where this copy of the kit carries it."""
    chip = chip_function("lab08", "msda_backward")

    def reference(value, shapes, _starts, loc, attn, grad):
        leaves = tuple(t.detach().requires_grad_() for t in (value, loc, attn))
        out = msda_reference(leaves[0], shapes, leaves[1], leaves[2])
        return torch.autograd.grad(out, leaves, grad)

    def reference_forward(value, shapes, _starts, loc, attn, _grad):
        with torch.no_grad():
            return msda_reference(value, shapes, loc, attn)

    return {"reference": reference, "reference_forward": reference_forward,
            "chip": None if chip is None else (lambda *inputs: chip(*inputs))}


# Before the stage's first test, one child makes these calls at once, in threads, so that their
# kernels compile in parallel, and the judge compiles its baselines meanwhile
# (grading.judge.plugin); nothing of it is graded.
COMPILE_AHEAD = [(probes.gpu_race_probe, ()),
                 *((probes.gpu_backward_probe, (DECODER, dtype, flag))
                   for dtype, flag in GPU_BACKWARDS)]
JUDGE_COMPILE_AHEAD = [(SPEED_CASE, SPEED_DTYPE, "backward", speed_baselines)]


@pytest.mark.task("8.4", points=2)
@pytest.mark.stage("gpu")
def test_backward_speed_against_the_reference(submission):
    case, dtype_name = SPEED_CASE, SPEED_DTYPE
    dtype = getattr(torch, dtype_name)
    where = f"{case.describe()} in {dtype_name}"

    def truth(inputs):
        value, shapes, _starts, loc, attn, grad = inputs
        return reference_grads(value, shapes, loc, attn, grad)

    def close(res, refs, what):
        # the timed tolerance (speedjudge.TIMED_SLACK): many fresh input sets reach the tail of
        # fp32's own rounding, which the correctness tests grade on one
        rtol, atol = timed_tolerance(dtype)
        for name, got, ref in zip(judge.NAMES, res, refs):
            # grad_loc: a few elements may fall on the other side of a pixel border
            check = expect_close_but_borders if name == "grad_loc" else expect_close
            kwargs = {} if name == "grad_loc" else {"backward": True}
            check(got, ref, what=f"msda_backward {name} ({what}) on the GPU", case=where,
                  dtype=dtype, expect_dtype=dtype, rtol=rtol, atol=atol, **kwargs)

    measured = judge_msda_speed(submission, case, dtype_name, fn="msda_backward",
                                call="backward", truth=truth, close=close,
                                baselines=speed_baselines(), verify=SPEED_VERIFIED,
                                limits=[Limit("yours", "reference", SPEED_LIMIT,
                                              minus="reference_forward")])
    check_reference_speed(
        measured, what=f"msda_backward on {where}",
        reference_label="the backward of the PyTorch reference (grid_sample, autograd)",
        chip_label="the lab 08 chip", limit=SPEED_LIMIT, submission=submission)
