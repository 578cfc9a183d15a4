"""Grading tests of lab 10 (ship it). Run them with `nox -s lab10` (and `nox -s lab10-gpu`).

The CPU stage runs the operator's kernels in Triton's interpreter, at small sizes; the GPU stage
(``@pytest.mark.stage("gpu")``) runs the same exam at real sizes, in every dtype, plus a case
whose flat value index passes 2**31. Inputs are seeded and built on the device under test inside
the probe; references are computed here, in the judge, on the CPU from the same seeds.

Some probes re-run the submission with recording wrappers around its msda_forward and
msda_backward (the shipped kernels while grading): that is how the tests see which accumulator
flag reached the backward, whether the kernels got contiguous tensors, and that an empty batch
launches nothing.
"""

import functools
import os

import pytest
import torch

from msda_labs.grading import describe_value, expect_close
from msda_labs.grading.timing import REFERENCE_LIMIT, check_reference_speed
from msda_labs.student import runtime
from msda_labs.truth.cases import (
    DECODER,
    EXACT_KNOTS,
    OUT_OF_BOUNDS,
    SINGLE,
    STANDARD_CASES,
    Case,
    make_inputs,
    seeded_generator,
)
from msda_labs.truth.reference import msda_reference, reference_grads

LAB = "lab10"
TITLE = "Ship it"
MODE = "interpret"
TASKS = {
    "10.1": "MSDAFunction",
    "10.2": "validate_inputs",
    "10.3": "msda",
    "10.4": "final exam",
}

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
GRAD_SEED = 7  # the upstream gradient of every backward test

# Small cases for the interpreter (about a millisecond per program and (level, point) pair).
RAGGED = Case("ragged_queries", B=1, Q=37, M=1, D=3, shapes=((5, 6),), K=1, seed=3)
TWO_LEVELS = Case("two_levels", B=1, Q=6, M=2, D=4, shapes=((4, 5), (2, 3)), K=2, seed=2)
# Distinct sizes, so that a shape in a message can only mean one thing.
VCASE = Case("validation", B=2, Q=3, M=4, D=5, shapes=((3, 4), (2, 2)), K=3, seed=4)


def _warm_worker() -> None:
    """Pay the once-per-process costs in the grading worker, before it forks a child per test:
    the shipped kernels and lab 09's chip, torch's lazy imports on the first backward with an
    explicit gradient (about 1 s), and, under the interpreter, triton's argument specialization
    and the rewriting of each kernel's source (about 1 s more). Nothing here runs a kernel or a
    parallel torch op: a thread pool started before a fork would hang the children. Best
    effort."""
    from msda_labs.student.earlier import load

    try:
        from msda_labs.student import shipped

        load(9, "use_fp32_grad_accum")
        x = torch.ones(2, requires_grad=True)
        (x * x).backward(torch.ones(2))
        if runtime.interpreted():
            from triton.runtime.interpreter import InterpretedFunction
            from triton.runtime.jit import mangle_type

            mangle_type(1)
            for obj in vars(shipped).values():
                if isinstance(obj, InterpretedFunction):
                    obj.rewrite()
    except Exception:  # noqa: BLE001 - warming is an optimisation only
        pass


# Only the interpreter's worker warms up: in the GPU worker, a backward (even on the CPU) starts
# autograd's device threads and initializes CUDA, and children forked after that cannot use it
# (measured on an H200: every GPU test failed with a CUDA initialization error).
if os.environ.get("MSDA_STAGE") == "chips" and os.environ.get("TRITON_INTERPRET") == "1":
    _warm_worker()  # in the worker only: the judge never runs kernels


# -- probes: run inside the isolated worker --------------------------------------------------------
def _device_inputs(case, dtype_name, requires_grad=False):
    dev = runtime.device()
    value, shapes, starts, loc, attn = make_inputs(case, DTYPES[dtype_name], dev)
    if requires_grad:
        for t in (value, loc, attn):
            t.requires_grad_(True)
    return value, shapes, starts, loc, attn


def _grad_out(case, dtype_name, device="cpu"):
    gen = seeded_generator(GRAD_SEED)
    g = torch.randn(case.B, case.Q, case.M * case.D, generator=gen)
    return g.to(dtype=DTYPES[dtype_name], device=device)


def _grads(tensors):
    return [None if t.grad is None else t.grad for t in tensors]


def _backward(out, grad_out, leaves):
    """out.backward(grad_out); a RuntimeError from autograd comes back as data (the judge words the
    feedback), anything else (NotImplementedError included) propagates."""
    try:
        out.backward(grad_out)
    except NotImplementedError:
        raise
    except RuntimeError as exc:
        return {"backward_error": str(exc).strip().splitlines()[0][:400]}
    return {"grads": _grads(leaves)}


def _function_probe(module, case, dtype_name, flag, backward=True):
    """MSDAFunction.apply directly (no validation, no wrapper)."""
    value, shapes, starts, loc, attn = _device_inputs(case, dtype_name, requires_grad=True)
    out = module.MSDAFunction.apply(value, shapes, starts, loc, attn, flag)
    result = {"out": out.detach()}
    if backward:
        result.update(_backward(out, _grad_out(case, dtype_name, value.device),
                                (value, loc, attn)))
    return result


def _double_backward_probe(module, case):
    """A second derivative through MSDAFunction must raise: its backward is not differentiable."""
    value, shapes, starts, loc, attn = _device_inputs(case, "float32", requires_grad=True)
    out = module.MSDAFunction.apply(value, shapes, starts, loc, attn, False)
    # The upstream gradient 2 * out depends on the inputs (so autograd records a graph through
    # backward), and the loss also depends on loc directly: without protection the second
    # derivative comes out, silently missing the MSDA term.
    loss = (out ** 2).sum() + (loc ** 2).sum()
    try:
        (grad_loc,) = torch.autograd.grad(loss, loc, create_graph=True)
        grad_loc.sum().backward()  # every node of the second graph runs, the MSDA one included
    except NotImplementedError:
        raise
    except RuntimeError as exc:
        return {"raised": str(exc).strip().splitlines()[0][:300]}
    return {"second": loc.grad}


def _scramble(t):
    """The same values with other strides (axes 1 and 2 swapped in memory): not contiguous."""
    out = t.transpose(1, 2).contiguous().transpose(1, 2)
    assert not out.is_contiguous(), "a case with Q = 1 or M = 1 cannot be scrambled this way"
    return out


def _msda_probe(module, case, dtype_name, flag="auto", backward=True, starts_none=False,
                noncontiguous=False):
    """The public operator, forward (and backward with the seeded upstream gradient)."""
    value, shapes, starts, loc, attn = _device_inputs(case, dtype_name)
    if noncontiguous:
        value, loc, attn = _scramble(value), _scramble(loc), _scramble(attn)
    for t in (value, loc, attn):
        t.requires_grad_(True)
    kwargs = {} if flag == "auto" else {"fp32_grad_accum": flag}
    out = module.msda(value, shapes, None if starts_none else starts, loc, attn, **kwargs)
    result = {"out": out.detach()}
    if backward:
        grad = _grad_out(case, dtype_name, value.device)
        if noncontiguous:
            grad = _scramble(grad)
        result.update(_backward(out, grad, (value, loc, attn)))
    return result


def _outcome(fn, *args, **kwargs):
    """('ValueError', message) | ('none', '') | (type name, message); NotImplementedError
    propagates (not attempted)."""
    try:
        fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the judge decides what the exception means
        return type(exc).__name__, str(exc)
    return "none", ""


def _validate_probe(module, cases, entry="validate_inputs", outside_interpreter=False):
    """Call ``entry`` on each (label, args) in ``cases``; returns the outcomes in order."""
    if outside_interpreter:
        # As if there were no interpreter: re-run the module so that even a decision it took at
        # import time sees the change. Only validation runs after this; no kernel is launched.
        os.environ["TRITON_INTERPRET"] = "0"
        module = _reexec(module)
    dev = runtime.device() if not outside_interpreter else "cpu"
    results = []
    for _label, args in cases:
        moved = [a.to(dev) if isinstance(a, torch.Tensor) else a for a in args]
        results.append(_outcome(getattr(module, entry), *moved))
    return results


def _reexec(module, suffix="_again"):
    """A fresh execution of the submission's file (its globals bound anew)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(module.__name__ + suffix, module.__file__)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    return fresh


def _spied(module):
    """Re-run the submission with recording wrappers around msda_forward and msda_backward.

    The wrappers replace the module globals that MSDAFunction calls, whichever kernels the module
    loaded (the shipped ones, or with MSDA_LAB10_KERNELS=labs those of labs 06 and 08).

    Returns (module, forward calls, backward calls); each call is a dict of plain facts.
    """
    import inspect

    fresh = _reexec(module, "_spied")
    fwd, bwd = fresh.msda_forward, fresh.msda_backward
    fwd_sig, bwd_sig = inspect.signature(fwd), inspect.signature(bwd)
    fwd_calls, bwd_calls = [], []

    def spy_forward(*args, **kwargs):
        bound = fwd_sig.bind(*args, **kwargs)
        names = list(bound.arguments)
        fwd_calls.append({"contiguous": [bool(bound.arguments[n].is_contiguous())
                                         for n in (names[0], names[3], names[4])]})
        return fwd(*args, **kwargs)

    def spy_backward(*args, **kwargs):
        bound = bwd_sig.bind(*args, **kwargs)
        bound.apply_defaults()
        flag = bound.arguments["fp32_grad_accum"]
        bwd_calls.append({"flag": flag if isinstance(flag, bool) else repr(flag)})
        return bwd(*args, **kwargs)

    fresh.msda_forward, fresh.msda_backward = spy_forward, spy_backward
    return fresh, fwd_calls, bwd_calls


def _flag_probe(module, runs):
    """msda forward + backward for each (case, dtype, flag); returns the flags msda_backward got."""
    module, _, bwd_calls = _spied(module)
    seen = []
    for case, dtype_name, flag in runs:
        before = len(bwd_calls)
        try:
            _msda_probe(module, case, dtype_name, flag=flag)
        except NotImplementedError:
            raise
        except Exception:  # noqa: BLE001 - e.g. bf16 atomics in the interpreter: the flag that
            pass  # reached msda_backward is already recorded, and it is what this probe reports
        seen.append([c["flag"] for c in bwd_calls[before:]])
    return seen


def _function_flag_probe(module, case):
    module, _, bwd_calls = _spied(module)
    seen = []
    for flag in (True, False):
        before = len(bwd_calls)
        _function_probe(module, case, "float32", flag)
        seen.append([c["flag"] for c in bwd_calls[before:]])
    return seen


def _empty_probe(module, shapes_bq):
    """msda on empty batches/queries: what it returns and how many forward launches it made."""
    module, fwd_calls, _ = _spied(module)
    results = []
    for B, Q in shapes_bq:
        value, shapes, starts, loc, attn = _device_inputs(VCASE, "float32")
        value, loc, attn = value[:B], loc[:B, :Q], attn[:B, :Q]
        before = len(fwd_calls)
        out = module.msda(value, shapes, starts, loc, attn)
        results.append({"out": out.detach() if isinstance(out, torch.Tensor) else out,
                        "launches": len(fwd_calls) - before})
    return results


def _contiguity_probe(module, case):
    module, fwd_calls, _ = _spied(module)
    _msda_probe(module, case, "float32", noncontiguous=True, backward=False)
    return fwd_calls


# -- the judge's side ----------------------------------------------------------------------------
@functools.cache
def _reference(case, dtype_name):
    """fp32 reference output and gradients on the inputs as rounded to ``dtype_name``."""
    value, shapes, _, loc, attn = make_inputs(case, DTYPES[dtype_name])
    out = msda_reference(value.float(), shapes, loc.float(), attn.float())
    grads = reference_grads(value, shapes, loc, attn, _grad_out(case, dtype_name))
    return out, grads


_ORDER_HINT = ("backward returns one gradient per input of forward, in forward's order: "
               "(grad_value, None, None, grad_loc, grad_attn, None)")


def _check_output(res, case, dtype_name, what):
    ref, _ = _reference(case, dtype_name)
    expect_close(res["out"], ref, what=what, case=f"{case.describe()} in {dtype_name}",
                 dtype=DTYPES[dtype_name])


def _check_grads(res, case, dtype_name, what):
    if "backward_error" in res:
        raise AssertionError(f"{what}: backward failed on {case.describe()}: "
                             f"{res['backward_error']}; {_ORDER_HINT}")
    _, refs = _reference(case, dtype_name)
    for name, got, ref in zip(("value", "sampling_locations", "attention_weights"),
                              res["grads"], refs):
        if got is None:
            raise AssertionError(f"{what}: {name}.grad is None after backward on "
                                 f"{case.describe()}; {_ORDER_HINT}")
        expect_close(got, ref, what=f"{what}: the gradient of {name}",
                     case=f"{case.describe()} in {dtype_name}", dtype=DTYPES[dtype_name],
                     backward=True)


def _run_msda(submission, case, dtype_name, **kwargs):
    return submission.run(_msda_probe, case, dtype_name, **kwargs)


# -- Task 10.1: MSDAFunction ---------------------------------------------------------------------
@pytest.mark.task("10.1", points=1)
def test_function_forward(submission):
    res = submission.run(_function_probe, TWO_LEVELS, "float32", False, backward=False)
    _check_output(res, TWO_LEVELS, "float32", "MSDAFunction.apply(...)")


@pytest.mark.task("10.1", points=2)
def test_function_backward_all_three_gradients(submission):
    res = submission.run(_function_probe, OUT_OF_BOUNDS, "float32", False)
    _check_grads(res, OUT_OF_BOUNDS, "float32", "MSDAFunction.apply(..., False)")


@pytest.mark.task("10.1", points=1)
@pytest.mark.rule("accumulator-switch")
def test_function_hands_its_flag_to_the_backward(submission):
    seen = submission.run(_function_flag_probe, SINGLE)
    for flag, calls in zip((True, False), seen):
        if calls != [flag]:
            raise AssertionError(f"MSDAFunction.apply(..., {flag}) then backward: msda_backward "
                                 f"was called with fp32_grad_accum {calls or 'never'}, expected "
                                 f"[{flag}]; keep the flag on ctx in forward and pass it on")


@pytest.mark.task("10.1", points=1)
def test_function_refuses_a_second_derivative(submission):
    res = submission.run(_double_backward_probe, SINGLE)
    if "raised" not in res:
        raise AssertionError("a second derivative through MSDAFunction came out without an "
                             "error: its backward runs a kernel that autograd cannot see, so that "
                             "value is wrong; decorate backward with @once_differentiable")
    if "once_differentiable" not in res["raised"]:
        raise AssertionError(f"a second derivative through MSDAFunction failed, but not because "
                             f"of @once_differentiable: {res['raised']}")


# -- Task 10.2: validate_inputs -----------------------------------------------------------------
def _shape_forms(shape) -> list[str]:
    inner = ",".join(str(int(s)) for s in shape)
    forms = [f"({inner})", f"[{inner}]"]
    if len(shape) == 1:
        forms.append(f"({inner},)")
    return forms


def _squash(message: str) -> str:
    text = "".join(message.split())
    return text.replace("torch.Size([", "(").replace("])", ")")


def _mentions(message: str, item) -> bool:
    """``item``: a shape tuple, or a word (case-insensitive)."""
    if isinstance(item, tuple):
        text = _squash(message)
        return any(form in text for form in _shape_forms(item))
    return str(item).lower() in message.lower()


def _good_inputs(case=VCASE, dtype=torch.float32):
    value, shapes, starts, loc, attn = make_inputs(case, dtype)
    return value, shapes, starts, loc, attn


def _check_rejections(outcomes, cases, entry="validate_inputs"):
    for (label, _args, must), (kind, message) in zip(cases, outcomes):
        if kind == "none":
            raise AssertionError(f"{entry} accepted {label}; it must raise ValueError")
        if kind != "ValueError":
            raise AssertionError(f"{entry} raised {kind} for {label} ({message[:200]}); raise a "
                                 f"ValueError that says what is wrong")
        missing = [item for item in must if not _mentions(message, item)]
        if missing:
            shown = ", ".join(str(m) for m in missing)
            raise AssertionError(f"the ValueError for {label} must name the argument, what was "
                                 f"expected and what came; {message!r} does not mention {shown}")


def _validation_run(submission, cases, **kwargs):
    outcomes = submission.run(_validate_probe, [(label, args) for label, args, _ in cases],
                              **kwargs)
    _check_rejections(outcomes, cases)


def _shape_cases():
    value, shapes, starts, loc, attn = _good_inputs()
    B, S, M, D = value.shape
    return [
        ("a 3-D value", (value[..., 0], shapes, starts, loc, attn),
         ["value", tuple(value[..., 0].shape)]),
        ("5-D sampling_locations", (value, shapes, starts, loc[..., 0, :], attn),
         ["sampling_locations", tuple(loc[..., 0, :].shape)]),
        ("sampling_locations with 3 coordinates", (value, shapes, starts,
                                                   torch.cat([loc, loc[..., :1]], -1), attn),
         ["sampling_locations", tuple(loc.shape[:-1]) + (3,)]),
        ("sampling_locations of another batch size", (value, shapes, starts, loc[:1], attn[:1]),
         ["sampling_locations", tuple(loc[:1].shape)]),
        ("sampling_locations with fewer heads than value", (value, shapes, starts,
                                                            loc[:, :, :2], attn[:, :, :2]),
         ["sampling_locations", tuple(loc[:, :, :2].shape)]),
    ]


@pytest.mark.task("10.2", points=1)
@pytest.mark.rule("level-starts")
def test_validate_accepts_good_inputs(submission):
    value, shapes, starts, loc, attn = _good_inputs()
    cases = [
        ("the standard inputs", (value, shapes, starts, loc, attn)),
        ("level_start_index=None", (value, shapes, None, loc, attn)),
        ("int32 spatial_shapes and level_start_index", (value, shapes.int(), starts.int(), loc,
                                                        attn)),
        ("an empty batch (B = 0)", (value[:0], shapes, starts, loc[:0], attn[:0])),
        ("no queries (Q = 0)", (value, shapes, starts, loc[:, :0], attn[:, :0])),
        ("float16 inputs", tuple(t.half() if t.is_floating_point() else t
                                 for t in (value, shapes, starts, loc, attn))),
        ("bfloat16 inputs", tuple(t.bfloat16() if t.is_floating_point() else t
                                  for t in (value, shapes, starts, loc, attn))),
    ]
    # One input that is plainly wrong: accepting everything is not the same as accepting these.
    bad = ("a 3-D value", (value[..., 0], shapes, starts, loc, attn))
    outcomes = submission.run(_validate_probe, cases + [bad])
    for (label, _), (kind, message) in zip(cases, outcomes):
        if kind != "none":
            raise AssertionError(f"validate_inputs rejected valid inputs ({label}) with {kind}: "
                                 f"{message[:200]}")
    if outcomes[-1][0] != "ValueError":
        raise AssertionError("validate_inputs accepted a 3-D value as well: a validator that "
                             "accepts these inputs must also refuse the ones that break a rule")


@pytest.mark.task("10.2", points=2)
def test_validate_value_and_location_shapes(submission):
    _validation_run(submission, _shape_cases())


@pytest.mark.task("10.2", points=1)
def test_validate_attention_weights_shape(submission):
    value, shapes, starts, loc, attn = _good_inputs()
    _validation_run(submission, [
        ("attention_weights truncated along K", (value, shapes, starts, loc, attn[..., :1]),
         ["attention_weights", tuple(attn.shape), tuple(attn[..., :1].shape)]),
        ("attention_weights with a trailing axis", (value, shapes, starts, loc, attn[..., None]),
         ["attention_weights", tuple(attn.shape), tuple(attn[..., None].shape)]),
    ])


@pytest.mark.task("10.2", points=2)
def test_validate_spatial_shapes(submission):
    value, shapes, starts, loc, attn = _good_inputs()
    L = shapes.shape[0]
    wrong = shapes.clone()
    wrong[0, 1] += 1  # 3 x 5 instead of 3 x 4: S would be 19, value has 16
    S = value.shape[1]
    _validation_run(submission, [
        ("spatial_shapes of shape (L, 3)", (value, torch.cat([shapes, shapes[:, :1]], 1), starts,
                                            loc, attn),
         ["spatial_shapes", (L, 2), (L, 3)]),
        ("spatial_shapes for one level too few", (value, shapes[:1], starts, loc, attn),
         ["spatial_shapes", (L, 2), (1, 2)]),
        ("float spatial_shapes", (value, shapes.float(), starts, loc, attn),
         ["spatial_shapes", "float32"]),
        ("spatial_shapes whose levels do not add up to S",
         (value, wrong, starts, loc, attn),
         ["spatial_shapes", str(S), str(int((wrong[:, 0] * wrong[:, 1]).sum()))]),
    ])


@pytest.mark.task("10.2", points=1)
@pytest.mark.rule("level-starts")
def test_validate_level_start_index(submission):
    value, shapes, starts, loc, attn = _good_inputs()
    L = shapes.shape[0]
    _validation_run(submission, [
        ("level_start_index with one entry too many",
         (value, shapes, torch.cat([starts, starts[-1:]]), loc, attn),
         ["level_start_index", (L,), (L + 1,)]),
        ("level_start_index of shape (L, 1)", (value, shapes, starts[:, None], loc, attn),
         ["level_start_index", (L,), (L, 1)]),
    ])


@pytest.mark.task("10.2", points=2)
def test_validate_dtypes(submission):
    value, shapes, starts, loc, attn = _good_inputs()
    _validation_run(submission, [
        ("sampling_locations in float16 with float32 value",
         (value, shapes, starts, loc.half(), attn),
         ["sampling_locations", "float16", "float32"]),
        ("attention_weights in bfloat16 with float32 value",
         (value, shapes, starts, loc, attn.bfloat16()),
         ["attention_weights", "bfloat16", "float32"]),
        ("all three in float64 (not supported)",
         (value.double(), shapes, starts, loc.double(), attn.double()),
         ["float64"]),
    ])


@pytest.mark.task("10.2", points=1)
def test_validate_device_outside_the_interpreter(submission):
    value, shapes, starts, loc, attn = _good_inputs()
    _validation_run(submission, [
        ("CPU tensors with no interpreter to run them", (value, shapes, starts, loc, attn),
         ["value", "cuda", "cpu"]),
    ], outside_interpreter=True)


# -- Task 10.3: msda -----------------------------------------------------------------------------
@pytest.mark.task("10.3", points=1)
def test_msda_validates_its_inputs(submission):
    value, shapes, starts, loc, attn = _good_inputs()
    cases = [("attention_weights truncated along K", (value, shapes, starts, loc, attn[..., :1]),
              ["attention_weights"]),
             ("locations in float16 with float32 value",
              (value, shapes, starts, loc.half(), attn), ["sampling_locations", "float16"])]
    outcomes = submission.run(_validate_probe, [(label, args) for label, args, _ in cases],
                              entry="msda")
    _check_rejections(outcomes, cases, entry="msda")


@pytest.mark.task("10.3", points=2)
def test_msda_empty_batch_or_queries(submission):
    res = submission.run(_empty_probe, [(0, VCASE.Q), (VCASE.B, 0)])
    M, D = VCASE.M, VCASE.D
    for (B, Q), got in zip([(0, VCASE.Q), (VCASE.B, 0)], res):
        what = f"msda with B={B}, Q={Q}"
        out = got["out"]
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, Q, M * D) or \
                out.dtype != torch.float32:
            raise AssertionError(f"{what}: expected an empty float32 tensor of shape "
                                 f"{(B, Q, M * D)}, got {describe_value(out)}")
        if got["launches"]:
            raise AssertionError(f"{what}: msda_forward was called {got['launches']} time(s); "
                                 f"with nothing to compute, return value.new_zeros(B, Q, M * D) "
                                 f"without launching anything (an empty grid is not a valid "
                                 f"launch everywhere)")


@pytest.mark.task("10.3", points=1)
def test_msda_hands_contiguous_tensors_to_the_kernels(submission):
    calls = submission.run(_contiguity_probe, TWO_LEVELS)
    if not calls:
        raise AssertionError("msda never called msda_forward")
    for call in calls:
        names = [n for n, ok in zip(("value", "sampling_locations", "attention_weights"),
                                    call["contiguous"]) if not ok]
        if names:
            raise AssertionError(f"msda handed non-contiguous {', '.join(names)} to msda_forward: "
                                 f"the kernels index the tensors as if they were packed; call "
                                 f".contiguous() (free when already contiguous)")


@pytest.mark.task("10.3", points=1)
def test_msda_non_contiguous_inputs(submission):
    res = _run_msda(submission, TWO_LEVELS, "float32", noncontiguous=True)
    what = "msda on non-contiguous value, locations and weights (and upstream gradient)"
    _check_output(res, TWO_LEVELS, "float32", what)
    _check_grads(res, TWO_LEVELS, "float32", what)


@pytest.mark.task("10.3", points=2)
@pytest.mark.rule("accumulator-switch")
def test_msda_resolves_the_accumulator_flag(submission):
    runs = [(SINGLE, "float32", "auto"), (SINGLE, "float16", "auto"),
            (SINGLE, "bfloat16", "auto"), (SINGLE, "float16", True), (SINGLE, "float32", False),
            (SINGLE, "bfloat16", None)]
    expected = [False, False, True, True, False, True]
    why = ["float32 never needs it", "float16 atomics are native: no fp32 buffer",
           "bfloat16 on the default capability (8, 0) needs the fp32 buffer",
           "an explicit True is kept", "an explicit False is kept",
           "None means: ask use_fp32_grad_accum"]
    seen = submission.run(_flag_probe, runs)
    for (_, dtype_name, flag), want, reason, calls in zip(runs, expected, why, seen):
        given = "no flag" if flag == "auto" else f"fp32_grad_accum={flag}"
        if calls != [want]:
            raise AssertionError(f"msda({dtype_name} inputs, {given}) then backward: "
                                 f"msda_backward got fp32_grad_accum {calls or 'never'}, expected "
                                 f"[{want}] ({reason}); resolve None with use_fp32_grad_accum("
                                 f"value.dtype, capability), the capability being (8, 0) "
                                 f"without a GPU")


# -- Task 10.4: the final exam (interpreter) -----------------------------------------------------
@pytest.mark.task("10.4", points=1)
@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
def test_exam_forward_float32(submission, case):
    res = _run_msda(submission, case, "float32", backward=False)
    _check_output(res, case, "float32", "msda")


@pytest.mark.task("10.4", points=1)
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_exam_forward_half_precision(submission, dtype_name):
    res = _run_msda(submission, OUT_OF_BOUNDS, dtype_name, backward=False)
    _check_output(res, OUT_OF_BOUNDS, dtype_name, "msda")


@pytest.mark.task("10.4", points=1)
def test_exam_forward_ragged_queries(submission):
    res = _run_msda(submission, RAGGED, "float32", backward=False)
    _check_output(res, RAGGED, "float32", "msda (more queries than one query block)")


@pytest.mark.task("10.4", points=1)
@pytest.mark.rule("level-starts")
def test_exam_level_start_index_none(submission):
    res = _run_msda(submission, TWO_LEVELS, "float32", starts_none=True)
    _check_output(res, TWO_LEVELS, "float32", "msda(..., level_start_index=None, ...)")
    _check_grads(res, TWO_LEVELS, "float32", "msda(..., level_start_index=None, ...)")


@pytest.mark.task("10.4", points=1)
@pytest.mark.parametrize("case", [OUT_OF_BOUNDS, EXACT_KNOTS, SINGLE, RAGGED],
                         ids=lambda c: c.id)
def test_exam_backward_float32(submission, case):
    res = _run_msda(submission, case, "float32")
    _check_grads(res, case, "float32", "msda, then backward")


@pytest.mark.task("10.4", points=1)
@pytest.mark.parametrize("dtype_name,flag", [("float32", True), ("float16", False),
                                             ("float16", True), ("bfloat16", "auto")],
                         ids=["float32-fp32acc", "float16-native", "float16-fp32acc",
                              "bfloat16-auto"])
def test_exam_backward_dtypes_and_accumulators(submission, dtype_name, flag):
    res = _run_msda(submission, OUT_OF_BOUNDS, dtype_name, flag=flag)
    given = "no flag" if flag == "auto" else f"fp32_grad_accum={flag}"
    _check_output(res, OUT_OF_BOUNDS, dtype_name, f"msda ({given})")
    _check_grads(res, OUT_OF_BOUNDS, dtype_name, f"msda ({given}), then backward")


def _paths_probe(module, case):
    res = [_msda_probe(module, case, "float32", flag=flag) for flag in (False, True)]
    return [r.get("grads", [None])[0] for r in res]


@pytest.mark.task("10.4", points=1)
@pytest.mark.rule("accumulator-switch")
def test_exam_accumulator_paths_agree_in_float32(submission):
    native, fp32 = submission.run(_paths_probe, TWO_LEVELS)
    if native is None or fp32 is None:
        raise AssertionError("msda's backward left value.grad empty")
    expect_close(native, fp32, what="grad_value with fp32_grad_accum=False vs True",
                 case=f"{TWO_LEVELS.describe()} in float32 (both paths add fp32 numbers)",
                 rtol=1e-5, atol=1e-5)


# -- Task 10.4 on a GPU: real sizes, every dtype, past 2**31 -------------------------------------
# Two batches of one 65 x 64 level with M = 8192 heads of D = 32: B * S * M * D = 2**31 + 2**25,
# and the last two rows of batch 1 lie past element 2**31 for every head. Only four heads carry
# values and upstream gradients (the others are zeros, so their outputs and gradients must be 0);
# the judge recomputes those four heads as a problem of their own.
FAR = Case("int64_far_end", B=2, Q=5, M=8192, D=32, shapes=((65, 64),), K=2, seed=21)
FAR_HEADS = (0, 1, FAR.M - 2, FAR.M - 1)


def _far_parts(dtype_name):
    """The data of the far-end case on the CPU: value, loc, attn, grad_out of FAR_HEADS."""
    case = FAR
    gen = seeded_generator(case.seed)
    h = len(FAR_HEADS)
    H, W = case.shapes[0]
    value = torch.randn(case.B, case.S, h, case.D, generator=gen)
    loc = torch.rand(case.B, case.Q, h, 1, case.K, 2, generator=gen)
    # Batch 1 samples the bottom rows (y_pix in [62.5, 64.5)): past element 2**31.
    loc[1, ..., 1] = (62.5 + 2 * loc[1, ..., 1] + 0.5) / H
    attn = torch.rand(case.B, case.Q, h, 1, case.K, generator=gen)
    attn = attn / attn.sum(-1, keepdim=True)
    grad = torch.randn(case.B, case.Q, h, case.D, generator=gen)
    dtype = DTYPES[dtype_name]
    return value.to(dtype), loc.to(dtype), attn.to(dtype), grad.to(dtype)


def _far_probe(module, dtype_name):
    case = FAR
    dev = runtime.device()
    dtype = DTYPES[dtype_name]
    sel = torch.tensor(FAR_HEADS, device=dev)
    v_sel, l_sel, a_sel, g_sel = (t.to(dev) for t in _far_parts(dtype_name))
    value = torch.zeros(case.B, case.S, case.M, case.D, dtype=dtype, device=dev)
    value[:, :, sel] = v_sel
    gen = torch.Generator(device=dev).manual_seed(case.seed)
    loc = torch.rand(case.B, case.Q, case.M, 1, case.K, 2, generator=gen, device=dev).to(dtype)
    loc[:, :, sel] = l_sel
    attn = torch.rand(case.B, case.Q, case.M, 1, case.K, generator=gen, device=dev).to(dtype)
    attn[:, :, sel] = a_sel
    grad = torch.zeros(case.B, case.Q, case.M, case.D, dtype=dtype, device=dev)
    grad[:, :, sel] = g_sel
    for t in (value, loc, attn):
        t.requires_grad_(True)
    shapes = torch.tensor(case.shapes, dtype=torch.int64, device=dev)
    out = module.msda(value, shapes, None, loc, attn)
    out.backward(grad.view(case.B, case.Q, case.M * case.D))
    out4 = out.detach().view(case.B, case.Q, case.M, case.D)

    def outside(t):  # nonzeros outside FAR_HEADS (axis 2)
        return int(torch.count_nonzero(t)) - int(torch.count_nonzero(t[:, :, sel]))

    result = {"out": out4[:, :, sel].reshape(case.B, case.Q, -1),
              "grads": [value.grad[:, :, sel], loc.grad[:, :, sel], attn.grad[:, :, sel]],
              "outside": [outside(out4), outside(value.grad), outside(loc.grad),
                          outside(attn.grad)]}
    if value.is_cuda:
        torch.cuda.synchronize()
    return result


def _far_reference(dtype_name):
    value, loc, attn, grad = _far_parts(dtype_name)
    shapes = torch.tensor(FAR.shapes, dtype=torch.int64)
    out = msda_reference(value.double(), shapes, loc.double(), attn.double())
    grads = reference_grads(value, shapes, loc, attn, grad.reshape(out.shape))
    return out, grads


@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_gpu_exam_forward_decoder(submission, dtype_name):
    res = _run_msda(submission, DECODER, dtype_name, backward=False)
    _check_output(res, DECODER, dtype_name, "msda on the GPU")


@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize("flag", [False, True], ids=["native", "fp32acc"])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_gpu_exam_backward_decoder(submission, dtype_name, flag):
    res = _run_msda(submission, DECODER, dtype_name, flag=flag)
    _check_grads(res, DECODER, dtype_name, f"msda on the GPU (fp32_grad_accum={flag}), backward")


def _edge_probe(module, dtype_name):
    return [_msda_probe(module, case, dtype_name)
            for case in STANDARD_CASES + (RAGGED, TWO_LEVELS)]


@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_gpu_exam_edge_cases(submission, dtype_name):
    results = submission.run(_edge_probe, dtype_name)
    for case, res in zip(STANDARD_CASES + (RAGGED, TWO_LEVELS), results):
        _check_output(res, case, dtype_name, "msda on the GPU")
        _check_grads(res, case, dtype_name, "msda on the GPU, backward")


@pytest.mark.task("10.4", points=2)
@pytest.mark.stage("gpu")
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.rule("int64-offsets")
def test_gpu_exam_int64_far_end(submission, dtype_name):
    res = submission.run(_far_probe, dtype_name)
    dtype = DTYPES[dtype_name]
    desc = (f"case '{FAR.id}' (B=2 Q=5 M=8192 D=32 K=2, one 65x64 level: 2**31 + 2**25 value "
            f"elements; heads {FAR_HEADS} compared) in {dtype_name}")
    for name, count in zip(("output", "value.grad", "sampling_locations.grad",
                            "attention_weights.grad"), res["outside"]):
        if count:
            raise AssertionError(f"msda on {desc}: {count} nonzero elements of the {name} in "
                                 f"heads whose inputs are all zero: something read or wrote the "
                                 f"wrong place (an int32 offset past 2**31?)")
    ref_out, ref_grads = _far_reference(dtype_name)
    expect_close(res["out"], ref_out, what="msda", case=desc, dtype=dtype)
    for name, got, ref in zip(("value", "sampling_locations", "attention_weights"),
                              res["grads"], ref_grads):
        expect_close(got, ref, what=f"msda, then backward: the gradient of {name}", case=desc,
                     dtype=dtype, backward=True)


def _gpu_device_probe(module):
    value, shapes, starts, loc, attn = make_inputs(VCASE, torch.float32)
    on_cpu = _outcome(module.msda, value, shapes, starts, loc, attn)
    dev = "cuda"
    mixed = _outcome(module.msda, value.to(dev), shapes, starts, loc, attn.to(dev))
    return [on_cpu, mixed]


@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
def test_gpu_exam_rejects_cpu_and_mixed_devices(submission):
    cases = [("CPU tensors on a machine with a GPU", None, ["value", "cuda", "cpu"]),
             ("sampling_locations on the CPU, value on the GPU", None,
              ["sampling_locations", "cpu", "cuda"])]
    _check_rejections(submission.run(_gpu_device_probe), cases, entry="msda")


@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
def test_gpu_exam_flag_follows_the_device(submission):
    from msda_labs.chips.lab09 import use_fp32_grad_accum

    capability = torch.cuda.get_device_capability()
    runs = [(SINGLE, "bfloat16", "auto"), (SINGLE, "float16", "auto"), (SINGLE, "float32", "auto")]
    seen = submission.run(_flag_probe, runs)
    for (_, dtype_name, _), calls in zip(runs, seen):
        want = use_fp32_grad_accum(DTYPES[dtype_name], capability)
        if calls != [want]:
            raise AssertionError(f"msda({dtype_name} inputs) on a GPU of capability {capability}: "
                                 f"msda_backward got fp32_grad_accum {calls or 'never'}, expected "
                                 f"[{want}]; ask torch.cuda.get_device_capability(value.device)")


@pytest.mark.task("10.4", points=1)
@pytest.mark.stage("gpu")
def test_gpu_exam_accumulator_paths_agree_in_float32(submission):
    case = DECODER.with_(B=2, Q=100, shapes=((24, 32), (12, 16)))
    native, fp32 = submission.run(_paths_probe, case)
    if native is None or fp32 is None:
        raise AssertionError("msda's backward left value.grad empty")
    expect_close(native, fp32, what="grad_value with fp32_grad_accum=False vs True on the GPU",
                 case=f"{case.describe()} in float32", rtol=1e-5, atol=1e-5)


# -- Task 10.4 on a GPU: speed, against the PyTorch reference ------------------------------------
# One training step of the operator (forward, then all three gradients through autograd) is timed
# in the same run as the same step of the grid_sample reference. The baseline is the reference,
# which every copy of the kit carries; the lab 10 chip is absent from an exported lab 10, so its
# time is reported where it exists and never graded. The kernels here are always the shipped ones
# (msda_labs.student.shipped): what this measures is the operator around them
# (validation, copies, the flag,
# the autograd glue), and a step that follows the lab costs a fraction of the reference's forty
# or so torch operations. fp32: atomics of the element type itself on every GPU. A step that
# waits for the device (validation that reads spatial_shapes on the host does) cannot be captured
# in a CUDA graph; then every variant is timed with CUDA events, and the report says so.
SPEED_CASE, SPEED_DTYPE = DECODER, "float32"
SPEED_LIMIT = REFERENCE_LIMIT  # your step's time / the reference's


def _speed_probe(module, case, dtype_name):
    """Probe (GPU): msda forward + backward, the reference's, and (where the kit has it) the lab
    10 chip's, on the same device inputs, timed side by side; the output and the gradients of
    your first step come back as (out, grad_value, grad_loc, grad_attn)."""
    from msda_labs.grading.timing import chip_function, race_all

    value, shapes, starts, loc, attn = _device_inputs(case, dtype_name, requires_grad=True)
    leaves = (value, loc, attn)
    grad_out = _grad_out(case, dtype_name, value.device)
    # The reference reads the level sizes as Python ints: from a CPU copy, so that it does not
    # wait for the device.
    host_shapes = shapes.cpu()

    def step(forward):
        def run():
            out = forward()
            return (out, *torch.autograd.grad(out, leaves, grad_out))
        return run

    chip = chip_function("lab10", "msda")
    return race_all({
        "yours": step(lambda: module.msda(value, shapes, starts, loc, attn)),
        "reference": step(lambda: msda_reference(value, host_shapes, loc, attn)),
        "chip": None if chip is None else step(lambda: chip(value, shapes, starts, loc, attn)),
    })


@pytest.mark.task("10.4", points=2)
@pytest.mark.stage("gpu")
def test_gpu_speed_against_the_reference(submission):
    case, dtype_name = SPEED_CASE, SPEED_DTYPE
    measured = submission.run(_speed_probe, case, dtype_name)
    step = measured.get("outputs", {}).get("yours") if isinstance(measured, dict) else None
    what = "msda then backward (the step that is timed) on the GPU"
    # A fast wrong answer earns nothing: the step's output and gradients are checked first.
    if not isinstance(step, (tuple, list)) or len(step) != 4:
        raise AssertionError(f"{what}: expected the output and three gradients on "
                             f"{case.describe()}")
    res = {"out": step[0], "grads": list(step[1:])}
    _check_output(res, case, dtype_name, what)
    _check_grads(res, case, dtype_name, what)
    check_reference_speed(measured, what=f"msda forward + backward on {case.describe()} in "
                          f"{dtype_name}", reference_label="the same step of the PyTorch "
                          "reference (grid_sample, autograd)", chip_label="the lab 10 chip",
                          limit=SPEED_LIMIT, submission=submission)
