"""Grading tests of lab 04 (hello, Triton). Run them with `nox -s lab04`.

The probes (probes_lab04.py) launch the student's kernel into an output between guard bands,
pre-filled with a sentinel bit pattern: an element never written and an element written past
either end are both visible, which the interpreter (no bounds checks) would otherwise hide. Inputs
sit between guard bands too, so a stray read returns NaN (or, for indices, a harmless -1) instead
of whatever memory lies there. Here, the judge: cases, the buffers' checks, the comparisons.
"""

import math

import probes_lab04 as probes
import pytest
import torch

from msda_labs.grading import expect_close
from msda_labs.grading.judge.guards import check_sentinel_buffer, literal, run_probe
from msda_labs.mistakes import msda_variants
from msda_labs.student.cases import tolerance
from msda_labs.truth.cases import Case, make_inputs, seeded_generator
from msda_labs.truth.reference import msda_reference

TASKS = {"4.1": "copy2d_kernel", "4.2": "gather_kernel", "4.3": "bilinear_kernel"}

_CRASH_HINT = ("in the interpreter a crash is almost always a load or store at a wild address "
               "(an unmasked lane, or an offset computed wrongly)")


def _run(submission, probe, *args):
    return run_probe(submission, probe, *args, hint=_CRASH_HINT)


def _inside_right(buf, shape, dtype, guard: int, expected) -> bool:
    """Whether every element inside ``out`` holds its expected value (to half precision), read
    off the buffer before the guard bands are judged: an unmasked tail leaves them right, and
    offsets computed wrongly (a row stride of R or BLOCK_C, BLOCK_D for D) do not."""
    n = math.prod(shape)
    if expected is None or not isinstance(buf, torch.Tensor) or buf.dtype != dtype \
            or buf.numel() != n + 2 * guard:
        return True
    inside = buf[guard:guard + n].view(shape).double()
    return bool(torch.isclose(inside, expected.double(), rtol=1e-2, atol=1e-2).all())


def _unpack(buf, shape, dtype, guard: int, *, where: str, overrun_hint: str,
            unwritten_hint: str, expected: torch.Tensor, rtol: float = 0.0,
            atol: float = 0.0) -> torch.Tensor:
    """Check the guard bands and that every element was written; return the output. A write past
    the end is called an unmasked tail only when every in-bounds element is right."""
    return check_sentinel_buffer(
        buf, shape, dtype, guard, label=where, expected=expected, rtol=rtol, atol=atol,
        tail=overrun_hint,
        past_end="the kernel wrote {count} elements past the end of out (the nearest {gap})",
        before_start="the kernel wrote before the start of out; an offset went negative",
        unwritten=("{count} of {n} output elements were never written (first at {at}); "
                   + literal(unwritten_hint)))


# -- Task 4.1: 2-D tile copy ----------------------------------------------------------------------
_ROW_MASK = ("this is an unmasked tail: the rows past R of the bottom tiles were stored; the mask "
             "must include offs_r < R")
_COL_MASK = ("this is an unmasked tail: the columns past C of the right-hand tiles were stored; "
             "the mask must include offs_c < C")
_BOTH_MASKS = ("an unmasked tail: rows past R or columns past C were stored; the mask must be "
               "(offs_r < R)[:, None] & (offs_c < C)[None, :] on the load and on the store")
_COPY_UNWRITTEN = ("check that element (r, c) is at offset r * C + c (C, not BLOCK_C, is the "
                   "distance between rows) and that the tiles cover the whole matrix")
_COPY_OFFSETS = ("the elements inside out are wrong as well, so this is not only a mask: the "
                 "offsets are wrong; element (r, c) is at r * C + c (C, the number of columns, is "
                 "the distance between rows: not R, not BLOCK_C)")


def _check_copy(submission, shape, block_r, block_c, dtype=torch.float32, *, seed: int,
                overrun_hint: str):
    x = torch.randn(*shape, generator=seeded_generator(seed)).to(dtype)
    buf = _run(submission, probes.copy_probe, x, block_r, block_c)
    where = (f"copy2d_kernel on a {shape[0]}x{shape[1]} {str(dtype).replace('torch.', '')} "
             f"matrix with {block_r}x{block_c} tiles")
    res = _unpack(buf, shape, dtype, probes.copy_guard(block_r, block_c), where=where,
                  overrun_hint=overrun_hint, unwritten_hint=_COPY_UNWRITTEN, expected=x)
    expect_close(res, x, what=where, rtol=0.0, atol=0.0)


@pytest.mark.task("4.1", points=2)
@pytest.mark.rule("write-once", "mask-query-tail", "mask-channel-tail")
def test_copy_ragged_on_both_axes(submission):
    # 37 x 21 in 16 x 16 tiles: a 3 x 2 grid whose last row and column of tiles are ragged.
    _check_copy(submission, (37, 21), 16, 16, seed=41, overrun_hint=_BOTH_MASKS)


@pytest.mark.task("4.1", points=1)
@pytest.mark.rule("mask-channel-tail")
def test_copy_masks_the_column_tail(submission):
    # Rows divide evenly into tiles; only the columns past C = 21 can escape.
    _check_copy(submission, (32, 21), 16, 16, seed=42, overrun_hint=_COL_MASK)


@pytest.mark.task("4.1", points=1)
@pytest.mark.rule("mask-query-tail")
def test_copy_masks_the_row_tail(submission):
    # Columns divide evenly into tiles; only the rows past R = 37 can escape.
    _check_copy(submission, (37, 32), 16, 16, seed=43, overrun_hint=_ROW_MASK)


@pytest.mark.task("4.1", points=1)
def test_copy_tile_larger_than_matrix_fp16(submission):
    # One 8 x 64 tile over a 5 x 40 fp16 matrix: both axes ragged inside a single program.
    _check_copy(submission, (5, 40), 8, 64, torch.float16, seed=44, overrun_hint=_BOTH_MASKS)


# -- Task 4.2: gather -----------------------------------------------------------------------------
_GATHER_OVERRUN = ("this is an unmasked tail: lanes past n of the last block were stored; store "
                   "under the mask offs < n")
_GATHER_UNWRITTEN = "out[i] must be written for every i < n: store at out_ptr + offs"


def _check_gather(submission, src, idx, block, *, what, variants=None):
    buf = _run(submission, probes.gather_probe, src, idx, block)
    where = (f"gather_kernel with {src.numel()} values, {idx.numel()} indices and "
             f"BLOCK={block} ({what})")
    res = _unpack(buf, (idx.numel(),), src.dtype, probes.gather_guard(block), where=where,
                  overrun_hint=_GATHER_OVERRUN, unwritten_hint=_GATHER_UNWRITTEN,
                  expected=src[idx])
    expect_close(res, src[idx], what=where, rtol=0.0, atol=0.0, variants=variants)


@pytest.mark.task("4.2", points=2)
@pytest.mark.rule("mask-query-tail")
def test_gather_one_ragged_block(submission):
    gen = seeded_generator(51)
    src = torch.randn(500, generator=gen)
    idx = torch.randint(0, 500, (123,), generator=gen)
    _check_gather(submission, src, idx, 256, what="one program, 133 lanes masked off")


@pytest.mark.task("4.2", points=1)
def test_gather_many_blocks_with_repeats(submission):
    gen = seeded_generator(52)
    src = torch.randn(64, generator=gen)
    idx = torch.randint(0, 64, (1000,), generator=gen)
    idx[:2] = torch.tensor([0, 63])  # both ends of src
    _check_gather(submission, src, idx, 128, what="8 programs, repeated indices")


@pytest.mark.task("4.2", points=1)
def test_gather_is_not_a_scatter(submission):
    gen = seeded_generator(53)
    src = torch.randn(200, generator=gen)
    idx = torch.randperm(200, generator=gen)
    variants = {
        "scatter": (src[torch.argsort(idx)],
                    "a scatter, out[idx[i]] = src[i], instead of the gather out[i] = src[idx[i]]"),
        "ignored": (src.clone(), "the indices ignored: out[i] = src[i] instead of src[idx[i]]"),
    }
    _check_gather(submission, src, idx, 64, what="a permutation", variants=variants)


# -- Task 4.3: bilinear sampling ------------------------------------------------------------------
_Q_OVERRUN = ("this is an unmasked tail: rows past Q of the last query block were stored; the "
              "store mask must include mask_q")
_QD_OVERRUN = ("this is an unmasked tail: the store mask must be mask_q[:, None] & "
               "mask_d[None, :], so that neither queries past Q nor channels past D are written")
_BILINEAR_UNWRITTEN = "out[q, d] sits at offset q * D + d: store every (q < Q, d < D)"
_BILINEAR_OFFSETS = ("the outputs inside out are wrong as well, so this is not only a mask: an "
                     "offset is wrong; out[q, d] sits at q * D + d, and pixel (row, col) of the "
                     "image at (row * W + col) * D (D, not BLOCK_D, is the distance between two "
                     "pixels)")


def _image_case(case: Case, dtype=torch.float32):
    """One image (H, W, D), Q locations (Q, 2) and the same problem as MSDA inputs (weights 1)."""
    inputs = make_inputs(case, dtype)
    value, shapes, starts, loc, attn = inputs
    inputs = inputs._replace(attention_weights=torch.ones_like(attn))
    (H, W), D, Q = case.shapes[0], case.D, case.Q
    return value.reshape(H, W, D), loc.reshape(Q, 2), inputs


def _check_bilinear(submission, case: Case, block_q: int, dtype=torch.float32, *,
                    overrun_hint=_QD_OVERRUN):
    image, loc, inputs = _image_case(case, dtype)
    buf = _run(submission, probes.bilinear_probe, image, loc, block_q)
    (H, W), D, Q = case.shapes[0], case.D, case.Q
    where = (f"bilinear_kernel on a {H}x{W}x{D} {str(dtype).replace('torch.', '')} image at "
             f"{Q} locations")
    if case.knots:
        where += " on exact pixel knots"
    elif case.loc_lo < 0 or case.loc_hi > 1:
        where += f" in [{case.loc_lo:g}, {case.loc_hi:g}) (some outside the image)"
    where += f", BLOCK_Q={block_q}"
    value, shapes, _starts, loc6, ones = inputs
    ref = msda_reference(value.double(), shapes, loc6.double(), ones.double()).reshape(Q, D)
    rtol, atol = tolerance(dtype)
    res = _unpack(buf, (Q, D), dtype, probes.bilinear_guard(block_q, D), where=where,
                  overrun_hint=overrun_hint, unwritten_hint=_BILINEAR_UNWRITTEN, expected=ref,
                  rtol=rtol, atol=atol)
    variants = {name: (out.reshape(Q, D), why)
                for name, (out, why) in msda_variants(inputs).items()}
    expect_close(res, ref, what=where, dtype=dtype, variants=variants)


def _image(id_, H, W, D, Q, **kw) -> Case:
    return Case(id_, B=1, Q=Q, M=1, D=D, shapes=((H, W),), K=1, **kw)


@pytest.mark.task("4.3", points=2)
@pytest.mark.rule("mask-corners", "zero-padding", "floor")
def test_bilinear_out_of_bounds(submission):
    # One program of 8 lanes for 6 queries; locations reach 20% past every border.
    case = _image("oob", 5, 7, 4, 6, loc_lo=-0.2, loc_hi=1.2, seed=61)
    _check_bilinear(submission, case, 8)


@pytest.mark.task("4.3", points=2)
@pytest.mark.rule("mask-channel-tail", "xy-order", "half-pixel", "fp32-accumulation")
def test_bilinear_odd_channels_many_blocks(submission):
    # D = 5 inside BLOCK_D = 8; Q = 37 in three programs of 16, the last one ragged.
    case = _image("odd_d", 6, 5, 5, 37, loc_lo=-0.1, loc_hi=1.1, seed=62)
    _check_bilinear(submission, case, 16)


@pytest.mark.task("4.3", points=1)
@pytest.mark.rule("mask-query-tail")
def test_bilinear_query_tail_is_masked(submission):
    # D = 4 is a power of two, so only rows past Q = 10 of the second program can escape.
    case = _image("query_tail", 3, 4, 4, 10, seed=63)
    _check_bilinear(submission, case, 8, overrun_hint=_Q_OVERRUN)


@pytest.mark.task("4.3", points=1)
@pytest.mark.rule("half-pixel", "floor")
def test_bilinear_exact_knots(submission):
    # Pixel centres and edges, the borders 0 and 1 included: floor at exact integers.
    case = _image("knots", 4, 8, 3, 24, seed=64, knots=True)
    _check_bilinear(submission, case, 32)


@pytest.mark.task("4.3", points=1)
@pytest.mark.rule("fp32-accumulation")
def test_bilinear_fp16_in_fp16_out(submission):
    case = _image("fp16", 6, 7, 6, 12, loc_lo=-0.1, loc_hi=1.1, seed=65)
    _check_bilinear(submission, case, 16, torch.float16)
