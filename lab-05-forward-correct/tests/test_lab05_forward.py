"""Grading tests of lab 05 (the forward kernel). Run them with `nox -s lab05`.

The kernel is launched by the probes themselves, with the signature the lab fixes, into an output
surrounded by guard bands and pre-filled with a sentinel bit pattern: an element never written and
an element written past either end are both visible, which the interpreter (no bounds checks)
would otherwise hide. Inputs sit between guard bands of NaN, so a read outside them poisons the
result instead of reading whatever memory lies there.
"""

import os
import tempfile
from functools import lru_cache

import pytest
import torch

from msda_labs.gpu.speed import REFERENCE_LIMIT, check_reference_speed
from msda_labs.grading import expect_close, expect_tensor
from msda_labs.grading.guards import (
    between_guards,
    cdiv,
    check_sentinel_buffer,
    literal,
    pow2,
    run_probe,
    sentinel_buffer,
)
from msda_labs.grading.peaked import (
    ACC_HINT,
    FP16_ACC_MESSAGE,
    PEAKED,
    fp16_running_sum,
    peaked_inputs,
)
from msda_labs.mistakes import msda_variants, pixel_reads
from msda_labs.student import runtime
from msda_labs.truth.cases import (
    DECODER,
    MULTI_LEVEL,
    SINGLE,
    STANDARD_CASES,
    Case,
    MSDAInputs,
    make_inputs,
    seeded_generator,
)
from msda_labs.truth.reference import msda_reference

LAB = "lab05"
TITLE = "The forward kernel, correct"
MODE = "interpret"
TASKS = {
    "5.1": "msda_forward_kernel",
    "5.2": "query tiles and masks",
    "5.3": "fp32 accumulation",
    "5.4": "int64 offsets",
    "5.5": "on a real GPU",
}


# -- probe side (runs in the isolated child) -----------------------------------------------------
def _guard_size(block_q: int, M: int, D: int) -> int:
    # Enough room for the widest overrun a missing mask can make: a whole block of rows past Q.
    return max(64, 2 * block_q * M * pow2(D))


def _launch(module, value, shapes, starts, loc, attn, out, block_q):
    """The launch msda_forward makes, against the kernel's fixed signature."""
    B, S, M, D = value.shape
    Q, L, K = loc.shape[1], loc.shape[3], loc.shape[4]
    grid = (cdiv(Q, block_q), B * M)
    module.msda_forward_kernel[grid](value, shapes, starts, loc, attn, out, Q, S, M=M, D=D, L=L,
                                     K=K, BLOCK_Q=block_q, BLOCK_D=pow2(D))


def _kernel_probe(module, inputs, block_q):
    """Launch the student's kernel on guarded copies of ``inputs``; return the whole output
    buffer, guard bands included."""
    dev = runtime.device()
    value, shapes, starts, loc, attn = (t.to(dev) for t in inputs)
    B, S, M, D = value.shape
    guard = _guard_size(block_q, M, D)
    buf, out = sentinel_buffer((B, loc.shape[1], M, D), value.dtype, dev, guard)
    _launch(module, between_guards(value, 16), shapes, starts, between_guards(loc, 16),
            between_guards(attn, 16), out, block_q)
    return buf


def _wrapper_probe(module, inputs, **kwargs):
    dev = runtime.device()
    value, shapes, starts, loc, attn = (t.to(dev) for t in inputs)
    return module.msda_forward(value, shapes, None, loc, attn, **kwargs)


def _gpu_probe(module, case, dtype_name):
    """Build the case on the device, run msda_forward, return the output (compared on the CPU)."""
    dtype = getattr(torch, dtype_name)
    value, shapes, starts, loc, attn = make_inputs(case, dtype, device=runtime.device())
    out = module.msda_forward(value, shapes, starts, loc, attn)
    torch.cuda.synchronize()
    return out


# -- judge side -----------------------------------------------------------------------------------
_CRASH_HINT = ("in the interpreter a crash is almost always a load or store at a wild address: "
               "an unmasked lane, or an offset that overflowed")


def _check_buffer(buf, shape, dtype, block_q: int, *, what: str, case: str,
                  overrun_hint: str) -> torch.Tensor:
    """Guard bands intact and every element written; returns the (B, Q, M, D) = ``shape`` output
    as (B, Q, M * D)."""
    B, Q, M, D = shape
    out = check_sentinel_buffer(
        buf, (B, Q, M, D), dtype, _guard_size(block_q, M, D), label=f"{what} on {case}",
        past_end=("the kernel wrote {count} elements past the end of out (the nearest {gap}); "
                  + literal(overrun_hint)),
        before_start="the kernel wrote {count} elements before the start of out; an offset went "
                     "negative",
        unwritten="{count} of {n} output elements were never written (first at out{at} of "
                  "(B, Q, M, D)); every (b, q, m, d) must be stored by exactly one program: "
                  "check the grid decode (b, m), offs_q and the store offsets "
                  "(b * Q + q) * M + m")
    return out.view(B, Q, M * D)


_OVERRUN = ("this is an unmasked tail: the store mask must be mask_q[:, None] & mask_d[None, :], "
            "so that neither the rows past Q nor the channels past D are written")


def _reference(inputs: MSDAInputs) -> torch.Tensor:
    value, shapes, _starts, loc, attn = inputs
    return msda_reference(value.double(), shapes, loc.double(), attn.double())


def _check_kernel(submission, inputs, case: Case, dtype, block_q: int, *, what: str,
                  overrun_hint: str = _OVERRUN, variants=None, hint: str = ""):
    buf = run_probe(submission, _kernel_probe, inputs, block_q, hint=_CRASH_HINT)
    desc = f"{case.describe()} in {str(dtype).replace('torch.', '')}, BLOCK_Q={block_q}"
    B, _, M, D = inputs.value.shape
    shape = (B, inputs.sampling_locations.shape[1], M, D)
    res = _check_buffer(buf, shape, inputs.value.dtype, block_q, what=what, case=desc,
                        overrun_hint=overrun_hint)
    try:
        expect_close(res, _reference(inputs), what=what, case=desc, dtype=dtype,
                     variants=variants if variants is not None else msda_variants(inputs))
    except AssertionError as exc:
        if hint and "this is exactly" not in str(exc):
            raise AssertionError(f"{exc}; {hint}") from None
        raise


# -- Task 5.1: the math, fp32 ---------------------------------------------------------------------
@pytest.mark.task("5.1", points=2)
@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
@pytest.mark.rule(
    "mask-corners", "zero-padding", "half-pixel", "floor", "xy-order", "level-starts",
    "write-once",
)
def test_kernel_matches_reference(submission, case):
    inputs = make_inputs(case, torch.float32)
    _check_kernel(submission, inputs, case, torch.float32, 4, what="msda_forward_kernel")


@pytest.mark.task("5.1", points=1)
@pytest.mark.rule("level-starts")
def test_msda_forward_derives_level_starts(submission):
    # As labs 06 and 10 call it: the wrapper, level_start_index=None, the default BLOCK_Q (> Q).
    case = MULTI_LEVEL
    inputs = make_inputs(case, torch.float32)
    res = run_probe(submission, _wrapper_probe, inputs, hint=_CRASH_HINT)
    B, _, M, D = inputs.value.shape
    expect_tensor(res, "msda_forward(..., level_start_index=None, ...)",
                  shape=(B, case.Q, M * D), dtype=torch.float32)
    expect_close(res, _reference(inputs), what="msda_forward with level_start_index=None",
                 case=case.describe(), dtype=torch.float32, variants=msda_variants(inputs))


# -- Task 5.2: query tiles and masks --------------------------------------------------------------
@pytest.mark.task("5.2", points=1)
@pytest.mark.parametrize(("case", "block_q"), [(SINGLE, 1), (MULTI_LEVEL, 2), (MULTI_LEVEL, 16)],
                         ids=["BLOCK_Q1", "BLOCK_Q2", "BLOCK_Q16"])
@pytest.mark.rule("mask-query-tail", "write-once")
def test_any_block_q(submission, case, block_q):
    # One query per program (Q = 7 programs), a ragged tail (Q = 5 = 2 + 2 + 1), and one block
    # wider than Q.
    inputs = make_inputs(case, torch.float32)
    _check_kernel(submission, inputs, case, torch.float32, block_q, what="msda_forward_kernel")


QUERY_TAIL = Case("query_tail", B=2, Q=6, M=2, D=4, shapes=((3, 5),), K=2, loc_lo=-0.1,
                  loc_hi=1.1, seed=3)
CHANNEL_TAIL = Case("channel_tail", B=1, Q=8, M=2, D=3, shapes=((4, 3), (2, 2)), K=2, seed=4)


@pytest.mark.task("5.2", points=2)
@pytest.mark.rule("mask-query-tail")
def test_store_masks_the_query_tail(submission):
    # D = 4 is a power of two, so only the rows past Q of the last block can go astray.
    inputs = make_inputs(QUERY_TAIL, torch.float32)
    _check_kernel(submission, inputs, QUERY_TAIL, torch.float32, 4, what="msda_forward_kernel",
                  overrun_hint="they are the rows q >= Q of the ragged last query block: the "
                               "store mask ignores the query mask mask_q (an unmasked tail)")


@pytest.mark.task("5.2", points=2)
@pytest.mark.rule("mask-channel-tail")
def test_store_masks_the_channel_tail(submission):
    # Q = 8 is a multiple of BLOCK_Q = 4, so only the channels d >= D = 3 can go astray.
    inputs = make_inputs(CHANNEL_TAIL, torch.float32)
    _check_kernel(submission, inputs, CHANNEL_TAIL, torch.float32, 4, what="msda_forward_kernel",
                  overrun_hint="they are channels d >= D of the last row (BLOCK_D = 4 > D = 3): "
                               "the store mask ignores mask_d (an unmasked tail)")


# -- Task 5.3: half-precision inputs, fp32 accumulation -------------------------------------------
@pytest.mark.task("5.3", points=1)
@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
@pytest.mark.rule("fp32-accumulation")
def test_fp16_matches_reference(submission, case):
    inputs = make_inputs(case, torch.float16)
    _check_kernel(submission, inputs, case, torch.float16, 4, what="msda_forward_kernel")


@pytest.mark.task("5.3", points=3)
@pytest.mark.rule("fp32-accumulation")
def test_accumulates_in_fp32(submission):
    inputs = peaked_inputs()
    variants = {"fp16_acc": (fp16_running_sum(inputs), FP16_ACC_MESSAGE)}
    _check_kernel(submission, inputs, PEAKED, torch.float16, 4, what="msda_forward_kernel",
                  variants=variants, hint=ACC_HINT)


# -- Task 5.4: int64 offsets ----------------------------------------------------------------------
# Two batches of one 16384 x 16384 level with M * D = 8: batch 1 starts at element 2**31, one past
# the largest int32. The value tensor (2**32 fp32 elements, 16 GiB) is a sparse file mapped into
# memory: only the pages the test writes or the kernel reads take memory, a few hundred KiB.
HUGE = Case("int64_offsets", B=2, Q=6, M=1, D=8, shapes=((1 << 14, 1 << 14),), K=2, seed=11)
_WINDOW = 8  # each batch's locations stay inside one 8 x 8 window of pixels
_CORNERS = ((1 << 14) - 12, (1 << 14) - 20), (4, 8)  # window (row, col) of batch 0 and batch 1
_INT64_HINT = ("this case differs from the small ones only in size: batch 1 starts at value "
               "element 2**31, past the int32 range; offsets computed in int32 (program ids and "
               "tl.arange are int32) wrap around. Cast b and offs_q to tl.int64 before they "
               "multiply strides")


def _huge_parts():
    """The data of the int64 case: window images, locations, weights (all on the CPU)."""
    case = HUGE
    gen = seeded_generator(case.seed)
    H, W = case.shapes[0]
    windows = torch.randn(case.B, _WINDOW, _WINDOW, case.M * case.D, generator=gen)
    # Pixel positions inside the window, in steps of 1/64: loc = (col + 0.5 + u) / W is exact in
    # fp32, so x * W - 0.5 is exact too and the reference sees the very same coordinates.
    u = torch.randint(0, 64 * (_WINDOW - 1), (case.B, case.Q, case.M, 1, case.K, 2),
                      generator=gen).double() / 64
    loc = torch.empty_like(u)
    for b, (r0, c0) in enumerate(_CORNERS):
        loc[b, ..., 0] = (c0 + 0.5 + u[b, ..., 0]) / W
        loc[b, ..., 1] = (r0 + 0.5 + u[b, ..., 1]) / H
    attn = torch.rand(case.B, case.Q, case.M, 1, case.K, generator=gen)
    return windows, loc.float(), attn / attn.sum(-1, keepdim=True)


def _huge_value(device: str) -> torch.Tensor:
    """(B, S, M, D) fp32 zeros with the two windows written in; sparse on the CPU."""
    case = HUGE
    S = case.S
    n = case.B * S * case.M * case.D
    if device == "cpu":
        fd, path = tempfile.mkstemp(prefix="msda-int64-")
        try:
            os.ftruncate(fd, n * 4)
            os.close(fd)
            flat = torch.from_file(path, shared=True, size=n, dtype=torch.float32)
        finally:
            os.unlink(path)  # the mapping outlives the name
        value = flat.view(case.B, S, case.M, case.D)
    else:
        value = torch.zeros(case.B, S, case.M, case.D, device=device)
    windows, _, _ = _huge_parts()
    W = case.shapes[0][1]
    for b, (r0, c0) in enumerate(_CORNERS):
        for r in range(_WINDOW):
            s = (r0 + r) * W + c0
            value[b, s:s + _WINDOW] = windows[b, r].view(_WINDOW, case.M, case.D).to(device)
    return value


def _huge_probe(module):
    dev = runtime.device()
    value = _huge_value(dev)
    _, loc, attn = _huge_parts()
    case = HUGE
    shapes = torch.tensor(case.shapes, dtype=torch.int64, device=dev)
    starts = torch.zeros(1, dtype=torch.int64, device=dev)
    buf, out = sentinel_buffer((case.B, case.Q, case.M, case.D), torch.float32, dev,
                               _guard_size(4, case.M, case.D))
    _launch(module, value, shapes, starts, loc.to(dev), attn.to(dev), out, 4)
    if dev != "cpu":
        torch.cuda.synchronize()
    return buf


def _huge_reference() -> torch.Tensor:
    case = HUGE
    windows, loc, attn = _huge_parts()
    H, W = case.shapes[0]
    out = torch.zeros(case.B, case.Q, case.M * case.D, dtype=torch.float64)
    for b, (r0, c0) in enumerate(_CORNERS):
        img = windows[b].double()
        for k in range(case.K):
            px = loc[b, :, 0, 0, k].double() * torch.tensor([W, H]) - 0.5
            px -= torch.tensor([c0, r0], dtype=torch.float64)
            out[b] += attn[b, :, 0, 0, k].double()[:, None] * pixel_reads(img, px)
    return out


def _check_huge(submission):
    case = HUGE
    hint = f"{_CRASH_HINT}. {_INT64_HINT}"
    buf = run_probe(submission, _huge_probe, hint=hint)
    desc = (f"case '{case.id}' (B=2 Q=6 M=1 D=8 K=2, one 16384x16384 level: 2**32 value "
            f"elements)")
    try:
        res = _check_buffer(buf, (case.B, case.Q, case.M, case.D), torch.float32, 4,
                            what="msda_forward_kernel", case=desc, overrun_hint=_OVERRUN)
        expect_close(res, _huge_reference(), what="msda_forward_kernel", case=desc,
                     dtype=torch.float32)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {_INT64_HINT}") from None


@pytest.mark.task("5.4", points=3)
@pytest.mark.rule("int64-offsets")
def test_int64_offsets_past_2_31(submission):
    _check_huge(submission)


@pytest.mark.task("5.4", points=2)
@pytest.mark.stage("gpu")
@pytest.mark.rule("int64-offsets")
def test_int64_offsets_past_2_31_on_gpu(submission):
    _check_huge(submission)


# -- Task 5.5: a real GPU, real sizes, every dtype ------------------------------------------------
ENCODER = Case("encoder", B=2, Q=5100, M=8, D=32, shapes=((48, 80), (24, 40), (12, 20), (6, 10)),
               K=4, loc_lo=-0.1, loc_hi=1.1, seed=5)


@pytest.mark.task("5.5", points=2)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", [DECODER, ENCODER], ids=lambda c: c.id)
def test_forward_on_gpu(submission, case, dtype):
    inputs = make_inputs(case, getattr(torch, dtype))
    res = run_probe(submission, _gpu_probe, case, dtype)
    expect_close(res, _reference(inputs), what="msda_forward on the GPU",
                 case=f"{case.describe()} in {dtype}", dtype=getattr(torch, dtype))



# -- Task 5.5: speed, against the PyTorch reference -----------------------------------------------
# The baseline is the grid_sample reference, which every copy of the kit carries; the lab 05 chip
# is absent from an exported lab 05, so its time is reported where it exists and never graded.
# The reference copies the whole value pyramid into grid_sample's layout, then gathers every
# channel of every corner with its own strided read, then stacks, weights and sums in three more
# passes: a kernel that follows the lab does one pass and is several times faster, so "no slower
# than the reference" is generous to right work and still fails a kernel that sleeps or
# serializes.
SPEED_CASE, SPEED_DTYPE = DECODER, "float16"
SPEED_LIMIT = REFERENCE_LIMIT  # your time / the reference's


def _speed_probe(module, case, dtype_name):
    """Probe (GPU): msda_forward, the reference and (where the kit has it) the lab 05 chip on the
    same device inputs, timed side by side; the output of your first call comes back."""
    from msda_labs.gpu.speed import chip_function, race_all

    dtype = getattr(torch, dtype_name)
    value, shapes, starts, loc, attn = make_inputs(case, dtype, device=runtime.device())
    # The reference reads the level sizes as Python ints: from a CPU copy, so that no call waits
    # for the device (a call that waits cannot be captured in a CUDA graph).
    host_shapes = shapes.cpu()
    chip = chip_function("lab05", "msda_forward")
    return race_all({
        "yours": lambda: module.msda_forward(value, shapes, starts, loc, attn),
        "reference": lambda: msda_reference(value, host_shapes, loc, attn),
        "chip": None if chip is None else (lambda: chip(value, shapes, starts, loc, attn)),
    })


@lru_cache(maxsize=2)
def _case_reference(case: Case, dtype_name: str) -> torch.Tensor:
    return _reference(make_inputs(case, getattr(torch, dtype_name)))


@pytest.mark.task("5.5", points=2)
@pytest.mark.stage("gpu")
def test_forward_speed_against_the_reference(submission):
    case, dtype_name = SPEED_CASE, SPEED_DTYPE
    measured = run_probe(submission, _speed_probe, case, dtype_name)
    desc = f"{case.describe()} in {dtype_name}"
    out = measured.get("outputs", {}).get("yours") if isinstance(measured, dict) else None
    # A fast wrong answer earns nothing: the output of the timed call is checked first.
    expect_close(out, _case_reference(case, dtype_name),
                 what="msda_forward (the call that is timed) on the GPU", case=desc,
                 dtype=getattr(torch, dtype_name))
    check_reference_speed(measured, what=f"msda_forward on {desc}", chip_label="the lab 05 chip",
                          limit=SPEED_LIMIT, submission=submission)
