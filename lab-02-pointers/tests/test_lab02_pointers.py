"""Grading tests of lab 02 (tensors are pointers). Run them with `nox -s lab02`.

The child runs your functions through ``probes_lab02.py``; the judge compares with
``msda_labs.truth`` and names a familiar mistake from ``msda_labs.mistakes``. Every call of
``flat_msda`` runs watched: one that reaches library interpolation (by any name), or that never
reads ``value`` through its flat view, earns nothing in Task 2.2 (``_check_gathered``).
"""

import pytest
import torch
from probes_lab02 import (
    checked_call,
    flat_indices,
    max_indices,
    overflow_answers,
    watched_call,
    work_done,
)

from msda_labs.grading import expect_close
from msda_labs.grading.judge.rules import indirect_uses, watch_untouched
from msda_labs.grading.judge.spies import INTERPOLATION_OPS
from msda_labs.mistakes import msda_variants
from msda_labs.mistakes.pointers import FLAT_INDEX, INT32_MAX, OVERFLOW
from msda_labs.truth.cases import MULTI_LEVEL, OUT_OF_BOUNDS, STANDARD_CASES, Case, make_inputs
from msda_labs.truth.reference import msda_reference

TASKS = {"2.1": "flat_index", "2.2": "flat_msda", "2.3": "max_flat_index, overflows_int32"}

# Library interpolation would do the lab's work for it.
BANNED = ("grid_sample", "interpolate", "grid_sampler")

# A 1-pixel-wide level, a 1-pixel-high level and locations well outside: every column that leaves
# the image would land in a neighbouring row if validity were tested on the flat index.
THIN_LEVELS = Case("thin_levels", B=2, Q=3, M=3, D=2, shapes=((3, 1), (1, 4), (2, 3)), K=2,
                   loc_lo=-0.3, loc_hi=1.3, seed=5)
FP64_CASES = (*STANDARD_CASES, THIN_LEVELS)


# -- Task 2.1 ----------------------------------------------------------------------------------

def _mismatch(call, kind, got, ref, *, want, said="="):
    """What is wrong with one answer of ``call``: raise when it is not a Python ``want`` (int or
    bool); None when it equals ``ref``; else the start of the failure message."""
    if kind != want:
        raise AssertionError(f"{call} must return {'an' if want == 'int' else 'a'} {want}, "
                             f"got {got}")
    return None if got == ref else f"{call} {said} {got}, expected {ref}"


def _check_indices(res, calls, what):
    # The right offsets, written out here (a function of the position would be Task 2.1's answer,
    # shipped with the template).
    offsets = [((b * S + s) * M + m) * D + d for b, s, m, d, S, M, D in calls]
    for (kind, got), args, ref in zip(res, calls, offsets):
        b, s, m, d, S, M, D = args
        msg = _mismatch(f"{what}: flat_index(b={b}, s={s}, m={m}, d={d}, S={S}, M={M}, D={D})",
                        kind, got, ref, want="int")
        if msg is None:
            continue
        if got >= 0:
            rest, dd = divmod(got, D)
            rest, mm = divmod(rest, M)
            bb, ss = divmod(rest, S)
            msg += f" (your offset points at value[{bb}, {ss}, {mm}, {dd}])"
        for mistake in FLAT_INDEX.entries():
            fn = mistake.plant
            planted = [fn(*a, offset=o) for a, o in zip(calls, offsets)]
            if all(kind == "int" and g == p for (kind, g), p in zip(res, planted)) and \
                    any(p != o for p, o in zip(planted, offsets)):
                msg += f"; this is exactly {mistake.why}"
                break
        raise AssertionError(msg)


@pytest.mark.task("2.1", points=2)
def test_flat_index_small_tensors(submission):
    calls = [(0, 0, 0, 0, 30, 3, 4), (1, 17, 2, 3, 30, 3, 4), (0, 29, 1, 2, 30, 3, 4),
             (1, 0, 0, 0, 30, 3, 4), (2, 4, 1, 0, 5, 2, 3), (1, 6, 2, 4, 7, 3, 5),
             (3, 1, 0, 1, 2, 1, 2)]
    res = submission.run(flat_indices, calls)
    _check_indices(res, calls, "flat_index on small (B, S, M, D) tensors")


@pytest.mark.task("2.1", points=1)
@pytest.mark.rule("int64-offsets")
def test_flat_index_past_int32(submission):
    # A 4K-video pyramid: offsets beyond 2**31 - 1 must come back exact.
    calls = [(1, 4_199_999, 7, 31, 4_200_000, 8, 32), (3, 138_000, 5, 17, 4_200_000, 8, 32),
             (7, 0, 0, 0, 100_000_000, 8, 32)]
    res = submission.run(flat_indices, calls)
    _check_indices(res, calls, "flat_index at offsets beyond the int32 range")


# -- Task 2.2 ----------------------------------------------------------------------------------

def _check_banned(submission):
    """Read off the source by the judge (the submission cannot change what it parses): no call
    of library interpolation, and nothing that reaches a function without naming it."""
    for banned in BANNED:
        if submission.source.calls("flat_msda", banned):
            raise AssertionError(f"rule: flat_msda must gather by hand from flat buffers; it calls "
                                 f"{banned}(), which is what it is graded against")
    uses = indirect_uses(submission.source, INTERPOLATION_OPS)
    if uses:
        line, what = uses[0]
        raise AssertionError(
            f"rule: flat_msda must gather by hand from flat buffers; line {line} of your module "
            f"uses {what}, which can reach a function (grid_sample among them) without naming "
            f"it, or names library interpolation: the grader reads your source, and allows "
            f"neither getattr/eval/exec/importlib/sys/operator and the like nor double-underscore "
            f"attributes outside `if __name__ == \"__main__\":`")
    # How flat_msda touches its tensors is watched in your process, where a module could switch
    # the watch off: it is believed only where the judge reads that nothing can reach it.
    watch_untouched(submission.source, "how flat_msda touches its tensors (flat views, int64 "
                                       "index math, loops, the flat read of value)")


def _check_gathered(found):
    """What the watch saw of one flat_msda call: no library interpolation ran, by any name, and
    ``value`` was read through its flat view (the exercise: a stand-in that computes MSDA some
    other way earns nothing in Task 2.2)."""
    if found.get("forbidden"):
        raise AssertionError(f"rule: flat_msda must gather by hand from flat buffers; while it "
                             f"ran, torch ran {', '.join(found['forbidden'])}: library "
                             f"interpolation, which is what it is graded against (watched at run "
                             f"time, whatever name reached it)")
    if "value" not in found.get("read_flat", ()):
        raise AssertionError("rule: flat_msda must gather from the flat buffer: it computed its "
                             "output without one read of value through a flat view "
                             "(value.reshape(-1)[offsets])")


@pytest.mark.task("2.2", points=2)
@pytest.mark.parametrize("case", FP64_CASES, ids=lambda c: c.id)
@pytest.mark.rule("mask-corners", "zero-padding", "half-pixel", "floor", "xy-order", "level-starts")
def test_flat_msda_matches_reference(submission, case):
    inputs = make_inputs(case, torch.float64)
    value, shapes, starts, loc, attn = inputs
    found = submission.run(checked_call, inputs)
    _check_gathered(found)
    expect_close(found["out"], msda_reference(value, shapes, loc, attn), dtype=torch.float64,
                 expect_dtype=torch.float64, what="flat_msda", case=case.describe(),
                 variants=msda_variants(inputs))
    _check_banned(submission)


@pytest.mark.task("2.2", points=1)
@pytest.mark.parametrize("case", (MULTI_LEVEL, OUT_OF_BOUNDS), ids=lambda c: c.id)
def test_flat_msda_float32(submission, case):
    inputs = make_inputs(case, torch.float32)
    value, shapes, starts, loc, attn = inputs
    found = submission.run(checked_call, inputs)
    _check_gathered(found)
    ref = msda_reference(value.double(), shapes, loc.double(), attn.double())
    expect_close(found["out"], ref, dtype=torch.float32, expect_dtype=torch.float32,
                 what="flat_msda on float32 inputs", case=case.describe(),
                 variants=msda_variants(inputs))
    _check_banned(submission)


def _expect_right(found, case, rule):
    """A rule earns its points only on a flat_msda that computes the right output, gathering by
    hand."""
    value, shapes, _starts, loc, attn = make_inputs(case, torch.float64)
    try:
        _check_gathered(found)
        expect_close(found["out"], msda_reference(value, shapes, loc, attn), dtype=torch.float64,
                     what="flat_msda", case=case.describe())
    except AssertionError as exc:
        raise AssertionError(f"{rule} is graded on a flat_msda that computes MSDA; {exc}") \
            from None


@pytest.mark.task("2.2", points=2)
def test_flat_msda_reads_only_flat_views(submission):
    found = submission.run(watched_call, make_inputs(OUT_OF_BOUNDS, torch.float64))
    if found["violations"]:
        raise AssertionError(
            "rule: flat_msda may touch value, sampling_locations and attention_weights only "
            "through flat 1-D views (x.reshape(-1)), the way a kernel sees memory; it used "
            + "; ".join(found["violations"]))
    _expect_right(found, OUT_OF_BOUNDS, "the flat-views rule")
    _check_banned(submission)


@pytest.mark.task("2.2", points=1)
@pytest.mark.rule("int64-offsets")
def test_flat_msda_index_math_in_int64(submission):
    found = submission.run(watched_call, make_inputs(MULTI_LEVEL, torch.float64))
    if found["narrow"]:
        raise AssertionError(
            "rule: index math must be int64 (int32 offsets overflow at production sizes, see "
            "Task 2.3); in flat_msda " + "; ".join(found["narrow"]))
    _expect_right(found, MULTI_LEVEL, "the int64 rule")
    _check_banned(submission)


_GROWTH_BASE = Case("vec_base", B=1, Q=2, M=1, D=2, shapes=((3, 4), (2, 2)), K=2,
                    loc_lo=0.25, loc_hi=0.75, seed=9)
_GROWN = (("the batch size B", _GROWTH_BASE.with_(B=5)),
          ("the number of queries Q", _GROWTH_BASE.with_(Q=9)),
          ("the number of heads M", _GROWTH_BASE.with_(M=5)),
          ("the channel count D", _GROWTH_BASE.with_(D=7)))


@pytest.mark.task("2.2", points=2)
def test_flat_msda_loops_only_over_levels_and_points(submission):
    # Same levels and points, every corner inside the image: a vectorized flat_msda runs the same
    # lines and torch calls whatever B, Q, M and D are.
    cases = [_GROWTH_BASE] + [case for _, case in _GROWN]
    counts, outs = submission.run(work_done, cases)
    (base_lines, base_calls), grown = counts[0], counts[1:]
    for (axis, case), (lines, calls) in zip(_GROWN, grown):
        if lines + calls > base_lines + base_calls + 2:
            raise AssertionError(
                f"rule: only levels and points may be Python loops; with the same levels and "
                f"points, flat_msda ran {base_lines} lines and {base_calls} torch calls for "
                f"{_GROWTH_BASE.describe()} but {lines} lines and {calls} torch calls with "
                f"{axis} = {getattr(case, axis.split()[-1])}: its work in Python grows with "
                f"{axis}; compute on whole [B, Q, M] / [B, Q, M, D] tensors instead")
    for case, res in zip(cases, outs):
        _expect_right(res, case, "the loop rule")
    _check_banned(submission)


# -- Task 2.3 ----------------------------------------------------------------------------------

# (sizes, why they matter); the products straddle 2**31 and 2**32 exactly.
_SIZES = {
    "decoder": ((4, 138_000, 8, 32), "an encoder pyramid of a 1333x800 image"),
    "video": ((2, 4_200_000, 8, 32), "a 4K-video pyramid"),
    "p31m1": ((1, 2_147_483_647, 1, 1), "2**31 - 1 elements"),
    "p31": ((1, 2**26, 1, 32), "exactly 2**31 elements: last offset 2**31 - 1"),
    "p31b": ((2, 2**25, 8, 4), "exactly 2**31 elements: last offset 2**31 - 1"),
    "p31p1": ((1, 715_827_883, 1, 3), "2**31 + 1 elements: last offset 2**31"),
    "p31p2": ((2, 1_073_741_825, 1, 1), "2**31 + 2 elements"),
    "p32m1": ((1, 1_431_655_765, 1, 3), "2**32 - 1 elements"),
    "p32": ((1, 2**27, 1, 32), "exactly 2**32 elements"),
    "p32p1": ((1, 4_294_967_297, 1, 1), "2**32 + 1 elements"),
    "tiny": ((1, 1, 1, 1), "one element"),
}
_ALL = tuple(_SIZES)


def _product(size):
    B, S, M, D = size
    return B * S * M * D


def _check_overflows(submission, keys, what):
    res = dict(zip(_ALL, submission.run(overflow_answers, [_SIZES[k][0] for k in _ALL])))
    for key in keys:
        size, why = _SIZES[key]
        kind, got, _real = res[key]
        ref = _product(size) - 1 > INT32_MAX
        msg = _mismatch(f"{what}: overflows_int32{size} ({why})", kind, got, ref, want="bool",
                        said="returned")
        if msg is None:
            continue
        answers = {k: v[1] for k, v in res.items() if v[0] == "bool"}
        for mistake in OVERFLOW.entries():
            if len(answers) == len(_ALL) and all(
                    answers[k] == mistake.plant(_product(_SIZES[k][0]) - 1) for k in _ALL):
                msg += f"; your answers match {mistake.why}"
                break
        raise AssertionError(msg)


@pytest.mark.task("2.3", points=1)
def test_max_flat_index(submission):
    keys = ("tiny", "decoder", "video", "p31", "p32p1")
    sizes = [_SIZES[k][0] for k in keys] + [(2, 10, 3, 4)]
    res = submission.run(max_indices, sizes)
    for (kind, got), size in zip(res, sizes):
        ref = _product(size) - 1
        msg = _mismatch(f"max_flat_index{size}", kind, got, ref, want="int")
        if msg is not None:
            hint = "; that is the element count: offsets run from 0 to count - 1" \
                if got == ref + 1 else ""
            raise AssertionError(f"{msg}{hint}")


@pytest.mark.task("2.3", points=1)
def test_overflows_int32_at_real_sizes(submission):
    _check_overflows(submission, ("decoder", "video", "tiny"), "overflows_int32 at real sizes")


@pytest.mark.task("2.3", points=2)
def test_overflows_int32_exact_boundary(submission):
    _check_overflows(submission, ("p31m1", "p31", "p31b", "p31p1"),
                     "overflows_int32 at the int32 boundary")


@pytest.mark.task("2.3", points=1)
def test_overflows_int32_is_signed(submission):
    # Past 2**31 elements (an unsigned 32-bit index would still fit) and, so that an answer
    # that is always True earns nothing, just below.
    _check_overflows(submission, ("p31p2", "p32m1", "p32", "p32p1", "p31m1"),
                     "overflows_int32 between 2**31 and 2**32 elements")


@pytest.mark.task("2.3", points=1)
def test_overflows_int32_returns_real_bools(submission):
    keys = ("decoder", "video", "p31")
    res = submission.run(overflow_answers, [_SIZES[k][0] for k in keys])
    for (kind, got, typename), key in zip(res, keys):
        if typename != "bool":
            shown = f"{typename} {got}" if kind == "bool" else got
            raise AssertionError(f"overflows_int32{_SIZES[key][0]} must return a Python bool "
                                 f"(True or False), got {shown}; wrap it in bool(...)")
        # The type earns its point only with the right answer (False, True, False here).
        ref = _product(_SIZES[key][0]) - 1 > INT32_MAX
        if got != ref:
            raise AssertionError(f"overflows_int32{_SIZES[key][0]} returned the bool {got}, "
                                 f"expected {ref}: a real bool, but the wrong one")
