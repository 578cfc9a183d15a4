"""Grading tests of lab 06 (make it fast). Run them with `nox -s lab06` (and `nox -s lab06-gpu`).

The interpreter stage checks what the CPU can judge honestly: the chunked kernel's output for
every channel-chunk width (dividing D, not dividing it, larger than it), that each program writes
its own tile and nothing else, and the autotuner's declared search space and meta-dependent grid.
Speed is only claimed on a GPU: the GPU stage races the tilings and the tuned kernel on the
judge's clock, at the encoder's size. The probes the child runs are
in probes_lab06.py; the rules about configs, ratios and reports in judge_lab06.py.
"""

from functools import lru_cache

import judge_lab06 as judge
import probes_lab06 as probes
import pytest
import torch

from msda_labs.grading import expect_close
from msda_labs.grading.judge.bigcase import BigCase, judge_big
from msda_labs.grading.judge.compare import Mismatch
from msda_labs.grading.judge.peaked import (
    FP16_ACC_MESSAGE,
    PEAKED,
    accumulator_near,
    fp16_running_sum,
    peaked_inputs,
)
from msda_labs.grading.judge.probes import run_guarded, shared_run
from msda_labs.grading.judge.results import Evidence
from msda_labs.grading.judge.rules import watch_untouched
from msda_labs.grading.speed.speedstats import Limit
from msda_labs.truth.cases import DECODER, DEVICE_BOUND, STANDARD_CASES, Case
from msda_labs.truth.reference import msda_reference

TASKS = {"6.1": "msda_forward_chunked_kernel", "6.2": "autotune"}

# Ragged everywhere: Q=5 against BLOCK_Q=4, D=6 (not a power of two), two levels, locations
# partly outside the image.
CHUNK_CASE = Case("ragged_chunks", B=1, Q=5, M=2, D=6, shapes=((5, 6), (3, 3)), K=2,
                  loc_lo=-0.2, loc_hi=1.2, seed=6)
CHUNK_WIDTHS = {2: "CHUNK_D=2 divides D=6", 4: "CHUNK_D=4 leaves a ragged last chunk of D=6",
                8: "CHUNK_D=8 is larger than D=6"}
# For the autotuner: Q=70 is larger than every tile (the configs' 16, 32 and 64 and the tests'
# 4 and 16), so a grid hard-coded to any tile size leaves queries unwritten; 70 is ragged for
# each of them (eighteen blocks of 4, the last of 2; five of 16, the last of 6).
TUNE_CASE = Case("tune", B=1, Q=70, M=2, D=6, shapes=((4, 5), (2, 3)), K=2, seed=16)
RACE_CHUNKS = (2, 4, 8, 16, 32)  # GPU stage
# The races between your own launches (the tilings, autotuned against fixed) are about device
# work; the judge's clock times what a caller waits, host dispatch included, so they run on the
# encoder's size (22,223 queries, DEVICE_BOUND), where the kernels, not their launches, take the
# time.
SPEED_CASE, SPEED_DTYPE = DEVICE_BOUND, "float16"


def _run_chunked(submission, case, dtype, block_q, chunk_d, what):
    res = submission.run(probes.launch_chunked, judge.case_inputs(case, dtype), block_q, chunk_d)
    judge.check_guards(res, f"{what} on {case.describe()}")
    judge.expect_forward(res["out"], case, dtype, what, chunk_d)


# -- Task 6.1: the chunked kernel, in the interpreter ---------------------------------------------
@pytest.mark.task("6.1", points=1)
@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
@pytest.mark.rule(
    "mask-corners", "zero-padding", "half-pixel", "floor", "xy-order", "level-starts",
    "mask-channel-tail",
)
def test_chunked_matches_reference(submission, case):
    # CHUNK_D=2 splits every head (D = 3, 4, 5: ragged for the odd ones); BLOCK_Q=8 > Q.
    _run_chunked(submission, case, torch.float32, 8, 2,
                 "msda_forward_chunked_kernel (BLOCK_Q=8, CHUNK_D=2)")


@pytest.mark.task("6.1", points=2)
@pytest.mark.parametrize("chunk_d", list(CHUNK_WIDTHS), ids=lambda c: f"CHUNK_D={c}")
@pytest.mark.rule(
    "mask-channel-tail", "mask-query-tail", "write-once", "zero-padding", "level-starts",
)
def test_every_chunk_width(submission, chunk_d):
    _run_chunked(submission, CHUNK_CASE, torch.float32, 4, chunk_d,
                 f"msda_forward_chunked_kernel (BLOCK_Q=4, {CHUNK_WIDTHS[chunk_d]})")


@pytest.mark.task("6.1", points=2)
@pytest.mark.rule("write-once")
def test_program_owns_one_tile(submission):
    # Launch only the programs with pid_q = 0 and pid_d = 0: together they own queries 0..3 and
    # channels 0..1 of every (b, m). Everything else must still hold the NaN it started with.
    case, block_q, chunk_d = CHUNK_CASE, 4, 2
    grid = (1, case.B * case.M, 1)
    res = submission.run(probes.launch_chunked, judge.case_inputs(case, torch.float32), block_q,
                         chunk_d, grid)
    what = (f"msda_forward_chunked_kernel launched on the grid {grid} only (BLOCK_Q={block_q}, "
            f"CHUNK_D={chunk_d})")
    judge.check_guards(res, f"{what} on {case.describe()}")
    out = judge.check_tile(res["out"], case, block_q, chunk_d, what)
    ref = judge.reference(case, torch.float32).view(out.shape)
    expect_close(out[:, :block_q, :, :chunk_d].contiguous(),
                 ref[:, :block_q, :, :chunk_d].contiguous(), dtype=torch.float32,
                 what=f"{what}, inside the tile", case=case.describe())


def _fp16_results(submission):
    """Both half-precision launches in one child process (the interpreter's per-process setup
    is paid once); a crash or an exception is served to both tests alike."""
    runs = [(judge.case_inputs(CHUNK_CASE, torch.float16), 4, 4), (peaked_inputs(), 4, 4)]
    value = shared_run(submission, "fp16", probes.launch_each, runs, hint="")
    if not isinstance(value, list) or len(value) != 2:
        raise AssertionError("the half-precision probe returned no results")
    return value


@pytest.mark.task("6.1", points=1)
@pytest.mark.rule("fp32-accumulation")
def test_chunked_half_precision(submission):
    # fp16 in and out, fp32 inside: within the fp16 tolerance of the fp64 reference.
    res = _fp16_results(submission)[0]
    what = "msda_forward_chunked_kernel in float16 (BLOCK_Q=4, CHUNK_D=4)"
    judge.check_guards(res, f"{what} on {CHUNK_CASE.describe()}")
    judge.expect_forward(res["out"], CHUNK_CASE, torch.float16, what, 4)


@pytest.mark.task("6.1", points=1)
@pytest.mark.rule("fp32-accumulation")
def test_chunked_accumulates_in_fp32(submission):
    # 64 points per query, one carrying 98% of the weight: an fp16 running sum drops the rest.
    inputs = peaked_inputs()
    what = "msda_forward_chunked_kernel in float16 (BLOCK_Q=4, CHUNK_D=4)"
    res = _fp16_results(submission)[1]
    judge.check_guards(res, f"{what} on {PEAKED.describe()}")
    value, shapes, _starts, loc, attn = inputs
    ref = msda_reference(value.double(), shapes, loc.double(), attn.double())
    # The fp16 running sum is only computed for a wrong result, and named only when the output
    # is that sum's (exactly, or within four fp16 steps of it).
    expect_close(res["out"], ref, what=what, case=PEAKED.describe(), dtype=torch.float16,
                 expect_dtype=torch.float16,
                 variants=lambda: {"fp16_acc": (fp16_running_sum(inputs), FP16_ACC_MESSAGE)},
                 near=lambda: accumulator_near(inputs))


@pytest.mark.task("6.1", points=1)
def test_wrapper_defaults(submission):
    case = STANDARD_CASES[0]
    res = submission.run(probes.wrapper_defaults, judge.case_inputs(case, torch.float32))
    what = "msda_forward_chunked with its defaults (BLOCK_Q=32, CHUNK_D=None)"
    judge.expect_forward(_ran_chunked_kernel(submission, res, what), case, torch.float32, what)


def _ran_chunked_kernel(submission, res, what):
    """The output of a probe that ran a launcher, once it is clear that the launcher ran the
    lab's kernel (lab 05's msda_forward in its place earns nothing here). The launches are
    recorded in the student's process: believed only of a source that cannot reach the record."""
    launched = res.get("launched", []) if isinstance(res, dict) else []
    if "msda_forward_chunked_kernel" not in launched:
        raise AssertionError(f"{what} launched {launched or 'no Triton kernel'}, not "
                             f"msda_forward_chunked_kernel: the launcher runs your kernel; a "
                             f"stand-in earns nothing here")
    watch_untouched(submission.source, f"which kernel {what} launched")
    return res["out"]


# Two batches of one 16384 x 16384 level with M * D = 12: batch 1 starts at value element
# 12 * 2**28, past 2**31. The value is a sparse file mapped into memory (see bigcase.py); each
# chunk width the lab grades is launched on it, all in one child process.
BIG = BigCase("int64_offsets", B=2, Q=6, M=2, D=6, K=2,
              corners=(((1 << 14) - 12, (1 << 14) - 20), (4, 8)), seed=61)


@lru_cache(maxsize=1)
def _big_reference(case):
    value, shapes, _starts, loc, attn = case.small_inputs()
    return msda_reference(value.double(), shapes, loc.double(), attn.double())


@pytest.mark.task("6.1", points=2)
@pytest.mark.rule("int64-offsets")
def test_int64_offsets_every_chunk_width(submission):
    block_q = 8  # one query block: the offsets, not the tiling, are on trial here

    def run(case):
        return run_guarded(submission, probes.big_probe, case, block_q, tuple(CHUNK_WIDTHS))

    def check(results, case):
        for chunk_d, width in CHUNK_WIDTHS.items():
            res = results[str(chunk_d)] if isinstance(results, dict) else None
            what = (f"msda_forward_chunked_kernel (BLOCK_Q={block_q}, CHUNK_D={chunk_d}; "
                    f"{width.replace('D=6', f'D={case.D}')})")
            if res is None:
                raise AssertionError(f"{what}: the probe returned no output")
            judge.check_guards(res, f"{what} on {case.describe()}")
            expect_close(res["out"], _big_reference(BIG), what=what, case=case.describe(),
                         dtype=torch.float32, expect_dtype=torch.float32)

    # int32 offsets are named only when the same samples on a small level come out right.
    judge_big(run, check, BIG)


# -- Task 6.2: autotune, in the interpreter -------------------------------------------------------
@pytest.mark.task("6.2", points=2)
def test_autotune_config_space(submission):
    problems = judge.autotune_problems(submission.run(probes.config_space))
    if problems:
        message = "autotune search space: " + "; ".join(problems)
        # Read off the declarations, not guessed: named only when the one problem is pairs
        # missing from an otherwise well-formed space.
        if len(problems) == 1 and problems[0].startswith(judge.SPACE_LACKS_PAIRS):
            named = f"{judge.SPACE_LACKS}: {problems[0]}"
            raise Mismatch(f"{message}; this is {named}",
                           Evidence(function="forward_configs", named=named))
        raise AssertionError(message)
    # What the declarations are is read in your process: believed only where the judge reads in
    # your source that nothing there can reach the objects the probe inspects.
    watch_untouched(submission.source, "what forward_configs() and make_autotuned_forward() "
                                       "declare")


@pytest.mark.task("6.2", points=2)
@pytest.mark.parametrize("block_q", [4, 16], ids=lambda b: f"BLOCK_Q={b}")
def test_autotuned_launch(submission, block_q):
    case = TUNE_CASE
    ref = judge.reference(case, torch.float32)
    assert bool((ref != 0).all()), "grader self-check: this case must have no zero outputs"
    res = submission.run(probes.autotuned_run, judge.case_inputs(case, torch.float32), block_q)
    what = (f"msda_forward_autotuned with a one-config kernel (BLOCK_Q={block_q}, "
            f"num_warps=1)")
    if isinstance(res, dict) and res.get("benchmarked"):
        judge.raise_benchmarked(res, what)
    res = _ran_chunked_kernel(submission, res, what)
    try:
        expect_close(res, ref, what=what, case=case.describe(), dtype=torch.float32,
                     expect_dtype=torch.float32)
    except Mismatch as err:
        hint = judge.grid_hint(res, ref, case, block_q)
        if hint:
            err.evidence.named = hint
            raise Mismatch(f"{err}; this is {hint}", err.evidence) from None
        raise


# -- GPU stage: correct at the decoder size first, then fast --------------------------------------
# Before the stage's first test, one child makes every launch below at once, in threads, so that
# their kernels compile in parallel (grading.judge.probes.compile_ahead); the judge compiles the
# chip meanwhile. Nothing of that is graded.
BF16_CHUNKS = (None, 2)
COMPILE_AHEAD = [
    *((probes.gpu_outputs, (DECODER, torch.float16, (c,))) for c in RACE_CHUNKS),
    *((probes.gpu_outputs, (DECODER, torch.bfloat16, (c,))) for c in BF16_CHUNKS),
    *((probes.gpu_config, (DECODER, i)) for i in range(judge.MAX_CONFIGS)),
]
JUDGE_COMPILE_AHEAD = [
    (SPEED_CASE, SPEED_DTYPE, "forward", lambda: {"chip": judge.chip_baseline()[0]}),
]


def _check_outputs(outputs, case, dtype, what):
    for chunk, out in outputs.items():
        judge.expect_forward(out, case, dtype, f"{what} (CHUNK_D={chunk})")


@pytest.mark.stage("gpu")
@pytest.mark.task("6.1", points=2)
def test_gpu_chunked_correct_at_decoder_size(submission):
    outputs = submission.run(probes.gpu_outputs, DECODER, torch.float16, RACE_CHUNKS)
    _check_outputs(outputs, DECODER, torch.float16, "msda_forward_chunked, fp16 on the GPU")
    # bf16 on a real GPU (the interpreter cannot do bf16 arithmetic), wide and narrow.
    outputs = submission.run(probes.gpu_outputs, DECODER, torch.bfloat16, BF16_CHUNKS)
    _check_outputs(outputs, DECODER, torch.bfloat16, "msda_forward_chunked, bf16 on the GPU")


@pytest.mark.stage("gpu")
@pytest.mark.task("6.1", points=3)
def test_gpu_race_wide_beats_narrow(submission):
    # Every raced launch is checked on the judge's clock itself: one call of each round, in full,
    # and every checksum (a wrong kernel's time proves nothing).
    res = _on_the_judges_clock(submission, {}, {
        str(c): {"fn": "msda_forward_chunked", "kwargs": {"CHUNK_D": c}} for c in RACE_CHUNKS},
        primary=str(DECODER.D), verify=1, with_chip=False,  # a race of your own launches
        limits=[Limit("2", str(DECODER.D), judge.RACE_MIN_RATIO, at_least=True,
                      ideal=2 * judge.RACE_MIN_RATIO)])
    judge.race_verdict(submission, res, SPEED_CASE, RACE_CHUNKS)


@pytest.mark.stage("gpu")
@pytest.mark.task("6.1", points=2)
def test_gpu_speed_against_chip(submission):
    res = submission.run(probes.gpu_speed, DECODER)
    judge.expect_forward(res["out"], DECODER, torch.float16,
                         "msda_forward_chunked with its defaults (the wide tiling) on the GPU")
    chip, res["baseline"] = judge.chip_baseline()
    if chip is None:
        raise AssertionError(f"speed of msda_forward_chunked: no baseline: {res['baseline']}")
    res = _on_the_judges_clock(submission, res, {"yours": {"fn": "msda_forward_chunked"}},
                               verify=1,
                               limits=[Limit("yours", "chip", judge.CHIP_MAX_RATIO, ideal=1.0)])
    judge.wide_speed_verdict(submission, res)


@pytest.mark.stage("gpu")
@pytest.mark.task("6.2", points=2)
def test_gpu_autotuned_vs_fixed_and_chip(submission):
    res = submission.run(probes.gpu_autotune, DECODER)
    judge.expect_forward(res["out"], DECODER, torch.float16,
                         "msda_forward_autotuned (default configs) on the GPU")
    res["baseline"] = judge.chip_baseline()[1]
    res = _on_the_judges_clock(submission, res, {
        "autotuned": {"fn": "msda_forward_autotuned", "make": "make_autotuned_forward"},
        "fixed": {"fn": "msda_forward_chunked"}}, verify=1,
        limits=[Limit("autotuned", "fixed", judge.TUNED_MAX_RATIO, ideal=1.0),
                Limit("autotuned", "chip", judge.CHIP_MAX_RATIO, ideal=1.0)])
    judge.autotune_speed_verdict(submission, res)


# The times these three tests grade come from the judge's clock
# (msda_labs.grading.judge.speedjudge): each variant runs 16 calls a round on input sets drawn from
# a seed your child sees only when the clock starts, one output of every round checked in full and
# every checksum checked; the chip runs the same protocol in the judge, never in your process. They
# run at the encoder's size (DEVICE_BOUND), where the kernels, not their launches, take the time.
def _on_the_judges_clock(submission, res, variants, case=SPEED_CASE, primary=None,
                         verify=None, limits=(), with_chip=True):
    """``res`` with the judge's times of ``variants`` of your module on ``case`` in fp16
    (``verify`` calls of each round checked; None: all) and of the chip (as "chip"; left out
    without ``with_chip``)."""
    from msda_labs.grading.judge.speedjudge import judge_msda_speed

    chip = judge.chip_baseline()[0] if with_chip else None
    desc = f"{case.describe()} in {SPEED_DTYPE}"

    def close(out, expected, what):
        expect_close(out, expected, what=f"msda_forward ({what}) on the GPU", case=desc,
                     dtype=torch.float16, expect_dtype=torch.float16)

    def truth(inputs):
        value, shapes, _starts, loc, attn = inputs
        return msda_reference(value.double(), shapes, loc.double(), attn.double())

    judged = judge_msda_speed(
        submission, case, SPEED_DTYPE, fn=next(iter(variants.values()))["fn"],
        variants=variants, truth=truth, close=close, primary=primary, verify=verify,
        baselines={"chip": chip}, limits=limits)
    times = judged["times_us"]
    return {**res, **{k: v for k, v in judged.items() if k != "times_us"},
            "times_us": times, "e2e_us": times}
