"""The one comparison every test uses, with feedback that teaches.

A failure is one line: what was checked and on which case, how many elements are off at which
tolerance, the first wrong element (index, yours vs reference), NaN/inf counted apart, and, when
the wrong output equals what a known mistake produces, the name of that mistake. No explanation
without evidence: a mistake is named only when the output matches it (``variants``: equal within
the tolerance, and no other listed mistake gives the same output on this case; ``near``: within a
stated distance, and nearer to it than to the reference).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from msda_labs.grading.judge.diagnosis import clip
from msda_labs.grading.judge.results import Evidence
from msda_labs.student.cases import tolerance
from msda_labs.student.guards import format_index, mismatch  # shared with python labNN.py

__all__ = ["expect_close", "expect_equal", "expect_tensor", "describe_value", "mismatch",
           "format_index", "Mismatch", "function_named", "answers_mismatch"]


class Mismatch(AssertionError):
    """A failed comparison that carries what it saw (:class:`Evidence`) beside its message."""

    def __init__(self, message: str, evidence: Evidence):
        super().__init__(message)
        self.evidence = evidence


def describe_value(obj: Any) -> str:
    if isinstance(obj, dict) and "__unsupported__" in obj:
        return f"an object of type {obj['__unsupported__']}"
    if isinstance(obj, torch.Tensor):
        return f"a {obj.dtype} tensor of shape {tuple(obj.shape)}"
    return f"{type(obj).__name__} {clip(repr(obj), 80)}"


def expect_tensor(res: Any, what: str, shape=None,
                  dtype: torch.dtype | None = None) -> torch.Tensor:
    """Fail unless ``res`` is a tensor (of ``shape`` / ``dtype`` when given)."""
    if not isinstance(res, torch.Tensor):
        raise AssertionError(f"{what}: expected a torch.Tensor, got {describe_value(res)}")
    if shape is not None and tuple(res.shape) != tuple(shape):
        raise AssertionError(f"{what}: shape {tuple(res.shape)}, expected {tuple(shape)}")
    if dtype is not None and res.dtype != dtype:
        raise AssertionError(f"{what}: dtype {res.dtype}, expected {dtype}")
    return res


def expect_close(res: Any, ref: torch.Tensor, *, what: str, case: str = "",
                 dtype: torch.dtype | None = None, rtol: float | None = None,
                 atol: float | None = None, backward: bool = False,
                 variants: Mapping[str, tuple[torch.Tensor, str]] | Callable[[], Mapping]
                 | None = None,
                 expect_dtype: torch.dtype | None = None,
                 near: Mapping[str, tuple[torch.Tensor, float, str]] | Callable[[], Mapping]
                 | None = None) -> None:
    """Assert ``res`` matches ``ref`` within the dtype's tolerance (or the given one).

    Args:
        res: the submission's result (anything; non-tensors fail with a clear message).
        ref: the reference, any float dtype (compared in float64).
        what: what was computed, e.g. ``"msda_naive_student(...)"``.
        case: a description of the inputs (``Case.describe()``).
        dtype: the dtype the submission computed in; picks the tolerance.
        variants: ``{name: (output_of_that_mistake, explanation)}``, checked when the result is
            wrong: the one mistake whose output the result equals is named in the message; when
            several different mistakes give that output on this case, none is named. A
            zero-argument callable returning that mapping is called only then (mistakes costly
            to compute).
        expect_dtype: when given, the result must have this dtype.
        near: ``{name: (output_of_that_mistake, distance, explanation)}``, read when no variant
            matched: the explanation is printed when the largest difference between the result
            and that output is at most ``distance`` and smaller than its largest difference from
            the reference (a mistake whose exact output depends on details, such as where a
            half-precision sum rounds). A callable is called only then.
    """
    where = f"{what} on {case}" if case else what
    res = expect_tensor(res, where, shape=ref.shape)
    if expect_dtype is not None and res.dtype != expect_dtype:
        raise AssertionError(f"{where}: returned dtype {res.dtype}, expected {expect_dtype}")
    if rtol is None or atol is None:
        d_rtol, d_atol = tolerance(dtype or res.dtype, backward=backward)
        rtol = d_rtol if rtol is None else rtol
        atol = d_atol if atol is None else atol
    bad, n_bad = mismatch(res, ref, rtol, atol)
    if n_bad == 0:
        return
    flat = int(bad.flatten().nonzero()[0])
    r = res.detach().flatten()[flat].item()
    e = ref.detach().flatten()[flat].item()
    parts = [f"{where}: {n_bad} of {ref.numel()} elements differ (rtol={rtol:g}, atol={atol:g}); "
             f"first at {format_index(flat, tuple(ref.shape))}: yours {r:.6g}, reference {e:.6g}"]
    evidence = Evidence(case=where, function=function_named(what), wrong=n_bad,
                        total=ref.numel(),
                        first_wrong=format_index(flat, tuple(ref.shape)), yours=_plain(r),
                        reference=_plain(e))
    res64 = res.detach().to(torch.float64)
    n_nan, n_inf = int(torch.isnan(res64).sum()), int(torch.isinf(res64).sum())
    if n_nan or n_inf:
        parts.append(f"your result holds {n_nan} NaN and {n_inf} inf")
    if bool((res64 == 0).all()) and bool((ref != 0).any()):
        parts.append("your result is all zeros: is anything written at all?")
    if callable(variants):
        variants = variants()
    matched = []  # the explanations of every variant the result equals, in order, once each
    evidence.checked = [_head(why) for _out, why in (variants or {}).values()]
    for out, explanation in (variants or {}).values():
        if out.shape != ref.shape:
            continue
        _, differs_from_ref = mismatch(out, ref, rtol, atol)
        _, n_off = mismatch(res, out, max(rtol, 1e-6), max(atol, 1e-6))
        if differs_from_ref and n_off == 0 and explanation not in matched:
            matched.append(explanation)
    evidence.matched = list(matched)
    if len(matched) == 1:
        parts.append(f"this is exactly the output of {matched[0]}")
        evidence.named = matched[0]
    elif matched:  # the case cannot tell these mistakes apart: naming one would be a guess
        parts.append(f"on this case {len(matched)} known mistakes give exactly this output, so "
                     f"it names none of them")
    else:
        near = near() if callable(near) else near
        evidence.checked += [_head(why) for _out, _d, why in (near or {}).values()]
        explained = _near(res64, ref, near)
        if explained:
            parts.append(explained)
            evidence.named = explained.removeprefix("this is ")
    raise Mismatch("; ".join(parts), evidence)


def answers_mismatch(message: str, seen: list, right: list,
                     variants: Mapping[str, tuple[list, str]], *, function: str = "",
                     case: str = "") -> Mismatch:
    """The failure of a test whose answers are plain values (bools, strings, dicts), with what
    the answers rule in: the one known mistake whose answers equal ``seen`` on every question of
    the test, where they differ from ``right``.

    Args:
        message: the failure in words (the first wrong answer, and why it is wrong).
        seen: the submission's answers, one per question, as plain comparable values.
        right: the right answers, in the same order.
        variants: ``{name: (answers of that mistake, explanation)}``
            (:func:`msda_labs.mistakes.plumbing.answers_of`). A variant whose answers equal
            ``right`` cannot show on these questions and is left out; when several different
            mistakes answer exactly ``seen``, none is named.

    Returns:
        The :class:`Mismatch` to raise.
    """
    evidence = Evidence(function=function, case=case,
                        checked=[_head(why) for _answers, why in variants.values()])
    matched = []
    for answers, why in variants.values():
        if answers != right and answers == seen and why not in matched:
            matched.append(why)
    evidence.matched = list(matched)
    if len(matched) == 1:
        evidence.named = matched[0]
        message = f"{message}; these answers are exactly those of {matched[0]}"
    return Mismatch(message, evidence)


def function_named(what: str) -> str:
    """The function a check's ``what`` starts with ("msda_forward_autotuned with ..." names
    msda_forward_autotuned): the function the test exercised; "" when it starts otherwise."""
    head = what.strip().split(" ", 1)[0].split("(", 1)[0] if what.strip() else ""
    return head if head.isidentifier() else ""


def _plain(x) -> float | None:
    """A number for grade.json (JSON has no NaN or inf: those stay None)."""
    x = float(x)
    return x if x == x and abs(x) != float("inf") else None


def _head(sentence: str) -> str:
    """A mistake's label: its sentence up to the first colon."""
    head = sentence.removeprefix("this is ").split(":", 1)[0].strip()
    return clip(head, 90)


def _largest_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    gap = (a - b.detach().to(torch.float64)).abs()
    return float("inf") if not bool(torch.isfinite(gap).all()) else float(gap.max())


def _near(res64: torch.Tensor, ref: torch.Tensor, near) -> str:
    """The explanation of the first ``near`` mistake the result is within reach of, or ''."""
    for out, distance, explanation in (near or {}).values():
        if out.shape != ref.shape:
            continue
        to_mistake = _largest_gap(res64, out)
        if to_mistake <= distance and to_mistake < _largest_gap(res64, ref):
            return explanation
    return ""


def expect_equal(res: Any, expected: Any, *, what: str, hint: str = "") -> None:
    """Exact equality of plain values (ints, bools, strings, lists)."""
    if isinstance(expected, bool):
        ok = res is expected or (type(res).__name__ == "bool" and res == expected)
        if not isinstance(res, bool):
            raise AssertionError(f"{what}: expected the bool {expected}, got "
                                 f"{describe_value(res)}")
    else:
        ok = type(res) is type(expected) and res == expected
    if not ok:
        msg = f"{what}: got {clip(repr(res), 120)}, expected {clip(repr(expected), 120)}"
        raise AssertionError(f"{msg}; {hint}" if hint else msg)
