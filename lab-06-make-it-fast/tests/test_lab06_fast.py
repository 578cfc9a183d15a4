"""Grading tests of lab 06 (make it fast). Run them with `nox -s lab06` (and `nox -s lab06-gpu`).

The interpreter stage checks what the CPU can judge honestly: the chunked kernel's output for
every channel-chunk width (dividing D, not dividing it, larger than it), that each program writes
its own tile and nothing else, and the autotuner's declared search space and meta-dependent grid.
Speed is only claimed on a GPU: the GPU stage races the tilings and the tuned kernel, with device
time from CUDA-graph replay, L2 flushed, side by side in one run.
"""

import json
import os
from functools import lru_cache
from pathlib import Path

import pytest
import torch

from msda_labs.grading import expect_close
from msda_labs.grading.bandwidth import bandwidth_table, effective_bandwidth_gbs, forward_bytes
from msda_labs.grading.bigcase import INT64_HINT, BigCase
from msda_labs.grading.guards import cdiv, guarded, run_probe
from msda_labs.grading.peaked import (
    ACC_HINT,
    FP16_ACC_MESSAGE,
    PEAKED,
    fp16_running_sum,
    peaked_inputs,
)
from msda_labs.grading.plugin import SubmissionProblem
from msda_labs.mistakes import msda_variants
from msda_labs.truth.cases import DECODER, STANDARD_CASES, Case, make_inputs
from msda_labs.truth.reference import msda_reference

LAB = "lab06"
TITLE = "Make it fast"
MODE = "interpret"
TASKS = {"6.1": "msda_forward_chunked_kernel", "6.2": "autotune"}

# Ragged everywhere: Q=5 against BLOCK_Q=4, D=6 (not a power of two), two levels, locations
# partly outside the image.
CHUNK_CASE = Case("ragged_chunks", B=1, Q=5, M=2, D=6, shapes=((5, 6), (3, 3)), K=2,
                  loc_lo=-0.2, loc_hi=1.2, seed=6)
CHUNK_WIDTHS = {2: "CHUNK_D=2 divides D=6", 4: "CHUNK_D=4 leaves a ragged last chunk of D=6",
                8: "CHUNK_D=8 is larger than D=6"}
# For the autotuner: Q=9 is three blocks of 4 (the last ragged) or one block of 16.
TUNE_CASE = Case("tune", B=1, Q=9, M=2, D=6, shapes=((4, 5), (2, 3)), K=2, seed=16)
GUARD = 4096  # elements of padding around the buffers the grader launches on

# GPU stage.
RACE_CHUNKS = (2, 4, 8, 16, 32)
RACE_MIN_RATIO = 1.5  # narrow time / wide time; the paper saw about 7x, lab 03 predicts ~16x
TUNED_MAX_RATIO = 1.5  # autotuned time / your fixed-config time
CHIP_MAX_RATIO = 3.0  # your time / the chip's, device time and end-to-end alike


# -- probes: run inside the isolated child -----------------------------------------------------


def _guarded(shape, fill, dtype, device, src=None):
    """A view of ``shape`` in the middle of a ``fill``-ed buffer with GUARD elements each side."""
    return guarded(shape, fill, dtype, device, GUARD, src)


def _launch_chunked(module, inputs, block_q, chunk_d, grid=None):
    """Probe: the kernel on guarded inputs, writing into an output pre-filled with NaN.

    Reads just outside value return NaN; writes just outside the output land in NaN guards that
    come back too. ``grid`` defaults to the wrapper's (cdiv(Q, BLOCK_Q), B*M, cdiv(D, CHUNK_D)).
    """
    from msda_labs.student import runtime

    dev = runtime.device()
    value, shapes, starts, loc, attn = (t.to(dev) for t in inputs)
    B, S, M, D = value.shape
    Q, L, K = loc.shape[1], loc.shape[3], loc.shape[4]
    _, value = _guarded(value.shape, float("nan"), value.dtype, dev, value)
    _, loc = _guarded(loc.shape, 0.0, loc.dtype, dev, loc)
    _, attn = _guarded(attn.shape, 0.0, attn.dtype, dev, attn)
    out_buf, out = _guarded((B, Q, M, D), float("nan"), value.dtype, dev)
    if grid is None:
        grid = (cdiv(Q, block_q), B * M, cdiv(D, chunk_d))
    module.msda_forward_chunked_kernel[grid](
        value, shapes, starts, loc, attn, out, Q, S,
        M=M, D=D, L=L, K=K, BLOCK_Q=block_q, CHUNK_D=chunk_d)
    n = out.numel()
    return {"out": out.reshape(B, Q, M * D), "guard_lo": out_buf[:GUARD],
            "guard_hi": out_buf[GUARD + n:]}


def _wrapper_defaults(module, inputs):
    """Probe: the given wrapper with its defaults (BLOCK_Q=32, CHUNK_D=next pow2 of D)."""
    from msda_labs.student import runtime

    dev = runtime.device()
    return module.msda_forward_chunked(*(t.to(dev) for t in inputs))


def _describe_config(cfg):
    return {"kwargs": {str(k): v for k, v in dict(cfg.kwargs).items()},
            "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def _base_function(fn):
    """The Python function under any number of Triton wrappers (JIT, interpreter, autotune)."""
    seen = 0
    while hasattr(fn, "fn") and seen < 10:
        fn, seen = fn.fn, seen + 1
    return fn


def _config_space(module):
    """Probe: what forward_configs() and make_autotuned_forward() declare."""
    configs = module.forward_configs()
    tuned = module.make_autotuned_forward()
    return {
        "type": type(tuned).__name__,
        "configs": [_describe_config(c) for c in configs],
        "tuned_configs": [_describe_config(c) for c in getattr(tuned, "configs", [])],
        "keys": [str(k) for k in getattr(tuned, "keys", [])],
        "arg_names": [str(a) for a in getattr(tuned, "arg_names", [])],
        "wraps_chunked": _base_function(tuned) is _base_function(
            module.msda_forward_chunked_kernel),
    }


def _autotuned_run(module, inputs, block_q):
    """Probe: the launcher through a one-config autotuned kernel (a single config needs no
    benchmarking, which the interpreter cannot do)."""
    import triton

    from msda_labs.student import runtime

    dev = runtime.device()
    kernel = module.make_autotuned_forward([triton.Config({"BLOCK_Q": block_q}, num_warps=1)])
    try:
        return module.msda_forward_autotuned(*(t.to(dev) for t in inputs), kernel=kernel)
    except RuntimeError as exc:
        if "active drivers" not in str(exc):
            raise
        raise RuntimeError(
            "the autotuner tried to benchmark several configs, which the interpreter cannot do; "
            "the grader passed a one-config kernel: make_autotuned_forward(configs) must use the "
            "configs it is given, and msda_forward_autotuned the kernel it is given") from None


def _poison(shape, dtype):
    """Hand the next same-sized CUDA allocation a NaN-filled block (the caching allocator reuses
    the block just freed), so an element a kernel forgets shows as NaN."""
    junk = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
    del junk


def _gpu_outputs(module, case, dtype, chunks, inputs=None):
    """Probe (GPU): the wrapper at each CHUNK_D on the case's inputs, built on the device."""
    if inputs is None:
        inputs = make_inputs(case, dtype, device="cuda")
    shape = (case.B, case.Q, case.M, case.D)
    outs = {}
    for chunk in chunks:
        _poison(shape, dtype)
        outs[str(chunk)] = module.msda_forward_chunked(*inputs, CHUNK_D=chunk)
    torch.cuda.synchronize()
    return outs


def _gpu_race(module, case, chunks):
    """Probe (GPU): outputs, then device times of every CHUNK_D side by side in one run."""
    from msda_labs.grading import timing as bench

    inputs = make_inputs(case, torch.float16, device="cuda")
    outs = _gpu_outputs(module, case, torch.float16, chunks, inputs)
    fns = {str(c): (lambda c=c: module.msda_forward_chunked(*inputs, CHUNK_D=c)) for c in chunks}
    timings = bench.side_by_side(fns)
    times = {k: {"us": t.us, "method": t.method} for k, t in timings.items()}
    return {"outputs": outs, "timings": times,
            "device": torch.cuda.get_device_name()}


def _chip_baseline(candidates):
    """The course's own kernel to time beside yours: the first of ``candidates`` ((lab, name)
    pairs) whose chip this copy of the kit carries (an exported lab carries earlier labs' chips
    only). Loaded as a private copy from the chip's file, so a replaced module in sys.modules
    changes nothing."""
    from msda_labs.grading.timing import chip_function

    for lab_id, name in candidates:
        fn = chip_function(lab_id, name)
        if fn is not None:
            return fn, f"the {lab_id} chip's {name}"
    return None, "none (this copy of the kit has no chip to compare with)"


WIDE_BASELINES = (("lab06", "msda_forward_chunked"), ("lab05", "msda_forward"))
TUNED_BASELINES = (("lab06", "msda_forward_autotuned"), ("lab05", "msda_forward"))


def _gpu_speed(module, case):
    """Probe (GPU): your wide launch (the wrapper's defaults) beside the chip's: outputs, device
    time and end-to-end time per call."""
    from msda_labs.grading import timing as bench

    inputs = make_inputs(case, torch.float16, device="cuda")
    chip, source = _chip_baseline(WIDE_BASELINES)
    shape = (case.B, case.Q, case.M, case.D)
    _poison(shape, torch.float16)
    out = module.msda_forward_chunked(*inputs)
    fns = {"yours": lambda: module.msda_forward_chunked(*inputs)}
    chip_out = None
    if chip is not None:
        _poison(shape, torch.float16)
        chip_out = chip(*inputs)
        fns["chip"] = lambda: chip(*inputs)
    torch.cuda.synchronize()
    timings = bench.side_by_side(fns)
    return {"out": out, "chip_out": chip_out, "baseline": source,
            "timings": {k: {"us": t.us, "method": t.method} for k, t in timings.items()},
            "e2e": bench.end_to_end(fns), "device": torch.cuda.get_device_name()}


def _gpu_autotune(module, case):
    """Probe (GPU): the default-config autotuned launcher (tunes on its first call), timed beside
    your fixed-config wrapper and the chip's kernel."""
    from msda_labs.grading import timing as bench

    inputs = make_inputs(case, torch.float16, device="cuda")
    kernel = module.make_autotuned_forward()
    _poison((case.B, case.Q, case.M, case.D), torch.float16)
    out = module.msda_forward_autotuned(*inputs, kernel=kernel)
    torch.cuda.synchronize()
    fns = {"autotuned": lambda: module.msda_forward_autotuned(*inputs, kernel=kernel),
           "fixed": lambda: module.msda_forward_chunked(*inputs)}
    baseline, source = _chip_baseline(TUNED_BASELINES)
    if baseline is not None:
        fns["chip"] = lambda: baseline(*inputs)
    timings = bench.side_by_side(fns)
    e2e = bench.end_to_end(fns)
    best = getattr(kernel, "best_config", None)
    times = {k: {"us": t.us, "method": t.method} for k, t in timings.items()}
    return {"out": out, "timings": times, "e2e": e2e,
            "best_config": _describe_config(best) if best is not None else None,
            "n_configs": len(getattr(kernel, "configs", [])), "baseline": source,
            "device": torch.cuda.get_device_name()}


# -- judge side -----------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _case_inputs(case, dtype):
    return make_inputs(case, dtype)


@lru_cache(maxsize=8)
def _reference(case, dtype):
    """fp64 reference from the inputs rounded to ``dtype`` (what the kernel actually read)."""
    value, shapes, _starts, loc, attn = _case_inputs(case, dtype)
    if case.B * case.S * case.M * case.D > 1_000_000:  # the GPU sizes: fp32 is plenty there
        return msda_reference(value.float(), shapes, loc.float(), attn.float())
    return msda_reference(value.double(), shapes, loc.double(), attn.double())


def _first_chunk_only(ref, case, chunk_d):
    out = ref.clone().view(case.B, case.Q, case.M, case.D)
    out[..., chunk_d:] = float("nan")
    return out.reshape(ref.shape)


def _never_written(res, case) -> str:
    """Where the result still holds the NaN it was pre-filled with."""
    nan = torch.isnan(res.detach().double()).view(case.B, case.Q, case.M, case.D)
    if not bool(nan.any()):
        return ""
    qs = sorted({int(i) for i in nan.nonzero()[:, 1]})
    ds = sorted({int(i) for i in nan.nonzero()[:, 3]})
    return (f"{int(nan.sum())} elements were never written (the output was filled with NaN "
            f"before the launch): queries {qs}, channels {ds} within a head")


def _check_guards(res, what):
    lo = int((~torch.isnan(res["guard_lo"].double())).sum())
    hi = int((~torch.isnan(res["guard_hi"].double())).sum())
    if lo or hi:
        raise AssertionError(
            f"{what}: the kernel wrote {hi} elements past the end of the output and {lo} before "
            f"its start: an unmasked tail; every store needs mask_q (offs_q < Q) and mask_d "
            f"(offs_d < D), and a ragged last chunk writes past D without mask_d")


@lru_cache(maxsize=16)
def _variants(case, dtype, chunk_d):
    """Known mistakes' outputs for ``case`` (only computed once a result is already wrong)."""
    variants = dict(msda_variants(_case_inputs(case, dtype)))
    if chunk_d is not None and chunk_d < case.D:
        variants = {"first_chunk": (
            _first_chunk_only(_reference(case, dtype), case, chunk_d),
            "offs_d without the pid_d * CHUNK_D shift: every program wrote the first channel "
            "chunk, so the other channels were never written"), **variants}
    return variants


def _expect_forward(res, case, dtype, what, chunk_d=None):
    ref = _reference(case, dtype)
    kwargs = {"what": what, "case": case.describe(), "dtype": dtype, "expect_dtype": dtype}
    try:
        expect_close(res, ref, **kwargs)
        return
    except AssertionError:
        pass
    try:
        expect_close(res, ref, variants=_variants(case, dtype, chunk_d), **kwargs)
    except AssertionError as err:
        where = _never_written(res, case) if isinstance(res, torch.Tensor) and \
            tuple(res.shape) == tuple(ref.shape) else ""
        if where and "first channel chunk" not in str(err):
            raise AssertionError(f"{err}; {where}") from None
        raise


def _run_chunked(submission, case, dtype, block_q, chunk_d, what):
    res = submission.run(_launch_chunked, _case_inputs(case, dtype), block_q, chunk_d)
    _check_guards(res, f"{what} on {case.describe()}")
    _expect_forward(res["out"], case, dtype, what, chunk_d)


# -- Task 6.1: the chunked kernel, in the interpreter ------------------------------------------


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
    res = submission.run(_launch_chunked, _case_inputs(case, torch.float32), block_q, chunk_d,
                         grid)
    what = (f"msda_forward_chunked_kernel launched on the grid {grid} only (BLOCK_Q={block_q}, "
            f"CHUNK_D={chunk_d})")
    _check_guards(res, f"{what} on {case.describe()}")
    out = res["out"].view(case.B, case.Q, case.M, case.D)
    inside = torch.zeros(out.shape, dtype=torch.bool)
    inside[:, :block_q, :, :chunk_d] = True
    written = ~torch.isnan(out.double())
    stray = written & ~inside
    if bool(stray.any()):
        qs = sorted({int(i) for i in stray.nonzero()[:, 1]})
        ds = sorted({int(i) for i in stray.nonzero()[:, 3]})
        raise AssertionError(
            f"{what}: a program wrote outside its tile (queries 0..{block_q - 1}, channels "
            f"0..{chunk_d - 1}): {int(stray.sum())} elements at queries {qs}, channels {ds}; "
            f"one program must own exactly BLOCK_Q queries x CHUNK_D channels")
    ref = _reference(case, torch.float32).view(out.shape)
    expect_close(out[:, :block_q, :, :chunk_d].contiguous(),
                 ref[:, :block_q, :, :chunk_d].contiguous(), dtype=torch.float32,
                 what=f"{what}, inside the tile", case=case.describe())


def _launch_each(module, runs):
    """Probe: :func:`_launch_chunked` for each (inputs, block_q, chunk_d) of ``runs``."""
    return [_launch_chunked(module, inputs, block_q, chunk_d) for inputs, block_q, chunk_d in runs]


_FP16: dict = {}


def _fp16_results(submission):
    """Both half-precision launches in one child process (the interpreter's per-process setup
    is paid once); a crash or an exception is served to both tests alike."""
    if "runs" not in _FP16:
        runs = [(_case_inputs(CHUNK_CASE, torch.float16), 4, 4), (peaked_inputs(), 4, 4)]
        try:
            _FP16["runs"] = ("ok", submission.run(_launch_each, runs))
        except SubmissionProblem as exc:
            _FP16["runs"] = ("raised", exc)
    kind, value = _FP16["runs"]
    if kind == "raised":
        raise value
    if not isinstance(value, list) or len(value) != 2:
        raise AssertionError("the half-precision probe returned no results")
    return value


@pytest.mark.task("6.1", points=1)
@pytest.mark.rule("fp32-accumulation")
def test_chunked_half_precision(submission):
    # fp16 in and out, fp32 inside: within the fp16 tolerance of the fp64 reference.
    res = _fp16_results(submission)[0]
    what = "msda_forward_chunked_kernel in float16 (BLOCK_Q=4, CHUNK_D=4)"
    _check_guards(res, f"{what} on {CHUNK_CASE.describe()}")
    _expect_forward(res["out"], CHUNK_CASE, torch.float16, what, 4)


@pytest.mark.task("6.1", points=1)
@pytest.mark.rule("fp32-accumulation")
def test_chunked_accumulates_in_fp32(submission):
    # 64 points per query, one carrying 98% of the weight: an fp16 running sum drops the rest.
    inputs = peaked_inputs()
    what = "msda_forward_chunked_kernel in float16 (BLOCK_Q=4, CHUNK_D=4)"
    res = _fp16_results(submission)[1]
    _check_guards(res, f"{what} on {PEAKED.describe()}")
    value, shapes, _starts, loc, attn = inputs
    ref = msda_reference(value.double(), shapes, loc.double(), attn.double())
    try:
        expect_close(res["out"], ref, what=what, case=PEAKED.describe(), dtype=torch.float16,
                     expect_dtype=torch.float16)
        return
    except AssertionError:
        pass  # name the mistake: the fp16 running sum is only computed for a wrong result
    try:
        expect_close(res["out"], ref, what=what, case=PEAKED.describe(), dtype=torch.float16,
                     expect_dtype=torch.float16,
                     variants={"fp16_acc": (fp16_running_sum(inputs), FP16_ACC_MESSAGE)})
    except AssertionError as exc:
        if "this is exactly" in str(exc):
            raise
        raise AssertionError(f"{exc}; {ACC_HINT}") from None


@pytest.mark.task("6.1", points=1)
def test_wrapper_defaults(submission):
    case = STANDARD_CASES[0]
    res = submission.run(_wrapper_defaults, _case_inputs(case, torch.float32))
    _expect_forward(res, case, torch.float32,
                    "msda_forward_chunked with its defaults (BLOCK_Q=32, CHUNK_D=None)")


# Two batches of one 16384 x 16384 level with M * D = 12: batch 1 starts at value element
# 12 * 2**28, past 2**31. The value is a sparse file mapped into memory (see bigcase.py); each
# chunk width the lab grades is launched on it, all in one child process.
BIG = BigCase("int64_offsets", B=2, Q=6, M=2, D=6, K=2,
              corners=(((1 << 14) - 12, (1 << 14) - 20), (4, 8)), seed=61)
_CRASH_HINT = ("in the interpreter a crash is almost always a load or store at a wild address: "
               "an unmasked lane, or an offset that overflowed")


def _int64_probe(module, case, block_q, chunks):
    """Probe: the chunked kernel at each CHUNK_D on the big case; one guarded output each."""
    from msda_labs.student import runtime

    dev = runtime.device()
    value, shapes, starts, loc, attn = case.big_inputs(dev)
    B, S, M, D = value.shape
    Q, L, K = loc.shape[1], loc.shape[3], loc.shape[4]
    results = {}
    for chunk_d in chunks:
        out_buf, out = _guarded((B, Q, M, D), float("nan"), value.dtype, dev)
        grid = (cdiv(Q, block_q), B * M, cdiv(D, chunk_d))
        module.msda_forward_chunked_kernel[grid](
            value, shapes, starts, loc, attn, out, Q, S,
            M=M, D=D, L=L, K=K, BLOCK_Q=block_q, CHUNK_D=chunk_d)
        n = out.numel()
        results[str(chunk_d)] = {"out": out.reshape(B, Q, M * D).clone(),
                                 "guard_lo": out_buf[:GUARD].clone(),
                                 "guard_hi": out_buf[GUARD + n:].clone()}
    return results


@lru_cache(maxsize=1)
def _big_reference(case):
    value, shapes, _starts, loc, attn = case.small_inputs()
    return msda_reference(value.double(), shapes, loc.double(), attn.double())


@pytest.mark.task("6.1", points=2)
@pytest.mark.rule("int64-offsets")
def test_int64_offsets_every_chunk_width(submission):
    case, block_q = BIG, 8  # one query block: the offsets, not the tiling, are on trial here
    results = run_probe(submission, _int64_probe, case, block_q, tuple(CHUNK_WIDTHS),
                        hint=f"{_CRASH_HINT}. {INT64_HINT}")
    ref = _big_reference(case)
    for chunk_d, width in CHUNK_WIDTHS.items():
        res = results[str(chunk_d)] if isinstance(results, dict) else None
        what = (f"msda_forward_chunked_kernel (BLOCK_Q={block_q}, CHUNK_D={chunk_d}; "
                f"{width.replace('D=6', f'D={case.D}')})")
        try:
            if res is None:
                raise AssertionError(f"{what}: the probe returned no output")
            _check_guards(res, f"{what} on {case.describe()}")
            expect_close(res["out"], ref, what=what, case=case.describe(), dtype=torch.float32,
                         expect_dtype=torch.float32)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {INT64_HINT}") from None


# -- Task 6.2: autotune, in the interpreter -----------------------------------------------------

WANTED_BLOCK_Q = {16, 32, 64}
WANTED_WARPS = {2, 4}
MAX_CONFIGS = 12


def _config_problems(configs) -> list[str]:
    problems = []
    if not isinstance(configs, list) or not configs:
        return ["forward_configs() must return a non-empty list of triton.Config"]
    pairs = set()
    for i, cfg in enumerate(configs):
        kwargs = cfg["kwargs"]
        extra = sorted(set(kwargs) - {"BLOCK_Q"})
        if extra:
            problems.append(f"config {i} sets {extra}: a config may set only BLOCK_Q (the "
                            f"launcher passes CHUNK_D, and Triton refuses a value given twice)")
        block_q = kwargs.get("BLOCK_Q")
        if not isinstance(block_q, int) or block_q < 1 or block_q & (block_q - 1):
            problems.append(f"config {i} has BLOCK_Q={block_q!r}: it must be a power of two")
            continue
        pairs.add((block_q, cfg["num_warps"]))
    missing = sorted((bq, w) for bq in WANTED_BLOCK_Q for w in WANTED_WARPS
                     if (bq, w) not in pairs)
    if missing:
        problems.append(f"the space lacks (BLOCK_Q, num_warps) = {missing}; it must hold every "
                        f"BLOCK_Q in {sorted(WANTED_BLOCK_Q)} with every num_warps in "
                        f"{sorted(WANTED_WARPS)}")
    if len(configs) > MAX_CONFIGS:
        problems.append(f"{len(configs)} configs: at most {MAX_CONFIGS}, each costs a compile "
                        f"and a benchmark at every new key")
    return problems


@pytest.mark.task("6.2", points=2)
def test_autotune_config_space(submission):
    res = submission.run(_config_space)
    problems = _config_problems(res["configs"])
    if res["type"] != "Autotuner":
        problems.append(f"make_autotuned_forward() returned a {res['type']}, not the Autotuner "
                        f"that triton.autotune(...) wraps a kernel in")
    elif not res["wraps_chunked"]:
        problems.append("the autotuner does not wrap msda_forward_chunked_kernel")
    if res["type"] == "Autotuner":
        declared = sorted(map(json.dumps, res["configs"]))
        if sorted(map(json.dumps, res["tuned_configs"])) != declared:
            problems.append("make_autotuned_forward() without configs must use "
                            "forward_configs()")
        keys = res["keys"]
        unknown = [k for k in keys if k not in res["arg_names"]]
        if unknown:
            problems.append(f"the key names {unknown}, which are not kernel arguments (older "
                            f"Triton drops them silently)")
        lacking = [k for k in ("Q", "M", "D", "L", "K") if k not in keys]
        if lacking:
            problems.append(f"the autotune key lacks {lacking}: a kernel tuned for one Q (or M, "
                            f"D, L, K) would keep that config for every other")
    if problems:
        raise AssertionError("autotune search space: " + "; ".join(problems))


def _grid_hint(res, ref, case, block_q) -> str:
    """Name the fixed-grid mistake: only a prefix of whole query blocks came out right."""
    if not isinstance(res, torch.Tensor) or res.shape != ref.shape:
        return ""
    a = res.double().view(case.B, case.Q, -1)
    b = ref.double().view(case.B, case.Q, -1)
    good = torch.isclose(a, b, rtol=1e-5, atol=1e-5).all(dim=2).all(dim=0).tolist()
    n = good.index(False) if False in good else len(good)
    if 0 < n < case.Q and not any(good[n:]) and n % block_q == 0:
        return (f"queries 0..{n - 1} are right and {n}..{case.Q - 1} were never written, with "
                f"the config's BLOCK_Q={block_q}: the grid must launch cdiv(Q, "
                f"meta['BLOCK_Q']) query blocks, from the config the autotuner chose")
    return ""


@pytest.mark.task("6.2", points=2)
@pytest.mark.parametrize("block_q", [4, 16], ids=lambda b: f"BLOCK_Q={b}")
def test_autotuned_launch(submission, block_q):
    case = TUNE_CASE
    ref = _reference(case, torch.float32)
    assert bool((ref != 0).all()), "grader self-check: this case must have no zero outputs"
    res = submission.run(_autotuned_run, _case_inputs(case, torch.float32), block_q)
    what = (f"msda_forward_autotuned with a one-config kernel (BLOCK_Q={block_q}, "
            f"num_warps=1)")
    try:
        expect_close(res, ref, what=what, case=case.describe(), dtype=torch.float32,
                     expect_dtype=torch.float32)
    except AssertionError as err:
        hint = _grid_hint(res, ref, case, block_q)
        if hint:
            raise AssertionError(f"{err}; {hint}") from None
        raise


# -- GPU stage ---------------------------------------------------------------------------------


def _artifacts_dir() -> Path:
    """$MSDA_ARTIFACTS_DIR, else the GPU runner's $MSDA_ARTIFACT_DIR (a Modal run sends that
    folder back), else this lab folder's artifacts/."""
    path = Path(os.environ.get("MSDA_ARTIFACTS_DIR") or os.environ.get("MSDA_ARTIFACT_DIR")
                or Path(__file__).resolve().parents[1] / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _report(submission, text: str) -> None:
    """Show a measurement in the grade report (a note, passed or failed) and the test output."""
    from msda_labs.grading.timing import add_note

    print(text)
    add_note(submission, text)


def _plot_race(rows, path: Path, device: str) -> str:
    """Bar chart of effective GB/s per CHUNK_D; returns what happened (saved or why not)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install matplotlib)"
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    labels = [str(c) for c, _, _ in rows]
    gbs = [g for _, _, g in rows]
    bars = ax.bar(labels, gbs, color="#3b75af")
    for bar, (_, us, _) in zip(bars, rows):
        ax.annotate(f"{us:.1f} us", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_xlabel("CHUNK_D (channels per program instance)")
    ax.set_ylabel("effective bandwidth (GB/s)")
    ax.set_title(f"MSDA forward, decoder preset, fp16, {device}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot saved to {path}"


def _gpu_check_outputs(outputs, case, dtype, what):
    for chunk, out in outputs.items():
        _expect_forward(out, case, dtype, f"{what} (CHUNK_D={chunk})")


@pytest.mark.stage("gpu")
@pytest.mark.task("6.1", points=2)
def test_gpu_chunked_correct_at_decoder_size(submission):
    outputs = submission.run(_gpu_outputs, DECODER, torch.float16, RACE_CHUNKS)
    _gpu_check_outputs(outputs, DECODER, torch.float16, "msda_forward_chunked, fp16 on the GPU")
    # bf16 on a real GPU (the interpreter cannot do bf16 arithmetic), wide and narrow.
    outputs = submission.run(_gpu_outputs, DECODER, torch.bfloat16, (None, 2))
    _gpu_check_outputs(outputs, DECODER, torch.bfloat16, "msda_forward_chunked, bf16 on the GPU")


@pytest.mark.stage("gpu")
@pytest.mark.task("6.1", points=3)
def test_gpu_race_wide_beats_narrow(submission):
    case = DECODER
    res = submission.run(_gpu_race, case, RACE_CHUNKS)
    # A wrong kernel's time proves nothing: every raced variant must be right first.
    _gpu_check_outputs(res["outputs"], case, torch.float16, "the raced msda_forward_chunked")
    nbytes = forward_bytes(case.B, case.Q, case.M, case.D, case.L, case.K, 2)
    times = {int(c): t["us"] for c, t in res["timings"].items()}
    method = next(iter(res["timings"].values()))["method"]
    rows = [(c, times[c], effective_bandwidth_gbs(nbytes, times[c])) for c in RACE_CHUNKS]
    wide, narrow = times[case.D], times[2]
    ratio = narrow / wide
    table = bandwidth_table({str(c): us for c, us, _ in rows}, nbytes, label="CHUNK_D")
    folder = _artifacts_dir()
    plot = _plot_race(rows, folder / "lab06-race.png", res["device"])
    (folder / "lab06-race.json").write_text(json.dumps({
        "device": res["device"], "method": method, "bytes": nbytes, "ratio_narrow_over_wide":
        ratio, "rows": [{"CHUNK_D": c, "us": us, "GBps": g} for c, us, g in rows]}, indent=2))
    summary = (f"race on {res['device']} ({method}, L2 flushed, median): wide CHUNK_D={case.D} "
               f"{wide:.1f} us, narrow CHUNK_D=2 {narrow:.1f} us, wide is {ratio:.2f}x faster; "
               + "; ".join(f"CHUNK_D={c}: {us:.1f} us, {g:.0f} GB/s" for c, us, g in rows)
               + f"; {plot}")
    _report(submission, summary)
    print(table)
    if ratio < RACE_MIN_RATIO:
        raise AssertionError(
            f"the wide tiling should win the race by at least {RACE_MIN_RATIO}x, and it won by "
            f"{ratio:.2f}x ({summary})")


def _chip_ratio_problems(times, e2e, yours, what) -> list[str]:
    """Device-time and end-to-end ratios of ``yours`` against "chip" beyond CHIP_MAX_RATIO."""
    problems = []
    if "chip" not in times:
        return problems
    for label, table in (("device time", times), ("end-to-end time per call", e2e)):
        ratio = table[yours] / table["chip"]
        if ratio > CHIP_MAX_RATIO:
            problems.append(f"too slow: {what} takes {ratio:.2f}x the chip's {label} "
                            f"({table[yours]:.1f} us against {table['chip']:.1f} us; passes up "
                            f"to {CHIP_MAX_RATIO:g}x)")
    return problems


@pytest.mark.stage("gpu")
@pytest.mark.task("6.1", points=2)
def test_gpu_speed_against_chip(submission):
    case = DECODER
    res = submission.run(_gpu_speed, case)
    _expect_forward(res["out"], case, torch.float16,
                    "msda_forward_chunked with its defaults (the wide tiling) on the GPU")
    if res["chip_out"] is None:
        raise AssertionError(f"speed of msda_forward_chunked: no baseline: {res['baseline']}")
    _expect_forward(res["chip_out"], case, torch.float16, "grader self-check: the chip")
    times = {k: t["us"] for k, t in res["timings"].items()}
    e2e = res["e2e"]
    method = res["timings"]["yours"]["method"]
    line = (f"speed of msda_forward_chunked (wide, fp16, decoder preset) on {res['device']}: "
            f"yours {times['yours']:.1f} us vs {res['baseline']} {times['chip']:.1f} us = "
            f"{times['yours'] / times['chip']:.2f}x its device time ({method}, L2 flushed, "
            f"median); end to end per call {e2e['yours']:.1f} us vs {e2e['chip']:.1f} us")
    _report(submission, line)
    problems = _chip_ratio_problems(times, e2e, "yours", "your wide launch")
    if problems:
        raise AssertionError("; ".join(problems) + f" ({line})")


@pytest.mark.stage("gpu")
@pytest.mark.task("6.2", points=2)
def test_gpu_autotuned_vs_fixed_and_chip(submission):
    case = DECODER
    res = submission.run(_gpu_autotune, case)
    _expect_forward(res["out"], case, torch.float16,
                    "msda_forward_autotuned (default configs) on the GPU")
    times = {k: t["us"] for k, t in res["timings"].items()}
    best = res["best_config"]
    best_text = (f"BLOCK_Q={best['kwargs'].get('BLOCK_Q')}, num_warps={best['num_warps']}"
                 if best else "none recorded")
    e2e = res["e2e"]
    parts = [f"autotuned {times['autotuned']:.1f} us (best config {best_text}, "
             f"{res['n_configs']} configs)", f"your fixed BLOCK_Q=32 {times['fixed']:.1f} us"]
    if "chip" in times:
        parts.append(f"chip {times['chip']:.1f} us ({res['baseline']}), yours/chip "
                     f"{times['autotuned'] / times['chip']:.2f}x")
    parts.append("end to end per call " + ", ".join(f"{k} {v:.1f} us" for k, v in e2e.items()))
    summary = f"speed of the autotuned forward on {res['device']}: " + ", ".join(parts)
    _report(submission, summary)
    if res["n_configs"] < len(WANTED_BLOCK_Q) * len(WANTED_WARPS):
        raise AssertionError(f"the default autotuned kernel holds {res['n_configs']} configs; "
                             f"the search space needs at least "
                             f"{len(WANTED_BLOCK_Q) * len(WANTED_WARPS)} ({summary})")
    ratio = times["autotuned"] / times["fixed"]
    if ratio > TUNED_MAX_RATIO:
        raise AssertionError(
            f"too slow: the autotuned launch takes {ratio:.2f}x the device time of your fixed "
            f"BLOCK_Q=32 launch, whose config is in the search space ({summary})")
    # End to end, every call also pays the autotuner's lookup: a generous bound against the
    # chip's launcher (your fixed launch cannot serve here: the same mistake would slow both).
    if "chip" in e2e and e2e["autotuned"] / e2e["chip"] > CHIP_MAX_RATIO:
        raise AssertionError(
            f"too slow: the autotuned launch takes {e2e['autotuned'] / e2e['chip']:.2f}x the "
            f"chip's end-to-end time per call (passes up to {CHIP_MAX_RATIO:g}x; {summary})")
