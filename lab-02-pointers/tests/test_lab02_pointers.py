"""Grading tests of lab 02 (tensors are pointers). Run them with `nox -s lab02`."""

import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode

from msda_labs.grading import expect_close
from msda_labs.mistakes import msda_variants
from msda_labs.truth.cases import MULTI_LEVEL, OUT_OF_BOUNDS, STANDARD_CASES, Case, make_inputs
from msda_labs.truth.reference import msda_reference

LAB = "lab02"
TITLE = "Tensors are pointers"
MODE = "cpu"
TASKS = {"2.1": "flat_index", "2.2": "flat_msda", "2.3": "max_flat_index, overflows_int32"}

INT32_MAX = 2**31 - 1
# Library interpolation would do the lab's work for it.
BANNED = ("grid_sample", "interpolate", "grid_sampler")

# A 1-pixel-wide level, a 1-pixel-high level and locations well outside: every column that leaves
# the image would land in a neighbouring row if validity were tested on the flat index.
THIN_LEVELS = Case("thin_levels", B=2, Q=3, M=3, D=2, shapes=((3, 1), (1, 4), (2, 3)), K=2,
                   loc_lo=-0.3, loc_hi=1.3, seed=5)
FP64_CASES = (*STANDARD_CASES, THIN_LEVELS)


# -- probes (run inside the isolated child) --------------------------------------------------

def _as_int(res):
    """('int', value) for ints (Python, numpy, 0-d integer tensors), else ('other', description)."""
    if isinstance(res, bool):
        return ("other", f"the bool {res}")
    if isinstance(res, int):
        return ("int", res)
    if type(res).__module__ == "numpy" and hasattr(res, "dtype") and res.dtype.kind in "iu" \
            and getattr(res, "ndim", 1) == 0:
        return ("int", int(res))
    if isinstance(res, torch.Tensor) and res.dim() == 0 and not res.is_floating_point() \
            and res.dtype != torch.bool:
        return ("int", int(res))
    return ("other", f"{type(res).__module__}.{type(res).__qualname__} {res!r:.60}")


def _as_bool(res):
    """('bool', value, type name) for bool-like results, else ('other', description, type name)."""
    typename = f"{type(res).__module__}.{type(res).__qualname__}"
    if isinstance(res, bool):
        return ("bool", res, "bool")
    if type(res).__name__ == "bool_" or (isinstance(res, torch.Tensor) and res.dim() == 0
                                          and res.dtype == torch.bool):
        return ("bool", bool(res), typename)
    return ("other", f"{typename} {res!r:.60}", typename)


def _flat_indices(module, calls):
    return [_as_int(module.flat_index(*args)) for args in calls]


def _max_indices(module, sizes):
    return [_as_int(module.max_flat_index(*size)) for size in sizes]


def _overflow_answers(module, sizes):
    return [_as_bool(module.overflows_int32(*size)) for size in sizes]


_META = {"shape", "dtype", "device", "size", "dim", "ndim", "ndimension", "numel", "nelement",
         "stride", "is_contiguous", "element_size", "itemsize", "nbytes", "is_floating_point",
         "is_complex", "layout", "requires_grad", "is_cuda", "is_cpu", "get_device", "data_ptr",
         "storage_offset", "__len__", "__repr__", "__str__", "__format__", "is_leaf", "grad_fn",
         "is_sparse", "is_quantized", "is_meta", "names"}
_NO_READ = {"zeros_like", "ones_like", "empty_like", "full_like", "new_zeros", "new_ones",
            "new_empty", "new_full", "take"}
_FLATTEN = {"reshape", "view", "flatten", "ravel", "reshape_as", "view_as", "contiguous", "to",
            "float", "double", "half", "bfloat16", "detach", "clone", "cpu", "cuda", "type",
            "type_as", "requires_grad_", "detach_", "as_tensor"}


def _func_name(func) -> str:
    name = getattr(func, "__name__", None) or str(func)
    if name == "__get__":  # a property such as .shape
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    return name


def _op(fname: str) -> str:
    return "indexing [...]" if fname == "__getitem__" else f"{fname}()"


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


class _Watch(TorchFunctionMode):
    """Watches one flat_msda call: what touches the data tensors, narrow integers, torch calls.

    The data tensors start as "nd" (their 4-D or 6-D selves): only metadata, conversions and a
    flattening to 1-D may touch them. A 1-D flattening is "flat": it may be indexed freely but
    not viewed as a multi-dimensional tensor again.
    """

    def __init__(self, tensors: dict):
        super().__init__()
        self.kind: dict[int, tuple[str, str]] = {}
        self.keep: list[torch.Tensor] = []
        self.violations: list[str] = []
        self.narrow: list[str] = []
        self.calls = 0
        for name, tensor in tensors.items():
            self._mark(tensor, name, "nd")

    def _mark(self, tensor, name, kind):
        self.kind[id(tensor)] = (name, kind)
        self.keep.append(tensor)

    @staticmethod
    def _note(found: list, what: str) -> None:
        if what not in found and len(found) < 3:
            found.append(what)

    def _judge(self, fname, name, kind, tensor, result):
        if fname in _META or fname in _NO_READ:
            return
        res = result if isinstance(result, torch.Tensor) else None
        if kind == "nd":
            if fname in _FLATTEN and res is not None and res.dim() == 1 \
                    and res.numel() == tensor.numel():
                self._mark(res, name, "flat")
            elif fname in _FLATTEN and res is not None and res.shape == tensor.shape:
                self._mark(res, name, "nd")
            else:
                self._note(self.violations, f"{_op(fname)} on the {tensor.dim()}-D {name}")
        elif res is not None:
            if res.dim() > 1 and res.untyped_storage().data_ptr() == \
                    tensor.untyped_storage().data_ptr():
                self._note(self.violations,
                           f"{_op(fname)} made a {res.dim()}-D view of the flat {name}")
            elif fname in _FLATTEN and res.dim() == 1 and res.numel() == tensor.numel():
                self._mark(res, name, "flat")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls += 1
        fname = _func_name(func)
        watched = [(self.kind[id(t)], t) for t in _tensors((args, kwargs)) if id(t) in self.kind]
        result = func(*args, **kwargs)
        for (name, kind), tensor in watched:
            self._judge(fname, name, kind, tensor, result)
        for res in _tensors(result):
            if res.dtype in (torch.int32, torch.int16):
                self._note(self.narrow, f"{_op(fname)} made an {str(res.dtype)[6:]} tensor")
        return result


def _watched_call(module, inputs):
    value, shapes, starts, loc, attn = inputs
    watch = _Watch({"value": value, "sampling_locations": loc, "attention_weights": attn})
    error, out = None, None
    with watch:
        try:
            out = module.flat_msda(value, shapes, starts, loc, attn)
        except Exception as exc:  # noqa: BLE001 - a rule violation may have caused it
            error = exc
    if error is not None and not watch.violations and not watch.narrow:
        raise error
    return {"violations": watch.violations, "narrow": watch.narrow, "out": out}


def _work_done(module, cases):
    """Lines of the submission run and torch calls made by flat_msda, per case."""
    target = module.__file__
    lines = [0]

    def local(frame, event, arg):
        if event == "line":
            lines[0] += 1
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename == target else None

    counts, outs = [], []
    for case in cases:
        value, shapes, starts, loc, attn = make_inputs(case, torch.float64)
        lines[0] = 0
        watch = _Watch({})
        with watch:
            sys.settrace(tracer)
            try:
                outs.append(module.flat_msda(value, shapes, starts, loc, attn))
            finally:
                sys.settrace(None)
        counts.append((lines[0], watch.calls))
    return counts, outs


# -- Task 2.1 ----------------------------------------------------------------------------------

_INDEX_MISTAKES = {
    "the batch term b * S left out: every batch would read batch 0's memory":
        lambda b, s, m, d, S, M, D: (s * M + m) * D + d,
    "m and d swapped: within a row of value the D channels of one head are contiguous, heads "
    "come one after another (m * D + d)":
        lambda b, s, m, d, S, M, D: ((b * S + s) * D + d) * M + m,
    "a row of value is M * D numbers long, not D: (b * S + s) must be multiplied by M * D":
        lambda b, s, m, d, S, M, D: (b * S + s) * D + m * D + d,
}


def _check_indices(res, calls, what):
    for (kind, got), args in zip(res, calls):
        b, s, m, d, S, M, D = args
        ref = ((b * S + s) * M + m) * D + d
        call = f"flat_index(b={b}, s={s}, m={m}, d={d}, S={S}, M={M}, D={D})"
        if kind != "int":
            raise AssertionError(f"{what}: {call} must return an int, got {got}")
        if got == ref:
            continue
        msg = f"{what}: {call} = {got}, expected {ref}"
        if got >= 0:
            rest, dd = divmod(got, D)
            rest, mm = divmod(rest, M)
            bb, ss = divmod(rest, S)
            msg += f" (your offset points at value[{bb}, {ss}, {mm}, {dd}])"
        for explanation, fn in _INDEX_MISTAKES.items():
            if all(kind == "int" and g == fn(*a) for (kind, g), a in zip(res, calls)) and \
                    any(fn(*a) != ((a[0] * a[4] + a[1]) * a[5] + a[2]) * a[6] + a[3]
                        for a in calls):
                msg += f"; this is exactly {explanation}"
                break
        raise AssertionError(msg)


@pytest.mark.task("2.1", points=2)
def test_flat_index_small_tensors(submission):
    calls = [(0, 0, 0, 0, 30, 3, 4), (1, 17, 2, 3, 30, 3, 4), (0, 29, 1, 2, 30, 3, 4),
             (1, 0, 0, 0, 30, 3, 4), (2, 4, 1, 0, 5, 2, 3), (1, 6, 2, 4, 7, 3, 5),
             (3, 1, 0, 1, 2, 1, 2)]
    res = submission.run(_flat_indices, calls)
    _check_indices(res, calls, "flat_index on small (B, S, M, D) tensors")


@pytest.mark.task("2.1", points=1)
@pytest.mark.rule("int64-offsets")
def test_flat_index_past_int32(submission):
    # A 4K-video pyramid: offsets beyond 2**31 - 1 must come back exact.
    calls = [(1, 4_199_999, 7, 31, 4_200_000, 8, 32), (3, 138_000, 5, 17, 4_200_000, 8, 32),
             (7, 0, 0, 0, 100_000_000, 8, 32)]
    res = submission.run(_flat_indices, calls)
    _check_indices(res, calls, "flat_index at offsets beyond the int32 range")


# -- Task 2.2 ----------------------------------------------------------------------------------

def _check_banned(submission):
    for banned in BANNED:
        if submission.source.calls("flat_msda", banned):
            raise AssertionError(f"rule: flat_msda must gather by hand from flat buffers; it calls "
                                 f"{banned}(), which is what it is graded against")


@pytest.mark.task("2.2", points=2)
@pytest.mark.parametrize("case", FP64_CASES, ids=lambda c: c.id)
@pytest.mark.rule("mask-corners", "zero-padding", "half-pixel", "floor", "xy-order", "level-starts")
def test_flat_msda_matches_reference(submission, case):
    inputs = make_inputs(case, torch.float64)
    value, shapes, starts, loc, attn = inputs
    res = submission.call("flat_msda", value, shapes, starts, loc, attn)
    _check_banned(submission)
    expect_close(res, msda_reference(value, shapes, loc, attn), dtype=torch.float64,
                 expect_dtype=torch.float64, what="flat_msda", case=case.describe(),
                 variants=msda_variants(inputs))


@pytest.mark.task("2.2", points=1)
@pytest.mark.parametrize("case", (MULTI_LEVEL, OUT_OF_BOUNDS), ids=lambda c: c.id)
def test_flat_msda_float32(submission, case):
    inputs = make_inputs(case, torch.float32)
    value, shapes, starts, loc, attn = inputs
    res = submission.call("flat_msda", value, shapes, starts, loc, attn)
    ref = msda_reference(value.double(), shapes, loc.double(), attn.double())
    expect_close(res, ref, dtype=torch.float32, expect_dtype=torch.float32,
                 what="flat_msda on float32 inputs", case=case.describe(),
                 variants=msda_variants(inputs))


def _expect_right(res, case, rule):
    """A rule earns its points only on a flat_msda that computes the right output."""
    value, shapes, _starts, loc, attn = make_inputs(case, torch.float64)
    try:
        expect_close(res, msda_reference(value, shapes, loc, attn), dtype=torch.float64,
                     what="flat_msda", case=case.describe())
    except AssertionError as exc:
        raise AssertionError(f"{rule} is graded on a flat_msda that computes MSDA; {exc}") \
            from None


@pytest.mark.task("2.2", points=2)
def test_flat_msda_reads_only_flat_views(submission):
    found = submission.run(_watched_call, make_inputs(OUT_OF_BOUNDS, torch.float64))
    if found["violations"]:
        raise AssertionError(
            "rule: flat_msda may touch value, sampling_locations and attention_weights only "
            "through flat 1-D views (x.reshape(-1)), the way a kernel sees memory; it used "
            + "; ".join(found["violations"]))
    _expect_right(found["out"], OUT_OF_BOUNDS, "the flat-views rule")


@pytest.mark.task("2.2", points=1)
@pytest.mark.rule("int64-offsets")
def test_flat_msda_index_math_in_int64(submission):
    found = submission.run(_watched_call, make_inputs(MULTI_LEVEL, torch.float64))
    if found["narrow"]:
        raise AssertionError(
            "rule: index math must be int64 (int32 offsets overflow at production sizes, see "
            "Task 2.3); in flat_msda " + "; ".join(found["narrow"]))
    _expect_right(found["out"], MULTI_LEVEL, "the int64 rule")


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
    counts, outs = submission.run(_work_done, cases)
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


# Known wrong rules, as predicates of the last offset i = B*S*M*D - 1.
_UNSIGNED = "the unsigned limit 2**32 - 1: int32 is signed and holds at most 2**31 - 1"
_OVERFLOW_MISTAKES = (
    ("an off-by-one at the boundary (>= where > belongs, or the element count compared instead "
     "of the last offset): a tensor of exactly 2**31 elements has last offset 2**31 - 1 = "
     "2,147,483,647, the largest int32, so it still fits", lambda i: i >= INT32_MAX),
    ("an off-by-one the other way: the largest int32 is 2**31 - 1, so a last offset of 2**31 "
     "already overflows", lambda i: i > 2**31),
    (_UNSIGNED, lambda i: i > 2**32 - 1),
    (_UNSIGNED, lambda i: i >= 2**32 - 1),
    (_UNSIGNED, lambda i: i > 2**32),
    ("the int64 limit: the question is whether offsets fit in 32 bits", lambda i: i > 2**63 - 1),
)


def _check_overflows(submission, keys, what):
    res = dict(zip(_ALL, submission.run(_overflow_answers, [_SIZES[k][0] for k in _ALL])))
    for key in keys:
        size, why = _SIZES[key]
        kind, got, _real = res[key]
        ref = _product(size) - 1 > INT32_MAX
        call = f"overflows_int32{size} ({why})"
        if kind != "bool":
            raise AssertionError(f"{what}: {call} must return a bool, got {got}")
        if got == ref:
            continue
        msg = f"{what}: {call} returned {got}, expected {ref}"
        answers = {k: v[1] for k, v in res.items() if v[0] == "bool"}
        for explanation, rule in _OVERFLOW_MISTAKES:
            if len(answers) == len(_ALL) and all(
                    answers[k] == rule(_product(_SIZES[k][0]) - 1) for k in _ALL):
                msg += f"; your answers match {explanation}"
                break
        raise AssertionError(msg)


@pytest.mark.task("2.3", points=1)
def test_max_flat_index(submission):
    keys = ("tiny", "decoder", "video", "p31", "p32p1")
    sizes = [_SIZES[k][0] for k in keys] + [(2, 10, 3, 4)]
    res = submission.run(_max_indices, sizes)
    for (kind, got), size in zip(res, sizes):
        ref = _product(size) - 1
        call = f"max_flat_index{size}"
        if kind != "int":
            raise AssertionError(f"{call} must return an int, got {got}")
        if got != ref:
            hint = "; that is the element count: offsets run from 0 to count - 1" \
                if got == ref + 1 else ""
            raise AssertionError(f"{call} = {got}, expected {ref}{hint}")


@pytest.mark.task("2.3", points=1)
def test_overflows_int32_at_real_sizes(submission):
    _check_overflows(submission, ("decoder", "video", "tiny"), "overflows_int32 at real sizes")


@pytest.mark.task("2.3", points=2)
def test_overflows_int32_exact_boundary(submission):
    _check_overflows(submission, ("p31m1", "p31", "p31b", "p31p1"),
                     "overflows_int32 at the int32 boundary")


@pytest.mark.task("2.3", points=1)
def test_overflows_int32_is_signed(submission):
    _check_overflows(submission, ("p31p2", "p32m1", "p32", "p32p1"),
                     "overflows_int32 between 2**31 and 2**32 elements")


@pytest.mark.task("2.3", points=1)
def test_overflows_int32_returns_real_bools(submission):
    keys = ("decoder", "video", "p31")
    res = submission.run(_overflow_answers, [_SIZES[k][0] for k in keys])
    for (kind, got, typename), key in zip(res, keys):
        if typename != "bool":
            shown = f"{typename} {got}" if kind == "bool" else got
            raise AssertionError(f"overflows_int32{_SIZES[key][0]} must return a Python bool "
                                 f"(True or False), got {shown}; wrap it in bool(...)")
