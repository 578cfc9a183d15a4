"""Grading tests of lab 10 (ship it), Tasks 10.1-10.3. Run them with `nox -s lab10`.

Task 10.4, the final exam (CPU and GPU stages), is test_lab10_suite.py. The probes
(probes_lab10.py) build seeded inputs on the device under test and call the operator in the
isolated child; the judge computes the references on the CPU from the same seeds (the cases and
the checks both test files use are in judge_lab10.py) and says what is wrong.
"""

import re

import judge_lab10
import probes_lab10 as probes
import pytest
import torch
from judge_lab10 import TWO_LEVELS, VCASE, check_grads, check_output, run_msda

from msda_labs.grading import describe_value
from msda_labs.grading.judge.compare import Mismatch, answers_mismatch
from msda_labs.grading.judge.diagnosis import label_of
from msda_labs.grading.judge.probes import shared_run
from msda_labs.grading.judge.rejections import expect_rejections, mentions
from msda_labs.grading.judge.results import Evidence
from msda_labs.mistakes.plumbing import FLAG, answers_of
from msda_labs.truth.cases import OUT_OF_BOUNDS, SINGLE, make_inputs

# The lab as the grading plugin reads it, declared once for both test files in judge_lab10.py.
TASKS = judge_lab10.TASKS


# -- Task 10.1: MSDAFunction ---------------------------------------------------------------------
@pytest.mark.task("10.1", points=1)
def test_function_forward(submission):
    res = submission.run(probes.function_probe, TWO_LEVELS, "float32", False, backward=False)
    check_output(res, TWO_LEVELS, "float32", "MSDAFunction.apply(...)")


@pytest.mark.task("10.1", points=2)
def test_function_backward_all_three_gradients(submission):
    res = submission.run(probes.function_probe, OUT_OF_BOUNDS, "float32", False)
    check_grads(res, OUT_OF_BOUNDS, "float32", "MSDAFunction.apply(..., False)")


@pytest.mark.task("10.1", points=1)
@pytest.mark.rule("accumulator-switch")
def test_function_hands_its_flag_to_the_backward(submission):
    res = submission.run(probes.function_flag_probe, SINGLE)
    # The flag earns its point only on an MSDAFunction whose output and gradients are right.
    for flag, run in zip((True, False), res["runs"]):
        check_output(run, SINGLE, "float32", f"MSDAFunction.apply(..., {flag})")
        check_grads(run, SINGLE, "float32", f"MSDAFunction.apply(..., {flag})")
    for flag, calls in zip((True, False), res["seen"]):
        if calls != [flag]:
            raise answers_mismatch(
                f"MSDAFunction.apply(..., {flag}) then backward: msda_backward was called with "
                f"fp32_grad_accum {calls or 'never'}, expected [{flag}]; keep the flag on ctx in "
                f"forward and pass it on", _flags_seen(res["seen"]), [True, False],
                answers_of(FLAG, [("float32", True, True), ("float32", False, False)]),
                function="MSDAFunction")
    judge_lab10.check_records_believed(submission, "the flag MSDAFunction handed msda_backward")


def _flags_seen(seen) -> list:
    """The flag msda_backward got in each run, where it was called once (else the calls)."""
    return [calls[0] if isinstance(calls, list) and len(calls) == 1 else repr(calls)
            for calls in seen]


@pytest.mark.task("10.1", points=1)
def test_function_refuses_a_second_derivative(submission):
    res = submission.run(probes.double_backward_probe, SINGLE)
    # Refusing the second derivative earns its point only where the first one is right.
    check_output(res["first"], SINGLE, "float32", "MSDAFunction.apply(..., False)")
    check_grads(res["first"], SINGLE, "float32", "MSDAFunction.apply(..., False)")
    if "raised" not in res:
        raise AssertionError("a second derivative through MSDAFunction came out without an "
                             "error: its backward runs a kernel that autograd cannot see, so that "
                             "value is wrong; decorate backward with @once_differentiable")
    if "once_differentiable" not in res["raised"]:
        raise AssertionError(f"a second derivative through MSDAFunction failed, but not because "
                             f"of @once_differentiable: {res['raised']}")


# -- Task 10.2: validate_inputs ------------------------------------------------------------------
def _inputs(**changes):
    """VCASE's good inputs, fp32 on the CPU, with ``changes`` (argument -> function of the good
    tensor) applied; arguments: value (2, 16, 4, 5), shapes (2, 2), starts (2,), loc
    (2, 3, 4, 2, 3, 2), attn (2, 3, 4, 2, 3)."""
    good = dict(zip(("value", "shapes", "starts", "loc", "attn"), make_inputs(VCASE)))
    return tuple(changes[name](t) if name in changes else t for name, t in good.items())


def _each(change, *names) -> dict:
    """The same change for each argument of ``names``, as keywords of :func:`_inputs`."""
    return dict.fromkeys(names, change)


def _refused(submission, cases, **kwargs):
    """Each (label, args, must) of ``cases`` refused with a ValueError that names ``must``."""
    outcomes = submission.run(probes.validate_probe, [(label, args) for label, args, _ in cases],
                              **kwargs)
    expect_rejections(outcomes, cases, entry=kwargs.get("entry", "validate_inputs"))


@pytest.mark.task("10.2", points=1)
@pytest.mark.rule("level-starts")
def test_validate_accepts_good_inputs(submission):
    cases = [
        ("the standard inputs", _inputs()),
        ("level_start_index=None", _inputs(starts=lambda t: None)),
        ("int32 spatial_shapes and level_start_index", _inputs(shapes=torch.Tensor.int,
                                                               starts=torch.Tensor.int)),
        ("an empty batch (B = 0)", _inputs(**_each(lambda t: t[:0], "value", "loc", "attn"))),
        ("no queries (Q = 0)", _inputs(**_each(lambda t: t[:, :0], "loc", "attn"))),
        ("float16 inputs", _inputs(**_each(torch.Tensor.half, "value", "loc", "attn"))),
        ("bfloat16 inputs", _inputs(**_each(torch.Tensor.bfloat16, "value", "loc", "attn"))),
    ]
    # One input that is plainly wrong: accepting everything is not the same as accepting these.
    bad = ("a 3-D value", _inputs(value=lambda t: t[..., 0]))
    outcomes = submission.run(probes.validate_probe, cases + [bad])
    for (label, _), (kind, message) in zip(cases, outcomes):
        if kind != "none":
            raise AssertionError(f"validate_inputs rejected valid inputs ({label}) with {kind}: "
                                 f"{message[:200]}")
    kind, message = outcomes[-1]
    if kind == "none":
        raise AssertionError("validate_inputs accepted a 3-D value as well: a validator that "
                             "accepts these inputs must also refuse the ones that break a rule")
    # The refusal must be the validator's own: a ValueError that names the argument or its
    # shape (Python's "not enough values to unpack" from a function that only runs the op names
    # neither).
    if kind != "ValueError" or not (mentions(message, (2, 16, 4))
                                    or re.search(r"\bvalue\b", message, re.IGNORECASE)):
        raise AssertionError(f"validate_inputs must refuse a 3-D value with a ValueError that "
                             f"names value or its shape (2, 16, 4); it raised {kind}: "
                             f"{message[:200]}")


@pytest.mark.task("10.2", points=2)
def test_validate_value_and_location_shapes(submission):
    _refused(submission, [
        ("a 3-D value", _inputs(value=lambda t: t[..., 0]), ["value", (2, 16, 4)]),
        ("5-D sampling_locations", _inputs(loc=lambda t: t[..., 0, :]),
         ["sampling_locations", (2, 3, 4, 2, 2)]),
        ("sampling_locations with 3 coordinates",
         _inputs(loc=lambda t: torch.cat([t, t[..., :1]], -1)),
         ["sampling_locations", (2, 3, 4, 2, 3, 3)]),
        ("sampling_locations of another batch size",
         _inputs(**_each(lambda t: t[:1], "loc", "attn")),
         ["sampling_locations", (1, 3, 4, 2, 3, 2)]),
        ("sampling_locations with fewer heads than value",
         _inputs(**_each(lambda t: t[:, :, :2], "loc", "attn")),
         ["sampling_locations", (2, 3, 2, 2, 3, 2)]),
    ])


@pytest.mark.task("10.2", points=1)
def test_validate_attention_weights_shape(submission):
    _refused(submission, [
        ("attention_weights truncated along K", _inputs(attn=lambda t: t[..., :1]),
         ["attention_weights", (2, 3, 4, 2, 3), (2, 3, 4, 2, 1)]),
        ("attention_weights with a trailing axis", _inputs(attn=lambda t: t[..., None]),
         ["attention_weights", (2, 3, 4, 2, 3), (2, 3, 4, 2, 3, 1)]),
    ])


@pytest.mark.task("10.2", points=2)
def test_validate_spatial_shapes(submission):
    _refused(submission, [
        ("spatial_shapes of shape (L, 3)", _inputs(shapes=lambda t: torch.cat([t, t[:, :1]], 1)),
         ["spatial_shapes", (2, 2), (2, 3)]),
        ("spatial_shapes for one level too few", _inputs(shapes=lambda t: t[:1]),
         ["spatial_shapes", (2, 2), (1, 2)]),
        ("float spatial_shapes", _inputs(shapes=torch.Tensor.float),
         ["spatial_shapes", "float32"]),
        # 3 x 5 instead of 3 x 4: the levels hold 19 pixels, value has S = 16
        ("spatial_shapes whose levels do not add up to S",
         _inputs(shapes=lambda t: t + torch.tensor([[0, 1], [0, 0]])),
         ["spatial_shapes", "16", "19"]),
    ])


@pytest.mark.task("10.2", points=1)
@pytest.mark.rule("level-starts")
def test_validate_level_start_index(submission):
    _refused(submission, [
        ("level_start_index with one entry too many",
         _inputs(starts=lambda t: torch.cat([t, t[-1:]])), ["level_start_index", (2,), (3,)]),
        ("level_start_index of shape (L, 1)", _inputs(starts=lambda t: t[:, None]),
         ["level_start_index", (2,), (2, 1)]),
    ])


@pytest.mark.task("10.2", points=2)
def test_validate_dtypes(submission):
    _refused(submission, [
        ("sampling_locations in float16 with float32 value", _inputs(loc=torch.Tensor.half),
         ["sampling_locations", "float16", "float32"]),
        ("attention_weights in bfloat16 with float32 value",
         _inputs(attn=torch.Tensor.bfloat16), ["attention_weights", "bfloat16", "float32"]),
        ("all three in float64 (not supported)",
         _inputs(**_each(torch.Tensor.double, "value", "loc", "attn")),
         ["float64"]),
    ])


CUDA_RULE_NEVER_FIRES = (
    "a CUDA rule that never fires: CPU tensors were accepted with the interpreter off "
    "(TRITON_INTERPRET set to \"0\" and to \"\"); value must be on a CUDA device unless "
    "runtime.interpreted() is True (call it: the function itself is always true)")
INTERPRET_READ_AS_TRUTH = (
    "TRITON_INTERPRET read as a truth value: CPU tensors were refused with TRITON_INTERPRET "
    "set to \"\" but accepted with \"0\", a non-empty string; ask runtime.interpreted(), "
    "which is True only for \"1\"")


@pytest.mark.task("10.2", points=1)
def test_validate_device_outside_the_interpreter(submission):
    cases = [("CPU tensors with no interpreter to run them", _inputs(), ["value", "cuda", "cpu"])]
    asked = [(label, args) for label, args, _ in cases]
    outcomes = submission.run(probes.validate_probe, asked, outside_interpreter="fresh")
    if outcomes[0][0] == "none":
        # Which rule is missing: the same input with TRITON_INTERPRET set to "" tells a
        # validator that never asks for CUDA from one that reads "0" as "interpreter on".
        unset = submission.run(probes.validate_probe, asked, outside_interpreter="empty")
        named = CUDA_RULE_NEVER_FIRES if unset[0][0] == "none" else \
            INTERPRET_READ_AS_TRUTH if unset[0][0] == "ValueError" else ""
        raise Mismatch(f"validate_inputs accepted {cases[0][0]}; it must raise ValueError"
                       + (f"; this is {named}" if named else ""),
                       Evidence(function="validate_inputs", case=cases[0][0], named=named,
                                checked=[label_of(CUDA_RULE_NEVER_FIRES),
                                         label_of(INTERPRET_READ_AS_TRUTH)]))
    expect_rejections(outcomes, cases)


@pytest.mark.task("10.2", points=1)
def test_validate_decides_interpreter_or_not_when_called(submission):
    # Imported under the interpreter, then the interpreter switched off, the module left as it
    # was: a decision taken at import (a module-level flag) still lets CPU tensors through.
    _refused(submission, [("CPU tensors, the interpreter switched off after the module was "
                           "imported (decide when validate_inputs is called, not at import)",
                           _inputs(), ["value", "cuda", "cpu"])],
             outside_interpreter="as_imported")


# -- Task 10.3: msda -----------------------------------------------------------------------------
def _msda_computes(submission, rule):
    """The rules of msda's plumbing earn their points only on an msda whose output is right
    (one forward on TWO_LEVELS, shared by the tests that ask)."""
    res = shared_run(submission, "msda_forward_two_levels", probes.msda_probe, TWO_LEVELS,
                     "float32", "auto", False)
    what = f"msda (graded for {rule} only when it runs the kernels and its output is right)"
    judge_lab10.check_kernels_ran(submission, res, what, backward=False)
    check_output(res, TWO_LEVELS, "float32", what)


@pytest.mark.task("10.3", points=1)
def test_msda_validates_its_inputs(submission):
    _msda_computes(submission, "its validation")
    _refused(submission, [
        ("attention_weights truncated along K", _inputs(attn=lambda t: t[..., :1]),
         ["attention_weights"]),
        ("locations in float16 with float32 value", _inputs(loc=torch.Tensor.half),
         ["sampling_locations", "float16"]),
    ], entry="msda")


EMPTY_LAUNCH = ("a launch on empty inputs: with nothing to compute (B = 0 or Q = 0), return "
                "value.new_zeros(B, Q, M * D) without launching anything (an empty grid is not "
                "a valid launch everywhere)")


@pytest.mark.task("10.3", points=2)
def test_msda_empty_batch_or_queries(submission):
    _msda_computes(submission, "its empty inputs")
    sizes = [(0, VCASE.Q), (VCASE.B, 0)]
    M, D = VCASE.M, VCASE.D
    for (B, Q), got in zip(sizes, submission.run(probes.empty_probe, VCASE, sizes)):
        what, out = f"msda with B={B}, Q={Q}", got["out"]
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, Q, M * D) or \
                out.dtype != torch.float32:
            raise AssertionError(f"{what}: expected an empty float32 tensor of shape "
                                 f"{(B, Q, M * D)}, got {describe_value(out)}")
        if got["launches"]:
            # Seen, not guessed: the recorded launcher ran on inputs with nothing to compute.
            raise Mismatch(f"{what}: msda_forward was called {got['launches']} time(s); this is "
                           f"{EMPTY_LAUNCH}", Evidence(function="msda", case=what,
                                                       named=EMPTY_LAUNCH))
    judge_lab10.check_records_believed(submission, "the calls of msda_forward for empty inputs")


@pytest.mark.task("10.3", points=1)
def test_msda_hands_contiguous_tensors_to_the_kernels(submission):
    _msda_computes(submission, "what it hands the kernels")
    calls = submission.run(probes.contiguity_probe, TWO_LEVELS)
    if not calls:
        raise AssertionError("msda never called msda_forward")
    for call in calls:
        names = [n for n, ok in zip(("value", "sampling_locations", "attention_weights"),
                                    call["contiguous"]) if not ok]
        if names:
            raise AssertionError(f"msda handed non-contiguous {', '.join(names)} to msda_forward: "
                                 f"the kernels index the tensors as if they were packed; call "
                                 f".contiguous() (free when already contiguous)")
    judge_lab10.check_records_believed(submission, "what msda handed msda_forward")


@pytest.mark.task("10.3", points=1)
def test_msda_non_contiguous_inputs(submission):
    res = run_msda(submission, TWO_LEVELS, "float32", noncontiguous=True)
    what = "msda on non-contiguous value, locations and weights (and upstream gradient)"
    judge_lab10.check_kernels_ran(submission, res, what)
    check_output(res, TWO_LEVELS, "float32", what)
    check_grads(res, TWO_LEVELS, "float32", what)


# What use_fp32_grad_accum answers on the default capability (8, 0): only bfloat16 needs the
# fp32 buffer there.
SWITCH_AT_DEFAULT_CAPABILITY = {"float32": False, "float16": False, "bfloat16": True}


@pytest.mark.task("10.3", points=2)
@pytest.mark.rule("accumulator-switch")
def test_msda_resolves_the_accumulator_flag(submission):
    # (dtype, flag given, the flag msda_backward must get, why)
    table = [("float32", "auto", False, "float32 never needs it"),
             ("float16", "auto", False, "float16 atomics are native: no fp32 buffer"),
             ("bfloat16", "auto", True,
              "bfloat16 on the default capability (8, 0) needs the fp32 buffer"),
             ("float16", True, True, "an explicit True is kept"),
             ("float32", False, False, "an explicit False is kept"),
             ("bfloat16", None, True, "None means: ask use_fp32_grad_accum")]
    seen = submission.run(probes.flag_probe, [(SINGLE, d, flag) for d, flag, _, _ in table])
    # A mistake is named only when the flags it hands on equal yours in every row: each row
    # asked with what use_fp32_grad_accum(dtype, (8, 0)) answers.
    asked = [(d, flag, SWITCH_AT_DEFAULT_CAPABILITY[d]) for d, flag, _, _ in table]
    for (dtype_name, flag, want, reason), calls in zip(table, seen):
        given = "no flag" if flag == "auto" else f"fp32_grad_accum={flag}"
        if calls != [want]:
            raise answers_mismatch(
                f"msda({dtype_name} inputs, {given}) then backward: msda_backward got "
                f"fp32_grad_accum {calls or 'never'}, expected [{want}] ({reason}); resolve None "
                f"with use_fp32_grad_accum(value.dtype, capability), the capability being "
                f"(8, 0) without a GPU", _flags_seen(seen), [w for _, _, w, _ in table],
                answers_of(FLAG, asked), function="msda")
    judge_lab10.check_records_believed(submission, "the flag msda handed msda_backward")
