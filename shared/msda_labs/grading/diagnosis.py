"""Cause first: which failure of a graded result to read first, and which ones follow from it.

A *named mistake* is a failure whose message says which known mistake the output matched: a
sentence of the mistake catalogues (:mod:`msda_labs.mistakes`), or the grader's phrases "this is
exactly the output of X" and "this is a/an X: why". An *error* (the submission raised) is named by
its exception and the line of the student's file it came from.

The tasks of a lab are its graded steps in order (lab 05's helpers, Tasks 5.1-5.3, before the
kernel that composes them): a mistake is a *cause* in the first task whose failure names it. A
later failure that names only causes of earlier tasks *follows from* them, and the reports say so
in one line instead of repeating the mistake; a failure that names nothing while a cause stands
upstream keeps its own line, and the reports add that the cause may be behind it. The terminal
and Markdown reports (:mod:`.render`), the GitHub annotations (:mod:`.annotations`) and the class
page (:mod:`msda_labs.classroom.insight`) all read a result through :func:`diagnose`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from msda_labs.grading.results import ExerciseResult, GradeResult, Status, TestResult

__all__ = ["Cause", "Finding", "Diagnosis", "diagnose", "named_mistakes", "catalogue_sentences",
           "short_label", "task_key", "error_line", "follows_text", "after_text", "FAILING"]

FAILING = (Status.FAILED, Status.ERROR, Status.CRASHED, Status.TIMEOUT)
_EXACT = re.compile(r"this is exactly the output of (?P<text>[^;]+)")
_THIS_IS = re.compile(r"this is an? (?P<label>[^:;]{3,80}): (?P<meaning>[^;]+)")
# A rule the submission breaks (grading.rules, a test's own rule): "rule: X must ...; why".
_RULE = re.compile(r"^(?P<label>rules?: [^;(]{3,120}?)\s*(?:[;(]\s*(?P<meaning>[^;]*))?(?:;|$)")
# The zygote's "... (line 150 of lab05.py)": where in the student's file an error came from.
_LINE = re.compile(r"\(line (?P<line>\d+) of (?P<file>[^)\s]+)\)")
_ARTICLE = re.compile(r"^(?:an?|the)\s+", re.I)


def task_key(task_id: str) -> list:
    """``"5.10"`` after ``"5.9"``: a task id as a sortable key."""
    return [int(p) if p.isdigit() else p for p in re.split(r"[.\s]", task_id)]


@functools.cache
def catalogue_sentences() -> tuple[tuple[str, str, str], ...]:
    """``(key, label, sentence)`` for every sentence of every mistake catalogue.

    The catalogues need torch; where it is not installed (the regrade workflow's gradebook job)
    this is empty and the grader's phrases alone name the mistakes.
    """
    try:
        from msda_labs.mistakes import (
            forward,
            gradients,
            grid_sample,
            layers,
            memory,
            pointers,
            submissions,
        )
        from msda_labs.mistakes.registry import Catalogue
    except ImportError:
        return ()
    sentences = []
    for module in (forward, gradients, grid_sample, layers, memory, pointers, submissions):
        for value in vars(module).values():
            if not isinstance(value, Catalogue):
                continue
            for mistake in value.entries():
                whys = mistake.why.values() if isinstance(mistake.why, dict) else [mistake.why]
                for why in whys:
                    if isinstance(why, str) and len(why) > 12:
                        sentences.append((f"{value.kind}/{mistake.name}", _label(why), why))
    return tuple(sentences)


def _label(sentence: str) -> str:
    head = sentence.split(":", 1)[0].strip()
    return head if len(head) <= 90 else head[:87] + "..."


def short_label(label: str) -> str:
    """A mistake's label without its article: "a missing -0.5" -> "missing -0.5"."""
    return _ARTICLE.sub("", label.strip())


def named_mistakes(message: str, catalogue=None) -> list[tuple[str, str]]:
    """The known mistakes a failure message names, as ``(label, meaning)`` pairs.

    A catalogue sentence found in the message names its mistake; otherwise the grader's phrases
    "this is exactly the output of X" and "this is a/an X: why" name X, and a broken rule
    ("rule: X must ...; why", "rules: ...") is named by its first clause.
    """
    if catalogue is None:
        catalogue = catalogue_sentences()
    found: dict[str, str] = {}
    for _key, label, sentence in catalogue:
        if sentence in message and label not in found:
            found[label] = sentence
    if found:
        return list(found.items())
    match = _EXACT.search(message)
    if match:
        text = match.group("text").strip()
        return [(_label(text), text)]
    match = _THIS_IS.search(message)
    if match:
        return [(match.group("label").strip(), match.group("meaning").strip())]
    match = _RULE.match(message.strip())
    if match:
        label = match.group("label").strip()
        why = (match.group("meaning") or "").strip().removesuffix(")").strip()
        return [(label, f"{label}: {why}" if why else label)]
    return []


def error_line(message: str, file: str | None = None) -> int | None:
    """The line of the student's file an error message points at (``(line N of FILE)``), or
    None; with ``file``, only a line of that file counts."""
    for match in _LINE.finditer(message):
        if file is None or match.group("file") == file:
            return int(match.group("line"))
    return None


def _error_identity(test: TestResult) -> tuple[str, str] | None:
    """An error's label and meaning when it points into the student's file (the same exception
    at the same line is one cause, whichever test met it first)."""
    match = _LINE.search(test.message) if test.status is Status.ERROR else None
    if match is None:
        return None
    # What a test adds after the line (advice, a twin's verdict) is not part of the error.
    text = test.message[:match.end()].strip().removeprefix("while importing your module: ")
    return text, text


@dataclass
class Cause:
    """A mistake where it is first named: its task, the exercise's name, the test."""

    label: str
    meaning: str
    task: str
    exercise: str
    test: str
    line: int | None = None  # an error's line in the student's file
    error: bool = False  # an exception the submission raised, not a named mistake

    @property
    def short(self) -> str:
        return short_label(self.label)

    def says(self) -> str:
        """The mistake in full: its label, then what it means."""
        if self.meaning.startswith(self.label) or self.meaning == self.label:
            return self.meaning
        return f"{self.label}: {self.meaning}"

    def reference(self) -> str:
        """How a later failure points back here: "Task 5.1's missing -0.5"."""
        return f"Task {self.task}'s {self.short}"


@dataclass
class Finding:
    """One failing test, read against the causes before it.

    ``causes``: the causes this test names that start here. ``same``: causes it names that an
    earlier test of the same task already named. ``follows``: causes of earlier tasks that it
    names (all it names, when ``explained``). ``after``: the causes of its own task and earlier
    ones, for a failure that names nothing (they may be behind it).
    """

    exercise: ExerciseResult
    test: TestResult
    names: list[tuple[str, str]] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    same: list[Cause] = field(default_factory=list)
    follows: list[Cause] = field(default_factory=list)
    after: list[Cause] = field(default_factory=list)

    @property
    def explained(self) -> bool:
        """Every mistake it names is a cause named before it (upstream, or above it in its
        task): its line can point back instead of repeating."""
        return bool(self.names) and not self.causes

    @property
    def downstream(self) -> bool:
        """Fully explained by causes of earlier tasks."""
        return self.explained and bool(self.follows) and not self.same


@dataclass
class Diagnosis:
    """The causes of a result in task order, and a :class:`Finding` per failing test."""

    causes: list[Cause] = field(default_factory=list)
    findings: dict[tuple[str, str], Finding] = field(default_factory=dict)

    def of(self, ex: ExerciseResult, test: TestResult) -> Finding | None:
        return self.findings.get((ex.id, test.name))

    def exercise_findings(self, ex: ExerciseResult) -> list[Finding]:
        return [f for t in ex.tests if (f := self.of(ex, t)) is not None]

    def kind(self, ex: ExerciseResult) -> str:
        """``cause``: a mistake starts in this exercise; ``follows``: every failure of it follows
        from causes upstream; ``own``: it failed otherwise; ``passed`` or ``not_attempted``."""
        found = self.exercise_findings(ex)
        if not found:
            return "not_attempted" if ex.status == "not_attempted" else "passed"
        if any(f.causes for f in found):
            return "cause"
        if all(f.downstream for f in found):
            return "follows"
        return "own"

    def upstream_of(self, ex: ExerciseResult) -> list[Cause]:
        """The causes of tasks before ``ex``."""
        return [c for c in self.causes if task_key(c.task) < task_key(ex.id)]


def diagnose(result: GradeResult, catalogue=None) -> Diagnosis:
    """Read ``result`` task by task (in task order) and find where each mistake starts."""
    if catalogue is None:
        catalogue = catalogue_sentences()
    out = Diagnosis()
    by_label: dict[str, Cause] = {}
    for ex in sorted(result.exercises, key=lambda e: task_key(e.id)):
        for test in ex.tests:
            if test.status not in FAILING:
                continue
            names = named_mistakes(test.message, catalogue)
            identity = _error_identity(test)
            raised = not names and identity is not None
            if raised:
                names = [identity]
            finding = Finding(ex, test, names)
            for label, meaning in names:
                known = by_label.get(label)
                if known is None:
                    cause = Cause(label, meaning, ex.id, ex.name, test.name,
                                  error_line(test.message), error=raised)
                    by_label[label] = cause
                    out.causes.append(cause)
                    finding.causes.append(cause)
                elif known.task == ex.id:
                    finding.same.append(known)
                else:
                    finding.follows.append(known)
            out.findings[(ex.id, test.name)] = finding
    # A failure that names nothing may follow from any cause of its own task or an earlier one.
    for (task, _), finding in out.findings.items():
        if not finding.names:
            finding.after = [c for c in out.causes if task_key(c.task) <= task_key(task)]
    return out


def _join(causes: list[Cause]) -> str:
    refs = [c.reference() for c in causes]
    return refs[0] if len(refs) == 1 else ", ".join(refs[:-1]) + " and " + refs[-1]


def follows_text(finding: Finding) -> str:
    """The one line of a failure fully explained by causes named before it."""
    if finding.follows and not finding.same:
        return f"follows from {_join(finding.follows)}: fix that first"
    shorts = ", ".join(c.short for c in finding.same + finding.follows)
    return f"the same {shorts} as above"


def after_text(causes: list[Cause]) -> str:
    """What a failure that names nothing adds when causes stand upstream."""
    return f"{_join(causes)} may be behind this: fix {'it' if len(causes) == 1 else 'them'} " \
           f"first, then grade again"
