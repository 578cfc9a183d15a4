"""The student corpus: wrong attempts written from the handouts, each with its expected verdict.

Every lab has a folder ``tests/corpus/labNN/`` of attempts (:mod:`compose` says how one becomes
the file a student hands in) and an ``expected.yaml`` with one entry per attempt:

    - attempt: bilinear_no_half_pixel   # the file, without .py
      mistake: what the student got wrong, in words
      start: "0.1"        # the task where the report starts
      cause: half pixel   # a phrase of the named cause, or null: "no named cause"
      right: ["0.2"]      # tasks the attempt got right: they keep every point
      tasks: ["0.1", "0.2"]   # the tasks graded (all when absent): those the attempt touches,
                              # and the ones it got right that call into them
      gap: why            # a verdict the kit does not give yet: the test fails while it
                          # stands, and passes (strictly) once it is fixed

An attempt that is right, written otherwise than the reference, has ``correct: true`` in place of
``start`` and ``cause``: every task keeps every point, and the report starts nowhere.

What is checked of each verdict goes through :func:`verdict`, the one place that reads the
report, so that the corpus follows the report's fields as they change.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from compose import submission_text
from kit import chip_path, lab_ids, run_grade

CORPUS = Path(__file__).resolve().parent
MIN_ATTEMPTS_PER_LAB = 6
MIN_ATTEMPTS = 66  # over all labs
MIN_NAMED_SHARE = 0.8  # of the attempts, those whose report names their cause


@dataclasses.dataclass
class Verdict:
    """What a student reads first in a report: the points of each task, the task where the
    report starts, the named cause there (None: no named cause), and the start-here line as the
    JSON report gives it and whether the terminal report shows that same line."""

    points: dict[str, tuple[float, float]]
    start: str | None
    cause: str | None
    line: str = ""
    shown: bool = True


def verdict(result: dict) -> Verdict:
    """The verdict of a JSON report (``grade --json``), read from its own fields: ``start_here``
    (task, cause label, text) as every platform shows it."""
    points = {ex["id"]: (sum(t["score"] for t in ex["tests"]),
                         sum(t["max_score"] for t in ex["tests"])) for ex in result["exercises"]}
    here = result.get("start_here") or {}
    line = here.get("text", "")
    # A named cause is a known mistake (the starting test's cause is of kind "named"); an
    # exception at a line of the student's file starts a report too, but names no mistake.
    kinds = {t["name"]: (t.get("cause") or {}).get("kind") for ex in result["exercises"]
             for t in ex["tests"]}
    label = here.get("cause") or None
    named = label and kinds.get(here.get("test")) == "named"
    cause = f"{label} | {line}" if named else None
    stdout = result.get("_stdout")
    return Verdict(points, here.get("task"), cause, line,
                   shown=stdout is None or (bool(line) and line in stdout))


def entries(lab: str) -> list[dict]:
    path = CORPUS / lab / "expected.yaml"
    return yaml.safe_load(path.read_text()) if path.is_file() else []


def all_entries():
    for lab in lab_ids():
        for entry in entries(lab):
            marks = [pytest.mark.xfail(reason=entry["gap"], strict=True)] if entry.get("gap") \
                else []
            yield pytest.param(lab, entry, id=f"{lab}-{entry['attempt']}", marks=marks)


@pytest.mark.parametrize("lab", lab_ids())
def test_every_lab_has_a_corpus(lab):
    found = {p.stem for p in (CORPUS / lab).glob("*.py")}
    listed = {e["attempt"] for e in entries(lab)}
    assert found == listed, f"{lab}: attempts without an entry {sorted(found - listed)}, " \
                            f"entries without an attempt {sorted(listed - found)}"
    assert len(listed) >= MIN_ATTEMPTS_PER_LAB, f"{lab}: {len(listed)} attempts"


def test_the_corpus_is_large_and_most_attempts_name_their_cause():
    """Each attempt's expected cause is checked against its report by test_attempt_verdict, so
    the share counted here from the expectations is the share of reports that name their cause
    (an attempt marked as a gap counts as not named)."""
    listed = [e for lab in lab_ids() for e in entries(lab) if not e.get("correct")]
    named = [e for e in listed if e.get("cause") is not None and not e.get("gap")]
    assert len(listed) >= MIN_ATTEMPTS, f"{len(listed)} attempts, {MIN_ATTEMPTS} wanted"
    assert len(named) >= MIN_NAMED_SHARE * len(listed), \
        f"{len(named)} of {len(listed)} attempts name their cause, {MIN_NAMED_SHARE:.0%} wanted"


def check(entry: dict, seen: Verdict) -> list[str]:
    """What ``seen`` gets wrong of ``entry``'s expected verdict, in words (empty: nothing)."""
    problems = []
    if entry.get("correct"):
        lost = [f"Task {task} ({got}/{top})" for task, (got, top) in seen.points.items()
                if got < top]
        if lost:
            problems.append(f"right code lost points: {', '.join(lost)}")
        if seen.start is not None or seen.line:
            problems.append(f"the report of right code starts somewhere: {seen.line!r}")
        return problems
    for task in entry.get("right") or ():
        got, top = seen.points[task]
        if got < top:
            problems.append(f"Task {task}, which the attempt got right, lost points ({got}/{top})")
    if not seen.line or not seen.shown:
        problems.append("the report has no start-here line" if not seen.line else
                        "the terminal report does not show the JSON report's start-here line")
    got, top = seen.points[entry["start"]]
    if got >= top:
        problems.append(f"Task {entry['start']}, where the mistake is, kept all its points")
    if seen.start != entry["start"]:
        problems.append(f"the report starts at Task {seen.start}, not {entry['start']}")
    expected = entry.get("cause")
    if expected is None and seen.cause is not None:
        problems.append(f"a cause is named ({seen.cause!r}) where none was expected")
    if expected is not None and (seen.cause is None or expected.lower() not in seen.cause.lower()):
        problems.append(f"the cause should name {expected!r}; the report names {seen.cause!r}")
    return problems


@pytest.mark.parametrize(("lab", "entry"), list(all_entries()))
def test_attempt_verdict(lab, entry, tmp_path):
    submission = tmp_path / f"{lab}.py"
    submission.write_text(submission_text(chip_path(lab), CORPUS / lab / f"{entry['attempt']}.py"))
    result = run_grade(lab, submission=submission, tasks=entry.get("tasks") or ())
    seen = verdict(result)
    problems = check(entry, seen)
    assert not problems, f"{lab} {entry['attempt']} ({entry['mistake']}): " + "; ".join(problems) \
        + f"\nverdict: {seen}"


def test_the_check_can_fail():
    """A verdict that blames a right task, starts elsewhere or names another cause is caught."""
    entry = {"start": "1.1", "cause": "truncation", "right": ["1.2"]}
    good = Verdict({"1.1": (3, 7), "1.2": (9, 9)}, "1.1", "a truncation toward zero: ...",
                   "start here: Task 1.1 (bilinear_sample): a truncation toward zero: ...")
    assert check(entry, good) == []
    assert check(entry, dataclasses.replace(good, points={"1.1": (3, 7), "1.2": (2, 9)}))
    assert check(entry, dataclasses.replace(good, start="1.2"))
    assert check(entry, dataclasses.replace(good, cause=None))
    assert check(entry, dataclasses.replace(good, points={"1.1": (7, 7), "1.2": (9, 9)}))
    assert check({**entry, "cause": None}, good)
    right = Verdict({"1.1": (7, 7), "1.2": (9, 9)}, None, None, "")
    assert check({"correct": True}, right) == []
    assert check({"correct": True}, dataclasses.replace(right, points={"1.1": (6, 7),
                                                                       "1.2": (9, 9)}))
    assert check({"correct": True}, dataclasses.replace(right, start="1.1", line="start here"))
    assert check(entry, dataclasses.replace(good, line=""))
    assert check(entry, dataclasses.replace(good, shown=False))
