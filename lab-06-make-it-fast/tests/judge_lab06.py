"""Judge-side rules of lab 06 that the test file (test_lab06_fast.py) states in one line each:
the cases' references and the comparison of an output, what a stray or missing write means, the
autotuner's search space, and the GPU verdicts (the race of the tilings, the wide launch and the
tuned one against the chip), with their reports.

Nothing here runs student code: it reads what the probes (probes_lab06.py) sent back.
"""

import json
import os
from functools import lru_cache
from pathlib import Path

import torch

from msda_labs.grading import expect_close
from msda_labs.grading.judge.bandwidth import (
    bandwidth_table,
    effective_bandwidth_gbs,
    forward_bytes,
    plot_bandwidth,
)
from msda_labs.grading.judge.compare import Mismatch
from msda_labs.grading.judge.results import Evidence
from msda_labs.grading.speed.timing import add_note
from msda_labs.mistakes import msda_variants
from msda_labs.truth.cases import make_inputs
from msda_labs.truth.reference import msda_reference

RACE_MIN_RATIO = 1.5  # narrow time / wide time; the paper saw about 7x, lab 03 predicts ~16x
TUNED_MAX_RATIO = 1.5  # autotuned time / your fixed-config time
CHIP_MAX_RATIO = 3.0  # your time / the chip's, device time and end-to-end alike
WANTED_BLOCK_Q = {16, 32, 64}
WANTED_WARPS = {2, 4}
MAX_CONFIGS = 12


# -- cases, references and the comparison of an output --------------------------------------------
@lru_cache(maxsize=8)
def case_inputs(case, dtype):
    return make_inputs(case, dtype)


@lru_cache(maxsize=8)
def reference(case, dtype):
    """fp64 reference from the inputs rounded to ``dtype`` (what the kernel actually read)."""
    value, shapes, _starts, loc, attn = case_inputs(case, dtype)
    if case.B * case.S * case.M * case.D > 1_000_000:  # the GPU sizes: fp32 is plenty there
        return msda_reference(value.float(), shapes, loc.float(), attn.float())
    return msda_reference(value.double(), shapes, loc.double(), attn.double())


def _variants(case, dtype, chunk_d):
    """Known mistakes' outputs for ``case`` (only computed once a result is already wrong)."""
    variants = dict(msda_variants(case_inputs(case, dtype)))
    if chunk_d is not None and chunk_d < case.D:
        variants = {"first_chunk": (
            first_chunk_only(reference(case, dtype), case, chunk_d),
            "offs_d without the pid_d * CHUNK_D shift: every program wrote the first channel "
            "chunk, so the other channels were never written"), **variants}
    return variants


def expect_forward(res, case, dtype, what, chunk_d=None):
    """``res`` against the reference of ``case``; a known mistake, or where the output was never
    written, is named."""
    ref = reference(case, dtype)
    try:
        expect_close(res, ref, what=what, case=case.describe(), dtype=dtype, expect_dtype=dtype,
                     variants=lambda: _variants(case, dtype, chunk_d))
    except AssertionError as err:
        where = never_written(res, ref, case)
        if where and "first channel chunk" not in str(err):
            raise AssertionError(f"{err}; {where}") from None
        raise


# -- what the output buffers say ------------------------------------------------------------------
def first_chunk_only(ref, case, chunk_d):
    """The output of a kernel whose every program wrote the first channel chunk only."""
    out = ref.clone().view(case.B, case.Q, case.M, case.D)
    out[..., chunk_d:] = float("nan")
    return out.reshape(ref.shape)


def never_written(res, ref, case) -> str:
    """Where the result still holds the NaN it was pre-filled with ("" when nowhere)."""
    if not isinstance(res, torch.Tensor) or tuple(res.shape) != tuple(ref.shape):
        return ""
    nan = torch.isnan(res.detach().double()).view(case.B, case.Q, case.M, case.D)
    if not bool(nan.any()):
        return ""
    qs = sorted({int(i) for i in nan.nonzero()[:, 1]})
    ds = sorted({int(i) for i in nan.nonzero()[:, 3]})
    return (f"{int(nan.sum())} elements were never written (the output was filled with NaN "
            f"before the launch): queries {qs}, channels {ds} within a head")


def check_guards(res, what):
    lo = int((~torch.isnan(res["guard_lo"].double())).sum())
    hi = int((~torch.isnan(res["guard_hi"].double())).sum())
    if lo or hi:
        raise AssertionError(
            f"{what}: the kernel wrote {hi} elements past the end of the output and {lo} before "
            f"its start: an unmasked tail; every store needs mask_q (offs_q < Q) and mask_d "
            f"(offs_d < D), and a ragged last chunk writes past D without mask_d")


def check_tile(out, case, block_q, chunk_d, what):
    """Nothing written outside the tile (queries < block_q, channels < chunk_d); the output as
    (B, Q, M, D)."""
    out = out.view(case.B, case.Q, case.M, case.D)
    inside = torch.zeros(out.shape, dtype=torch.bool)
    inside[:, :block_q, :, :chunk_d] = True
    stray = ~torch.isnan(out.double()) & ~inside
    if bool(stray.any()):
        qs = sorted({int(i) for i in stray.nonzero()[:, 1]})
        ds = sorted({int(i) for i in stray.nonzero()[:, 3]})
        raise AssertionError(
            f"{what}: a program wrote outside its tile (queries 0..{block_q - 1}, channels "
            f"0..{chunk_d - 1}): {int(stray.sum())} elements at queries {qs}, channels {ds}; "
            f"one program must own exactly BLOCK_Q queries x CHUNK_D channels")
    return out


# -- the autotuner --------------------------------------------------------------------------------
SPACE_LACKS_PAIRS = "the space lacks (BLOCK_Q, num_warps)"
SPACE_LACKS = "a search space that lacks some tile and warp pairs"


def _config_problems(configs) -> list[str]:
    if not isinstance(configs, list) or not configs:
        return ["forward_configs() must return a non-empty list of triton.Config"]
    problems, pairs = [], set()
    for i, cfg in enumerate(configs):
        extra = sorted(set(cfg["kwargs"]) - {"BLOCK_Q"})
        if extra:
            problems.append(f"config {i} sets {extra}: a config may set only BLOCK_Q (the "
                            f"launcher passes CHUNK_D, and Triton refuses a value given twice)")
        block_q = cfg["kwargs"].get("BLOCK_Q")
        if not isinstance(block_q, int) or block_q < 1 or block_q & (block_q - 1):
            problems.append(f"config {i} has BLOCK_Q={block_q!r}: it must be a power of two")
            continue
        pairs.add((block_q, cfg["num_warps"]))
    missing = sorted((bq, w) for bq in WANTED_BLOCK_Q for w in WANTED_WARPS
                     if (bq, w) not in pairs)
    if missing:
        problems.append(f"{SPACE_LACKS_PAIRS} = {missing}; it must hold every "
                        f"BLOCK_Q in {sorted(WANTED_BLOCK_Q)} with every num_warps in "
                        f"{sorted(WANTED_WARPS)}")
    if len(configs) > MAX_CONFIGS:
        problems.append(f"{len(configs)} configs: at most {MAX_CONFIGS}, each costs a compile "
                        f"and a benchmark at every new key")
    return problems


def autotune_problems(res) -> list[str]:
    """Everything wrong with the declared search space and the autotuner around the kernel."""
    problems = _config_problems(res["configs"])
    if res.get("foreign_configs", ["no record"]):
        problems.append(f"forward_configs() must return triton.Config objects, not "
                        f"{', '.join(res.get('foreign_configs', ['no record']))}")
    if res["type"] != "Autotuner":
        problems.append(f"make_autotuned_forward() returned a {res['type']}, not the Autotuner "
                        f"that triton.autotune(...) wraps a kernel in (Triton's own class)")
        return problems
    if not res["wraps_chunked"]:
        problems.append("the autotuner does not wrap msda_forward_chunked_kernel")
    declared = sorted(map(json.dumps, res["configs"]))
    if sorted(map(json.dumps, res["tuned_configs"])) != declared:
        problems.append("make_autotuned_forward() without configs must use forward_configs()")
    keys = res["keys"]
    unknown = [k for k in keys if k not in res["arg_names"]]
    if unknown:
        problems.append(f"the key names {unknown}, which are not kernel arguments (older "
                        f"Triton drops them silently)")
    lacking = [k for k in ("Q", "M", "D", "L", "K") if k not in keys]
    if lacking:
        problems.append(f"the autotune key lacks {lacking}: a kernel tuned for one Q (or M, "
                        f"D, L, K) would keep that config for every other")
    return problems


BENCHMARKED = ("the autotuner tried to benchmark several configs, which the interpreter cannot "
               "do; the grader passed a one-config kernel")
CONFIGS_IGNORED = ("configs ignored by make_autotuned_forward: the kernel it returned for one "
                   "config tunes over {n}; wrap the kernel with triton.autotune(configs=configs, "
                   "...), the configs it is given (forward_configs() only when it is given none)")
KERNEL_IGNORED = ("a kernel ignored by msda_forward_autotuned: make_autotuned_forward kept the "
                  "one config it was given, yet a launch benchmarked several; launch the kernel "
                  "passed as kernel= when there is one")


def raise_benchmarked(res, what) -> None:
    """The failure of a launch whose autotuner benchmarked several configs, naming the function
    that dropped the grader's one config, as read off the kernel make_autotuned_forward
    returned (``res`` from probes_lab06.autotuned_run)."""
    if res.get("kernel_kept_configs"):
        named, function = KERNEL_IGNORED, "msda_forward_autotuned"
    else:
        n = res.get("kernel_configs")
        named = CONFIGS_IGNORED.format(n=f"{n} configs" if n is not None else "no config list")
        function = "make_autotuned_forward"
    raise Mismatch(f"{what}: {BENCHMARKED}; this is {named}",
                   Evidence(function=function, named=named))


GRID_TOO_SMALL = "a grid too small for the config's BLOCK_Q"


def grid_hint(res, ref, case, block_q) -> str:
    """Name the fixed-grid mistake: a prefix of whole query blocks came out right and every
    query after it was never written (still the NaN the output was filled with), so the kernel
    is right and too few query blocks were launched. '' when the output shows anything else."""
    if not isinstance(res, torch.Tensor) or res.shape != ref.shape:
        return ""
    a = res.double().view(case.B, case.Q, -1)
    b = ref.double().view(case.B, case.Q, -1)
    good = torch.isclose(a, b, rtol=1e-5, atol=1e-5).all(dim=2).all(dim=0).tolist()
    n = good.index(False) if False in good else len(good)
    if 0 < n < case.Q and n % block_q == 0 and bool(torch.isnan(a[:, n:]).all()):
        launched, needed = n // block_q, -(-case.Q // block_q)
        return (f"{GRID_TOO_SMALL}: queries 0..{n - 1} are right and {n}..{case.Q - 1} were "
                f"never written: {launched} query blocks launched, where the config's "
                f"BLOCK_Q={block_q} needs cdiv(Q, BLOCK_Q) = {needed}; build the grid from "
                f"meta['BLOCK_Q'], the config the autotuner chose")
    return ""


# -- GPU verdicts ---------------------------------------------------------------------------------
def _artifacts_dir() -> Path:
    """$MSDA_ARTIFACTS_DIR, else the GPU runner's $MSDA_ARTIFACT_DIR (a Modal run sends that
    folder back), else this lab folder's artifacts/."""
    path = Path(os.environ.get("MSDA_ARTIFACTS_DIR") or os.environ.get("MSDA_ARTIFACT_DIR")
                or Path(__file__).resolve().parents[1] / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _report(submission, text: str) -> None:
    """Show a measurement in the grade report (a note, passed or failed) and the test output."""
    print(text)
    add_note(submission, text)


def _how(res) -> str:
    """How ``res``'s times were taken, in words."""
    if res.get("method") == "judge-clock":
        return (f"the judge's clock, median of {res.get('rounds')} rounds of {res.get('n')} "
                f"calls on fresh inputs, every output checked")
    return f"{res['method']}, L2 flushed, median"


def race_verdict(submission, res, case, chunks) -> None:
    """The race of the tilings: table, plot and numbers reported; wide must beat narrow."""
    nbytes = forward_bytes(case.B, case.Q, case.M, case.D, case.L, case.K, 2)
    times = {int(c): us for c, us in res["times_us"].items()}
    rows = [(c, times[c], effective_bandwidth_gbs(nbytes, times[c])) for c in chunks]
    wide, narrow = times[case.D], times[2]
    ratio = narrow / wide
    folder = _artifacts_dir()
    plot = plot_bandwidth(rows, folder / "lab06-race.png",
                          xlabel="CHUNK_D (channels per program instance)",
                          title=f"MSDA forward, {case.id} size, fp16, {res['device']}")
    (folder / "lab06-race.json").write_text(json.dumps({
        "device": res["device"], "method": res["method"], "bytes": nbytes,
        "ratio_narrow_over_wide": ratio,
        "rows": [{"CHUNK_D": c, "us": us, "GBps": g} for c, us, g in rows]}, indent=2))
    summary = (f"race on {res['device']} ({_how(res)}): wide "
               f"CHUNK_D={case.D} {wide:.1f} us, narrow CHUNK_D=2 {narrow:.1f} us, wide is "
               f"{ratio:.2f}x faster; "
               + "; ".join(f"CHUNK_D={c}: {us:.1f} us, {g:.0f} GB/s" for c, us, g in rows)
               + f"; {plot}")
    _report(submission, summary)
    print(bandwidth_table({str(c): us for c, us, _ in rows}, nbytes, label="CHUNK_D"))
    if ratio < RACE_MIN_RATIO:
        raise AssertionError(
            f"the wide tiling should win the race by at least {RACE_MIN_RATIO}x, and it won by "
            f"{ratio:.2f}x ({summary})")


def _chip_ratio_problems(times, e2e, yours, what, judged=False) -> list[str]:
    """Device-time and end-to-end ratios of ``yours`` against "chip" beyond CHIP_MAX_RATIO
    (``judged``: one time, the judge's clock, which is end to end)."""
    problems = []
    tables = ((("time per call on the judge's clock", times),) if judged else
              (("device time", times), ("end-to-end time per call", e2e)))
    for label, table in tables:
        ratio = table[yours] / table["chip"] if "chip" in times else 0.0
        if ratio > CHIP_MAX_RATIO:
            problems.append(f"too slow: {what} takes {ratio:.2f}x the chip's {label} "
                            f"({table[yours]:.1f} us against {table['chip']:.1f} us; passes up "
                            f"to {CHIP_MAX_RATIO:g}x)")
    return problems


def wide_speed_verdict(submission, res) -> None:
    """Your wide launch against the chip: device time and end to end, reported and graded."""
    times, e2e = res["times_us"], res["e2e_us"]
    judged = res.get("method") == "judge-clock"
    line = (f"speed of msda_forward_chunked (wide, fp16, decoder preset) on {res['device']}: "
            f"yours {times['yours']:.1f} us vs {res['baseline']} {times['chip']:.1f} us = "
            f"{times['yours'] / times['chip']:.2f}x its "
            f"{'time' if judged else 'device time'} ({_how(res)})")
    if not judged:
        line += f"; end to end per call {e2e['yours']:.1f} us vs {e2e['chip']:.1f} us"
    _report(submission, line)
    problems = _chip_ratio_problems(times, e2e, "yours", "your wide launch", judged)
    if problems:
        raise AssertionError("; ".join(problems) + f" ({line})")


def autotune_speed_verdict(submission, res) -> None:
    """The tuned launch: as fast as your fixed config (which is in its space), and end to end
    within reach of the chip's launcher."""
    times, e2e, best = res["times_us"], res["e2e_us"], res["best_config"]
    best_text = (f"BLOCK_Q={best['kwargs'].get('BLOCK_Q')}, num_warps={best['num_warps']}"
                 if best else "none recorded")
    parts = [f"autotuned {times['autotuned']:.1f} us (best config {best_text}, "
             f"{res['n_configs']} configs)", f"your fixed BLOCK_Q=32 {times['fixed']:.1f} us"]
    if "chip" in times:
        parts.append(f"chip {times['chip']:.1f} us ({res['baseline']}), yours/chip "
                     f"{times['autotuned'] / times['chip']:.2f}x")
    parts.append("end to end per call " + ", ".join(f"{k} {v:.1f} us" for k, v in e2e.items()))
    summary = f"speed of the autotuned forward on {res['device']}: " + ", ".join(parts)
    _report(submission, summary)
    wanted = len(WANTED_BLOCK_Q) * len(WANTED_WARPS)
    if res["n_configs"] < wanted:
        raise AssertionError(f"the default autotuned kernel holds {res['n_configs']} configs; "
                             f"the search space needs at least {wanted} ({summary})")
    ratio = times["autotuned"] / times["fixed"]
    kind = "time on the judge's clock" if res.get("method") == "judge-clock" else "device time"
    if ratio > TUNED_MAX_RATIO:
        raise AssertionError(
            f"too slow: the autotuned launch takes {ratio:.2f}x the {kind} of your fixed "
            f"BLOCK_Q=32 launch, whose config is in the search space ({summary})")
    # End to end, every call also pays the autotuner's lookup: a generous bound against the
    # chip's launcher (your fixed launch cannot serve here: the same mistake would slow both).
    if "chip" in e2e and e2e["autotuned"] / e2e["chip"] > CHIP_MAX_RATIO:
        raise AssertionError(
            f"too slow: the autotuned launch takes {e2e['autotuned'] / e2e['chip']:.2f}x the "
            f"chip's end-to-end time per call (passes up to {CHIP_MAX_RATIO:g}x; {summary})")


# The chip both GPU speed tests compare with: the first of these that this copy of the kit
# carries (an exported lab 06 carries the earlier labs' chips only). The autotuned launch is
# compared with the chip's fixed wide launch too: the tuned one's best config is at least that
# fast, and it is one kernel for the judge to compile, not a search space to tune.
CHIP_BASELINES = (("lab06", "msda_forward_chunked"), ("lab05", "msda_forward"))


def chip_baseline(candidates=CHIP_BASELINES):
    """(the chip's forward, what to call it) for the judge's clock; (None, why) when this copy
    of the kit carries none. The chip runs in the judge, never in the student's process."""
    from msda_labs.grading.judge.baseline import chip_function

    for lab_id, name in candidates:
        chip = chip_function(lab_id, name)
        if chip is not None:
            return chip, f"the {lab_id} chip's {name}"
    return None, "none (this copy of the kit has no chip to compare with)"
