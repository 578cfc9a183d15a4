"""Grading tests of lab 08 (concurrent writes). Run them with `nox -s lab08`.

The kernels run in Triton's interpreter (MODE "interpret") on tiny seeded inputs, and on a GPU in
the GPU stage. The probes launch the kernels themselves, with the signatures the lab fixes, into
outputs surrounded by guard bands: a write past either end, and an element never written, are
both visible, which the interpreter (no bounds checks) would otherwise hide. Gradients are
compared with fp32 autograd of the grid_sample reference on the same (rounded) inputs and a
seeded upstream gradient.
"""

import ast
import math
import os
from functools import lru_cache

import pytest
import torch

from msda_labs.grading import expect_close, expect_tensor
from msda_labs.grading.bigcase import INT64_HINT, BigCase
from msda_labs.grading.guards import (
    between_guards,
    cdiv,
    check_sentinel_buffer,
    guarded,
    pow2,
    run_probe,
    sentinel_buffer,
)
from msda_labs.grading.plugin import SubmissionError, SubmissionProblem
from msda_labs.grading.timing import REFERENCE_LIMIT, add_note, check_reference_speed
from msda_labs.mistakes.gradients import grad_variants, lost_update_grad_value
from msda_labs.student import runtime
from msda_labs.truth.cases import (
    DECODER,
    MULTI_LEVEL,
    OUT_OF_BOUNDS,
    SINGLE,
    STANDARD_CASES,
    Case,
    MSDAInputs,
    make_inputs,
    seeded_generator,
)
from msda_labs.truth.reference import msda_reference, reference_grads

LAB = "lab08"
TITLE = "Concurrent writes"
MODE = "interpret"
TASKS = {
    "8.1": "predict_racy_histogram",
    "8.2": "histogram_atomic_kernel",
    "8.3": "msda_backward_kernel",
    "8.4": "on a real GPU",
}

if os.environ.get("TRITON_INTERPRET") == "1":
    # In the interpreter worker: pay the interpreter's one-off costs once, before the worker
    # forks a child per test.
    import lab08_race

    lab08_race.warm_up()

_CRASH_HINT = (
    "in the interpreter a crash is almost always a load, store or atomic at a wild address: "
    "an unmasked lane"
)


def _run(submission, probe, *args):
    return run_probe(submission, probe, *args, hint=_CRASH_HINT)


# ==============================================================================================
# Task 8.1: predict the racy histogram
# ==============================================================================================
def _racy_rule(idx: torch.Tensor, n_bins: int, block: int) -> torch.Tensor:
    """The judge's own prediction: each program adds one to each distinct bin it holds."""
    out = torch.zeros(n_bins, dtype=torch.float32)
    for start in range(0, idx.numel(), block):
        out[torch.unique(idx[start : start + block])] += 1.0
    return out


def _racy_variants(idx: torch.Tensor, n_bins: int, block: int) -> dict:
    exact = torch.bincount(idx, minlength=n_bins).float()
    once = (exact > 0).float()
    return {
        "exact": (
            exact,
            "an exact histogram: the interpreter runs one program after another, but the lanes "
            "of one program load, add and store together, so lanes of one block that share a "
            "bin collapse into a single +1",
        ),
        "one_block": (
            once,
            "one +1 per bin for the whole input, as if it were a single block: the programs run "
            "one after another, so each program's updates survive",
        ),
    }


def _race_probe(module, idx, n_bins, block, measure):
    """The submission's prediction, and what the grader's own racy kernel returns."""
    dev = runtime.device()
    idx = idx.to(dev)
    pred = module.predict_racy_histogram(idx, n_bins, block)
    measured = None
    if measure:
        import lab08_race

        measured = lab08_race.racy_histogram(idx, n_bins, block)
    return pred, measured


def _launches_kernels(submission, name: str) -> list[str]:
    """Calls in ``name`` that run a kernel: kernel[grid](...) or one of the lab's launchers."""
    node = submission.source.node(name)
    found = []
    for sub in ast.walk(node) if node is not None else ():
        if isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Subscript):
                found.append(f"line {sub.lineno}: a kernel launch")
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called in ("histogram_racy", "histogram_atomic"):
                found.append(f"line {sub.lineno}: {called}()")
    return found


def _check_prediction(submission, n, n_bins, block, seed, measure=True, skew=False):
    _rule_no_kernels(submission)
    gen = seeded_generator(seed)
    if skew:  # most elements in the first two bins
        idx = (torch.rand(n, generator=gen) ** 4 * n_bins).long()
    else:
        idx = torch.randint(0, n_bins, (n,), generator=gen)
    pred, measured = submission.run(_race_probe, idx, n_bins, block, measure)
    rule = _racy_rule(idx, n_bins, block)
    where = f"{n} seeded indices into {n_bins} bins, BLOCK={block}"
    if measured is not None:
        measured = expect_tensor(measured, "the grader's racy kernel", shape=(n_bins,))
        if not torch.equal(measured.float(), rule):
            raise RuntimeError(
                f"the racy kernel returned {measured.tolist()} on {where}, which the grader's "
                f"rule {rule.tolist()} does not predict: this Triton's interpreter behaves "
                f"differently; tell your instructor"
            )
        ref, what = measured.float(), "predict_racy_histogram vs the racy kernel's real output"
    else:
        ref, what = rule, "predict_racy_histogram (no kernel can run with this BLOCK)"
    expect_close(
        pred,
        ref,
        what=what,
        case=where,
        rtol=0,
        atol=0,
        variants=_racy_variants(idx, n_bins, block),
    )


def _rule_no_kernels(submission):
    found = _launches_kernels(submission, "predict_racy_histogram")
    if found:
        raise AssertionError(
            "rule: predict_racy_histogram must compute its answer, not run a kernel to find it ("
            + "; ".join(found)
            + ")"
        )


@pytest.mark.task("8.1", points=1)
@pytest.mark.parametrize(
    ("n", "n_bins", "block", "seed"),
    [(2000, 8, 256, 1), (1000, 64, 64, 2), (37, 5, 16, 3), (60, 10, 1, 4)],
    ids=["2000_into_8_BLOCK256", "1000_into_64_BLOCK64", "ragged_37_BLOCK16", "BLOCK1"],
)
def test_predict_racy_histogram(submission, n, n_bins, block, seed):
    _check_prediction(submission, n, n_bins, block, seed)


@pytest.mark.task("8.1", points=1)
def test_predict_racy_histogram_skewed(submission):
    # Most indices fall into the first bins, the last bins are rare: counts of 0, 1 and many.
    _check_prediction(submission, 500, 16, 32, 5, skew=True)


@pytest.mark.task("8.1", points=2)
@pytest.mark.parametrize(
    ("n", "n_bins", "block"),
    [(1000, 12, 100), (50, 7, 3), (20, 4, 1000)],
    ids=["BLOCK100", "BLOCK3", "BLOCK_larger_than_n"],
)
def test_predict_racy_histogram_any_block(submission, n, n_bins, block):
    # Blocks that are not powers of two: no kernel can run them, the rule still holds.
    _check_prediction(submission, n, n_bins, block, 6, measure=False)


# ==============================================================================================
# Task 8.2: the atomic histogram
# ==============================================================================================
def _hist_guard(block: int) -> int:
    return max(64, 2 * block)


def _hist_probe(module, idx, n_bins, block):
    """Launch the submission's kernel with idx between guards holding the bin n_bins (one past
    the last) and out between zero guards; returns the whole out buffer."""
    dev = runtime.device()
    n = idx.numel()
    guard = _hist_guard(block)
    idx_in = between_guards(idx.to(dev), guard, fill=n_bins)
    out_buf, out = guarded((n_bins,), 0.0, torch.float32, dev, guard)
    module.histogram_atomic_kernel[(cdiv(n, block),)](idx_in, out, n, BLOCK=block)
    return out_buf


def _check_histogram(submission, idx, n_bins, block, where):
    buf = _run(submission, _hist_probe, idx, n_bins, block)
    guard = _hist_guard(block)
    n = idx.numel()
    what = "histogram_atomic_kernel"
    buf = expect_tensor(buf, f"{what} on {where}", shape=(n_bins + 2 * guard,))
    exact = torch.bincount(idx, minlength=n_bins).float()
    pad = cdiv(n, block) * block - n
    tail = exact.clone()
    tail[0] += pad
    variants = {
        "racy": (
            _racy_rule(idx, n_bins, block),
            "lost updates: a load, +1 and store is not atomic, so lanes that share a bin keep "
            "one +1 between them; use tl.atomic_add",
        ),
        "unmasked_tail": (
            tail,
            f"an unmasked tail: the {pad} lanes past n of the last block each added 1 to bin 0 "
            f"(their masked load returned other=0); give the atomic the mask too",
        ),
    }
    expect_close(
        buf[guard : guard + n_bins], exact, what=what, case=where, rtol=0, atol=0, variants=variants
    )
    if bool((buf[guard + n_bins :] != 0).any()):
        raise AssertionError(
            f"{what} on {where}: the kernel added into memory past the end of out: an "
            f"unmasked lane past n read a bin from beyond idx; mask the load and the atomic"
        )
    if bool((buf[:guard] != 0).any()):
        raise AssertionError(f"{what} on {where}: the kernel added into memory before out")


@pytest.mark.task("8.2", points=1)
@pytest.mark.parametrize(
    ("n", "n_bins", "block", "seed"),
    [(2000, 8, 256, 11), (1000, 64, 64, 12), (37, 5, 16, 13), (5, 4, 64, 14)],
    ids=["2000_into_8_BLOCK256", "1000_into_64_BLOCK64", "ragged_37_BLOCK16", "n_below_BLOCK"],
)
@pytest.mark.rule("atomics", "mask-query-tail")
def test_histogram_atomic(submission, n, n_bins, block, seed):
    idx = torch.randint(0, n_bins, (n,), generator=seeded_generator(seed))
    _check_histogram(
        submission, idx, n_bins, block, f"{n} seeded indices into {n_bins} bins, BLOCK={block}"
    )


@pytest.mark.task("8.2", points=2)
@pytest.mark.rule("atomics")
def test_histogram_atomic_one_bin(submission):
    # The worst contention there is: every lane of every program adds into bin 3.
    idx = torch.full((300,), 3, dtype=torch.int64)
    _check_histogram(submission, idx, 5, 128, "300 indices all equal to 3 (5 bins), BLOCK=128")


# ==============================================================================================
# Task 8.3: the backward kernel
# ==============================================================================================
FAR_OUT = Case(
    "far_out_of_bounds",
    B=2,
    Q=6,
    M=2,
    D=4,
    shapes=((5, 7),),
    K=2,
    loc_lo=-0.5,
    loc_hi=1.5,
    seed=3,
)
# (case, BLOCK_Q): ragged last blocks (Q = 7 = 4 + 3, Q = 6 = 4 + 2), one block wider than Q
# (Q = 5 < 8), one exact block (Q = 4). A quarter of FAR_OUT's samples have all four corners out.
FP32_RUNS = [
    (MULTI_LEVEL, 8),
    (SINGLE, 4),
    (OUT_OF_BOUNDS, 4),
    (STANDARD_CASES[3], 4),
    (FAR_OUT, 4),
]
OUTPUTS = ("grad_attn", "grad_loc", "grad_value")
_WHICH = {"grad_value": 0, "grad_loc": 1, "grad_attn": 2}


def upstream(case: Case) -> torch.Tensor:
    """The seeded upstream gradient dLoss/d(output), (B, Q, M * D) fp32."""
    return torch.randn(case.B, case.Q, case.M * case.D, generator=seeded_generator(case.seed + 7))


def _value_guard(S: int, M: int, D: int) -> int:
    # An unmasked corner of a sample far outside its level lands up to about a level away.
    return 2 * S * M * pow2(D) + 64


def _point_guard(block_q: int, M: int, L: int, K: int) -> int:
    # Rows q >= Q of the last query block reach up to BLOCK_Q queries past the end.
    return 2 * block_q * M * L * K * 2 + 64


def _kernel_probe(module, inputs, grad_out, block_q):
    """Launch the submission's kernel as msda_backward does, fp32 accumulation, with every
    input between NaN guards, grad_value zeroed between zero guards and grad_loc / grad_attn
    filled with the sentinel; returns the three whole buffers."""
    dev = runtime.device()
    value, shapes, starts, loc, attn = (t.to(dev) for t in inputs)
    B, S, M, D = value.shape
    Q, L, K = loc.shape[1], loc.shape[3], loc.shape[4]
    vguard, pguard = _value_guard(S, M, D), _point_guard(block_q, M, L, K)
    gv_buf, grad_value = guarded(value.shape, 0.0, torch.float32, dev, vguard)
    gl_buf, grad_loc = sentinel_buffer(loc.shape, loc.dtype, dev, pguard)
    ga_buf, grad_attn = sentinel_buffer(attn.shape, attn.dtype, dev, pguard)
    g = grad_out.to(dev).reshape(B, Q, M, D)
    module.msda_backward_kernel[(cdiv(Q, block_q), B * M)](
        between_guards(value, vguard),
        shapes,
        starts,
        between_guards(loc, pguard),
        between_guards(attn, pguard),
        between_guards(g, pguard),
        grad_value,
        grad_loc,
        grad_attn,
        Q,
        S,
        M=M,
        D=D,
        L=L,
        K=K,
        BLOCK_Q=block_q,
        BLOCK_D=pow2(D),
    )
    return gv_buf, gl_buf, ga_buf


_RESULTS: dict = {}


def _kernel_buffers(submission, key, inputs, grad_out, block_q):
    """One kernel run serves the three per-output tests of a case (the same inputs, the same
    result); a crash or an exception is served to each of them alike."""
    if key not in _RESULTS:
        try:
            _RESULTS[key] = ("ok", _run(submission, _kernel_probe, inputs, grad_out, block_q))
        except SubmissionProblem as exc:
            _RESULTS[key] = ("raised", exc)
    kind, value = _RESULTS[key]
    if kind == "raised":
        raise value
    return value


def _check_point_buffer(buf, shape, dtype, guard, *, what, where):
    """Guards intact and every element written; returns the output of ``shape``."""
    return check_sentinel_buffer(
        buf,
        shape,
        dtype,
        guard,
        label=f"{what} on {where}",
        past_end="the kernel wrote {count} elements past its end (from {distance} element(s) "
        "after its last one): an unmasked tail, the rows q >= Q of the last query block; store "
        "under mask_q",
        before_start="the kernel wrote before its start",
        unwritten="{count} of {n} elements were never written (first at {at}); the wrapper "
        "allocates it with torch.empty, so every element must be stored by the program that "
        "owns it",
    )


def _check_grad_value_buffer(buf, shape, guard, ref, *, what, where, variants):
    n = math.prod(shape)
    buf = expect_tensor(buf, f"{what} on {where}", shape=(n + 2 * guard,), dtype=torch.float32)
    expect_close(
        buf[guard : guard + n].view(shape),
        ref,
        what=what,
        case=where,
        dtype=torch.float32,
        backward=True,
        variants=variants,
    )
    for name, part in (("before its start", buf[:guard]), ("past its end", buf[guard + n :])):
        touched = int((part != 0).sum())
        if touched:
            raise AssertionError(
                f"{what} on {where}: the kernel added into {touched} elements {name}: an atomic "
                f"whose mask lets an out-of-bounds corner through; use the corner's mask"
            )


def _check_kernel_output(
    submission, output, case, block_q, inputs=None, grad_out=None, variants=None, key=None
):
    inputs = inputs if inputs is not None else make_inputs(case, torch.float32)
    grad_out = grad_out if grad_out is not None else upstream(case)
    gv_buf, gl_buf, ga_buf = _kernel_buffers(
        submission, key or (case.id, block_q), inputs, grad_out, block_q
    )
    value, loc, attn = inputs.value, inputs.sampling_locations, inputs.attention_weights
    B, S, M, D = value.shape
    L, K = loc.shape[3], loc.shape[4]
    ref = reference_grads(value, inputs.spatial_shapes, loc, attn, grad_out)[_WHICH[output]]
    if variants is None:
        variants = grad_variants(inputs, grad_out, output)
    where = f"{case.describe()} in float32, BLOCK_Q={block_q}"
    what = f"msda_backward_kernel ({output})"
    if output == "grad_value":
        _check_grad_value_buffer(
            gv_buf,
            value.shape,
            _value_guard(S, M, D),
            ref,
            what=what,
            where=where,
            variants=variants,
        )
        return
    buf, shape = (gl_buf, loc.shape) if output == "grad_loc" else (ga_buf, attn.shape)
    res = _check_point_buffer(
        buf, shape, torch.float32, _point_guard(block_q, M, L, K), what=what, where=where
    )
    expect_close(
        res, ref, what=what, case=where, dtype=torch.float32, backward=True, variants=variants
    )


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
    base = make_inputs(case)
    loc = torch.tensor([0.43, 0.61]).expand(1, 8, 1, 1, 1, 2).contiguous()
    attn = torch.full((1, 8, 1, 1, 1), 0.75)
    grad_out = upstream(case)[:, :1].expand(1, 8, case.D).contiguous()
    inputs = MSDAInputs(base.value, base.spatial_shapes, base.level_start_index, loc, attn)
    ref = reference_grads(base.value, base.spatial_shapes, loc, attn, grad_out)[0]
    writes = (ref != 0).long() * case.Q
    survivors = (writes > 0).long() * cdiv(case.Q, block_q)  # one per program: lanes collapse
    variants = {"lost_updates": lost_update_grad_value(ref, writes, survivors)}
    variants.update(grad_variants(inputs, grad_out, "grad_value"))
    _check_kernel_output(
        submission, "grad_value", case, block_q, inputs, grad_out, variants, key="shared_pixels"
    )


CROWDED = Case(
    "crowded_level", B=1, Q=16, M=1, D=4, shapes=((2, 3),), K=2, loc_lo=-0.1, loc_hi=1.1, seed=9
)


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


# -- past 2**31: the reads of value and the scatter into grad_value ------------------------------
# Two batches of one 16384 x 16384 level with M * D = 12: batch 1 starts at element 12 * 2**28 of
# value and of grad_value, past 2**31. Both are sparse files mapped into memory (bigcase.py).
BIG = BigCase(
    "int64_offsets",
    B=2,
    Q=6,
    M=2,
    D=6,
    K=2,
    corners=(((1 << 14) - 12, (1 << 14) - 20), (4, 8)),
    seed=81,
)


def _int64_probe(module, case, block_q):
    """The backward kernel on the big case: every batch's window of grad_value, and grad_loc and
    grad_attn between guards filled with the sentinel."""
    dev = runtime.device()
    value, shapes, starts, loc, attn = case.big_inputs(dev)
    B, S, M, D = value.shape
    Q, L, K = loc.shape[1], loc.shape[3], loc.shape[4]
    pguard = _point_guard(block_q, M, L, K)
    grad_value = case.zeros_like_value(dev)
    gl_buf, grad_loc = sentinel_buffer(loc.shape, loc.dtype, dev, pguard)
    ga_buf, grad_attn = sentinel_buffer(attn.shape, attn.dtype, dev, pguard)
    g = case.upstream().to(dev).reshape(B, Q, M, D)
    module.msda_backward_kernel[(cdiv(Q, block_q), B * M)](
        value,
        shapes,
        starts,
        loc,
        attn,
        between_guards(g, pguard),
        grad_value,
        grad_loc,
        grad_attn,
        Q,
        S,
        M=M,
        D=D,
        L=L,
        K=K,
        BLOCK_Q=block_q,
        BLOCK_D=pow2(D),
    )
    return case.windows_of(grad_value), gl_buf, ga_buf


@pytest.mark.task("8.3", points=2)
@pytest.mark.rule("int64-offsets")
def test_backward_kernel_int64_offsets(submission):
    case, block_q = BIG, 4
    windows, gl_buf, ga_buf = run_probe(
        submission, _int64_probe, case, block_q, hint=f"{_CRASH_HINT}. {INT64_HINT}"
    )
    small = case.small_inputs()
    refs = reference_grads(
        small.value,
        small.spatial_shapes,
        small.sampling_locations,
        small.attention_weights,
        case.upstream(),
    )
    window_shape = (case.B, case.window, case.window, case.M, case.D)
    where = case.describe()
    pguard = _point_guard(block_q, case.M, 1, case.K)
    try:
        expect_close(
            expect_tensor(windows, "grad_value's windows", shape=window_shape),
            refs[0].view(window_shape),
            what="msda_backward_kernel (grad_value, the pixels the points touch)",
            case=where,
            dtype=torch.float32,
            backward=True,
        )
        for name, buf, ref, scale in (
            ("grad_loc", gl_buf, refs[1], case.scale),
            ("grad_attn", ga_buf, refs[2], 1.0),
        ):
            what = f"msda_backward_kernel ({name})"
            res = _check_point_buffer(
                buf, ref.shape, torch.float32, pguard, what=what, where=where
            )
            expect_close(
                res, ref * scale, what=what, case=where, dtype=torch.float32, backward=True
            )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {INT64_HINT}") from None


# -- through the given wrapper: half precision, the fp32 accumulator, the contract of lab 10 ----
def _wrapper_probe(module, inputs, grad_out, starts, kwargs):
    dev = runtime.device()
    value, shapes, given_starts, loc, attn = (t.to(dev) for t in inputs)
    return module.msda_backward(
        value, shapes, given_starts if starts else None, loc, attn, grad_out.to(dev), **kwargs
    )


def _check_wrapper(submission, case, dtype, *, starts=True, **kwargs):
    inputs = make_inputs(case, dtype)
    grad_out = upstream(case).to(dtype)
    try:
        res = _run(submission, _wrapper_probe, inputs, grad_out, starts, kwargs)
    except SubmissionError as exc:
        if dtype == torch.bfloat16 and "Unsupported data type" in str(exc):
            raise SubmissionError(
                f"{exc}; the interpreter has no bf16 atomic add: with fp32_grad_accum=True "
                f"grad_value must be accumulated in an fp32 buffer (and atomics must add in the "
                f"buffer's own dtype)"
            ) from None
        raise
    args = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    what = f"msda_backward({'level_start_index=None, ' if not starts else ''}{args})"
    where = f"{case.describe()} in {str(dtype).replace('torch.', '')}"
    if not isinstance(res, (tuple, list)) or len(res) != 3:
        raise AssertionError(f"{what} on {where}: expected a tuple of three tensors")
    refs = reference_grads(
        inputs.value,
        inputs.spatial_shapes,
        inputs.sampling_locations,
        inputs.attention_weights,
        grad_out,
    )
    for name, got, ref in zip(("grad_value", "grad_loc", "grad_attn"), res, refs):
        expect_close(
            got,
            ref,
            what=f"{what} {name}",
            case=where,
            dtype=dtype,
            backward=True,
            expect_dtype=dtype,
            variants=grad_variants(inputs, grad_out, name),
        )


@pytest.mark.task("8.3", points=2)
@pytest.mark.parametrize(
    ("dtype", "fp32_grad_accum"),
    [("float16", False), ("float16", True), ("bfloat16", True)],
    ids=["fp16", "fp16_fp32_accum", "bf16_fp32_accum"],
)
@pytest.mark.rule("fp32-accumulation", "accumulator-switch")
def test_backward_half_precision(submission, dtype, fp32_grad_accum):
    # bf16 only through the fp32 accumulator here: the interpreter has no bf16 atomic add (the GPU
    # stage runs the bf16 buffer too). Arithmetic must be fp32 whatever the dtype.
    _check_wrapper(
        submission, OUT_OF_BOUNDS, getattr(torch, dtype), BLOCK_Q=4, fp32_grad_accum=fp32_grad_accum
    )


@pytest.mark.task("8.3", points=1)
def test_backward_wrapper_defaults(submission):
    # As lab 10 calls it: level_start_index=None and the default BLOCK_Q (16 > Q).
    _check_wrapper(submission, OUT_OF_BOUNDS, torch.float32, starts=False)


# ==============================================================================================
# Task 8.4: on a real GPU
# ==============================================================================================
RACE_N, RACE_BINS, RACE_SEED = 1_000_000, 64, 21


def _race_indices() -> torch.Tensor:
    return torch.randint(0, RACE_BINS, (RACE_N,), generator=seeded_generator(RACE_SEED))


def _gpu_race_probe(module):
    import lab08_race

    idx = _race_indices().to(runtime.device())
    racy = lab08_race.racy_histogram(idx, RACE_BINS, 256)
    atomic = module.histogram_atomic(idx, RACE_BINS)
    torch.cuda.synchronize()
    return racy, atomic


@pytest.mark.task("8.4", points=2)
@pytest.mark.stage("gpu")
def test_race_at_scale_on_gpu(submission):
    racy, atomic = _run(submission, _gpu_race_probe)
    exact = torch.bincount(_race_indices(), minlength=RACE_BINS).float()
    expect_close(
        atomic,
        exact,
        what="histogram_atomic on the GPU",
        rtol=0,
        atol=0,
        case=f"{RACE_N:,} seeded indices into {RACE_BINS} bins, BLOCK=256",
    )
    kept = float(racy.sum())
    add_note(submission, f"race on the GPU: the racy histogram kept {kept:,.0f} of {RACE_N:,} "
                         f"updates ({100 * (1 - kept / RACE_N):.2f}% lost); the atomic one kept "
                         f"all of them")
    # Every block of 256 holds duplicate bins, so even one program alone loses updates.
    assert kept < RACE_N, f"the racy histogram kept all {RACE_N:,} updates on the GPU"


def _gpu_backward_probe(module, case, dtype_name, fp32_grad_accum):
    dtype = getattr(torch, dtype_name)
    dev = runtime.device()
    value, shapes, starts, loc, attn = make_inputs(case, dtype, device=dev)
    grad_out = upstream(case).to(device=dev, dtype=dtype)
    res = module.msda_backward(
        value, shapes, starts, loc, attn, grad_out, fp32_grad_accum=fp32_grad_accum
    )
    torch.cuda.synchronize()
    return res


@pytest.mark.task("8.4", points=2)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize(
    ("dtype", "fp32_grad_accum"),
    [("float32", False), ("float16", False), ("bfloat16", True), ("bfloat16", False)],
    ids=["fp32", "fp16", "bf16_fp32_accum", "bf16_native_atomics"],
)
def test_backward_decoder_on_gpu(submission, dtype, fp32_grad_accum):
    case = DECODER
    torch_dtype = getattr(torch, dtype)
    res = _run(submission, _gpu_backward_probe, case, dtype, fp32_grad_accum)
    inputs = make_inputs(case, torch_dtype)
    grad_out = upstream(case).to(torch_dtype)
    refs = reference_grads(
        inputs.value,
        inputs.spatial_shapes,
        inputs.sampling_locations,
        inputs.attention_weights,
        grad_out,
    )
    where = f"{case.describe()} in {dtype}, fp32_grad_accum={fp32_grad_accum}"
    if not isinstance(res, (tuple, list)) or len(res) != 3:
        raise AssertionError(f"msda_backward on {where}: expected a tuple of three tensors")
    for name, got, ref in zip(("grad_value", "grad_loc", "grad_attn"), res, refs):
        expect_close(
            got,
            ref,
            what=f"msda_backward {name} on the GPU",
            case=where,
            dtype=torch_dtype,
            backward=True,
            expect_dtype=torch_dtype,
        )


# -- Task 8.4: speed, against autograd of the PyTorch reference -----------------------------------
# The baseline is the backward of the grid_sample reference through autograd, which every copy of
# the kit carries; the lab 08 chip is absent from an exported lab 08, so its time is reported
# where it exists and never graded. Autograd cannot replay a backward without its forward inside
# a CUDA graph, so the reference's backward time is its forward + backward less its forward
# alone, both measured in the same run. fp32: atomics of the element type itself on every GPU
# (half-precision atomics are lab 09's subject). grid_sample's backward adds every channel of
# every corner with its own scattered atomic and copies the whole pyramid twice more on the way
# back; a kernel that follows the lab adds rows of D channels at once, so "no slower than the
# reference" is generous to right work and still fails a kernel that sleeps or serializes.
SPEED_CASE, SPEED_DTYPE = DECODER, "float32"
SPEED_LIMIT = REFERENCE_LIMIT  # your backward's time / the reference's backward's


def _speed_probe(module, case, dtype_name):
    """Probe (GPU): msda_backward, the reference's forward + backward and forward alone, and
    (where the kit has it) the lab 08 chip, on the same device inputs, timed side by side; the
    gradients of your first call come back."""
    from msda_labs.grading.timing import chip_function, race_all

    dtype = getattr(torch, dtype_name)
    dev = runtime.device()
    value, shapes, starts, loc, attn = make_inputs(case, dtype, device=dev)
    grad_out = upstream(case).to(device=dev, dtype=dtype)
    # The reference reads the level sizes as Python ints: from a CPU copy, so that no call waits
    # for the device (a call that waits cannot be captured in a CUDA graph).
    host_shapes = shapes.cpu()
    leaves = tuple(t.detach().requires_grad_() for t in (value, loc, attn))

    def reference_forward_backward():
        out = msda_reference(leaves[0], host_shapes, leaves[1], leaves[2])
        return torch.autograd.grad(out, leaves, grad_out)

    def reference_forward():
        with torch.no_grad():
            return msda_reference(leaves[0], host_shapes, leaves[1], leaves[2])

    chip = chip_function("lab08", "msda_backward")
    return race_all(
        {
            "yours": lambda: module.msda_backward(value, shapes, starts, loc, attn, grad_out),
            "reference": reference_forward_backward,
            "reference_forward": reference_forward,
            "chip": None
            if chip is None
            else (lambda: chip(value, shapes, starts, loc, attn, grad_out)),
        }
    )


@lru_cache(maxsize=1)
def _speed_reference(case: Case, dtype_name: str):
    """fp32 autograd gradients of the reference: (grad_value, grad_loc, grad_attn)."""
    dtype = getattr(torch, dtype_name)
    inputs = make_inputs(case, dtype)
    return reference_grads(
        inputs.value,
        inputs.spatial_shapes,
        inputs.sampling_locations,
        inputs.attention_weights,
        upstream(case).to(dtype),
    )


@pytest.mark.task("8.4", points=2)
@pytest.mark.stage("gpu")
def test_backward_speed_against_the_reference(submission):
    case, dtype_name = SPEED_CASE, SPEED_DTYPE
    measured = _run(submission, _speed_probe, case, dtype_name)
    where = f"{case.describe()} in {dtype_name}"
    res = measured.get("outputs", {}).get("yours") if isinstance(measured, dict) else None
    # A fast wrong answer earns nothing: the gradients of the timed call are checked first.
    if not isinstance(res, (tuple, list)) or len(res) != 3:
        raise AssertionError(
            f"msda_backward (the call that is timed) on {where}: expected a tuple of three tensors"
        )
    names = ("grad_value", "grad_loc", "grad_attn")
    for name, got, ref in zip(names, res, _speed_reference(case, dtype_name)):
        expect_close(
            got,
            ref,
            what=f"msda_backward {name} (the call that is timed) on the GPU",
            case=where,
            dtype=getattr(torch, dtype_name),
            backward=True,
            expect_dtype=getattr(torch, dtype_name),
        )
    check_reference_speed(
        measured,
        what=f"msda_backward on {where}",
        reference_label="the backward of the PyTorch reference (grid_sample, autograd)",
        chip_label="the lab 08 chip",
        limit=SPEED_LIMIT,
        submission=submission,
    )
