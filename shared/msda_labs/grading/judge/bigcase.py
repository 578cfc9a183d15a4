"""The judge's side of the cases past 2**31 value elements (labs 05, 06 and 08: Tasks 5.7, 6.1
and 8.3); the cases themselves are :class:`msda_labs.student.bigcase.BigCase`.

A failure of such a case is blamed on int32 offsets only with evidence (:func:`judge_big`): the
case's *twin* (:meth:`BigCase.twin`: the very same samples on a 32 x 32 level, every offset far
inside the int32 range) is run through the same probe and the same checks, and only when the twin
is right can the size alone be the cause. Otherwise the feedback says the small level fails too.
"""

from __future__ import annotations

from msda_labs.student.bigcase import BigCase, sparse_zeros

__all__ = ["BigCase", "INT64_HINT", "SMALL_TOO", "judge_big", "sparse_zeros"]

INT64_HINT = (
    "this is an overflow of int32 offsets: the same samples on a small level are right, and "
    "this case differs from them only in size: batch 1 starts past value element 2**31, beyond "
    "the int32 range, and offsets computed in int32 (program ids and tl.arange are int32) wrap "
    "around. Cast b and offs_q to tl.int64 before they multiply strides")
SMALL_TOO = ("the very same samples on a small level (32x32, every offset far inside the int32 "
             "range) go wrong too, so the size is not what breaks it: the small cases come "
             "first")


def judge_big(run, check, case: BigCase) -> None:
    """Judge ``case`` through ``run(case)`` (the child's result) and ``check(result, case)``;
    when it fails, name int32 offsets only if the case's twin passes the same run and checks.

    A failure (wrong, crashed, timed out or raised) is re-raised with its status, and with
    :data:`INT64_HINT` when the twin is right, else :data:`SMALL_TOO`.
    """
    from msda_labs.grading.judge.submission import (
        SubmissionCrashed,
        SubmissionError,
        SubmissionTimeout,
    )

    failing = (AssertionError, SubmissionCrashed, SubmissionTimeout, SubmissionError)
    try:
        check(run(case), case)
        return
    except failing as exc:
        first = exc
    if "this is exactly" in str(first):  # a named mistake of any size: that is the news
        raise first
    twin = case.twin()
    try:
        check(run(twin), twin)
        why = INT64_HINT
    except failing:
        why = SMALL_TOO
    evidence = getattr(first, "evidence", None)
    if evidence is not None:  # a comparison's failure (compare.Mismatch) keeps what it saw
        raise type(first)(f"{first}; {why}", evidence) from None
    raise type(first)(f"{first}; {why}") from None
