"""Cause first: which failure of a graded result to read first, and which ones follow from it.

Everything here reads the evidence a test kept as data (:class:`~.results.Evidence`), never the
prose of a message. A failure *names a mistake* when its evidence rules one in (``named``: the
one known mistake whose output it equals, or a test's own finding such as an unmasked tail whose
in-bounds values are right); it *raised* when the submission threw an exception at a known line
of the student's file (the same exception type at the same line is one mistake, whichever test
met it). A failure that does neither names no known mistake, and the reports say so plainly.

Tasks are read in dependency order (:mod:`.dependencies`: a task whose function calls another
task's function comes after it; otherwise task order). A mistake is a *cause* in the first task
whose failure names it. A later failure that names the same mistake, in a task that builds on
the cause's task (or the same line raising again), *follows from* it; a failure that names
nothing, in a task that calls the function of a failing task, follows from that task. The
reports say so in one line instead of repeating. "May be behind this" is said only where the
evidence links two failures: an exception raised earlier in the same function.

Every failing report starts with *start here*: the named causes, each once, in reading order;
then (first, where nothing is named) each task that fails on its own, in reading order, with
"no known mistake matches" and its first wrong element. :func:`settle` writes this into the
result (``start_here`` and each test's ``cause``), so grade.json and every platform carry it.
The terminal and Markdown reports (:mod:`.render`), the GitHub annotations (:mod:`.annotations`)
and the class page (:mod:`msda_labs.classroom.insight`) read a result through :func:`diagnose`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the results module imports this one (to settle a result it writes)
    from msda_labs.grading.judge.results import ExerciseResult, GradeResult, TestResult

__all__ = ["Cause", "Finding", "Diagnosis", "diagnose", "settle", "label_of", "short_label",
           "task_key", "reading_order", "follows_text", "after_text", "unnamed_text",
           "student_words", "clip", "FAILING"]

FAILING = ("failed", "error", "crashed", "timeout")
_ARTICLE = re.compile(r"^(?:an?|the)\s+", re.I)
# Names that are the grader's, not the student's: a module path of the kit, a function's
# <locals>, a wrapper of the grader's spies.
_INTERNAL = re.compile(r"\b(?:msda_labs|triton|torch)(?:\.\w+)+\.(?=\w)|\b\w+\.<locals>\.")


def task_key(task_id: str) -> list:
    """``"5.10"`` after ``"5.9"``: a task id as a sortable key."""
    return [int(p) if p.isdigit() else p for p in re.split(r"[.\s]", task_id)]


def student_words(text: str) -> str:
    """``text`` without the grader's internal names (``msda_labs.grading.x.Y.<locals>.f()``
    reads ``f()``)."""
    return _INTERNAL.sub("", text)


def clip(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters at a word, the cut marked with an ellipsis and
    every bracket it left open closed."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0].rstrip(" ,;:")
    closing = []
    for ch in cut:
        if ch in "([{":
            closing.append({"(": ")", "[": "]", "{": "}"}[ch])
        elif ch in ")]}" and closing and closing[-1] == ch:
            closing.pop()
    return cut + " …" + "".join(reversed(closing))


def label_of(sentence: str) -> str:
    """A mistake's label: its sentence up to the first colon outside brackets."""
    depth = 0
    for i, ch in enumerate(sentence):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == ":" and depth == 0:
            return clip(sentence[:i].strip(), 90)
    return clip(sentence.strip(), 90)


def short_label(label: str) -> str:
    """A mistake's label without its article: "a missing -0.5" -> "missing -0.5"."""
    return _ARTICLE.sub("", label.strip())


@dataclass
class Cause:
    """A mistake where it starts: its task, the exercise's name, the test. ``named`` is False
    for the first failing task when no known mistake matches (``meaning``: what was seen)."""

    label: str
    meaning: str
    task: str
    exercise: str
    test: str
    line: int | None = None  # an error's line in the student's file
    error: bool = False  # an exception the submission raised, not a named mistake
    function: str = ""  # the student's function it was seen in
    named: bool = True

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

    def start_line(self) -> str:
        return f"Task {self.task} ({self.exercise}): {student_words(self.says())}"


@dataclass
class Finding:
    """One failing test, read against the causes before it.

    ``causes``: the causes this test names that start here. ``same``: causes it names that an
    earlier test of the same task already named. ``follows``: causes of earlier tasks that it
    names (all it names, when ``explained``). ``upstream``: for a failure that names nothing,
    the failing tasks its task builds on (it follows from them). ``after``: an exception raised
    before in the same function, for a failure that names nothing (it may be behind it).
    """

    exercise: ExerciseResult
    test: TestResult
    names: list[tuple[str, str]] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    same: list[Cause] = field(default_factory=list)
    follows: list[Cause] = field(default_factory=list)
    upstream: list[tuple[str, str]] = field(default_factory=list)  # (task, exercise name)
    after: list[Cause] = field(default_factory=list)

    @property
    def explained(self) -> bool:
        """Every mistake it names is a cause named before it (upstream, or above it in its
        task), or it names none and its task builds on a failing task: its line can point back
        instead of repeating."""
        return (bool(self.names) and not self.causes) or (not self.names and bool(self.upstream))

    @property
    def downstream(self) -> bool:
        """Fully explained by earlier tasks."""
        return self.explained and (bool(self.follows) or bool(self.upstream)) and not self.same


@dataclass
class Diagnosis:
    """The causes of a result in reading order, and a :class:`Finding` per failing test.
    ``start``: where the report starts (the named causes, else the first failing task)."""

    causes: list[Cause] = field(default_factory=list)
    findings: dict[tuple[str, str], Finding] = field(default_factory=dict)
    start: list[Cause] = field(default_factory=list)

    def of(self, ex: ExerciseResult, test: TestResult) -> Finding | None:
        return self.findings.get((ex.id, test.name))

    def exercise_findings(self, ex: ExerciseResult) -> list[Finding]:
        return [f for t in ex.tests if (f := self.of(ex, t)) is not None]

    def kind(self, ex: ExerciseResult) -> str:
        """``cause``: a mistake starts in this exercise; ``follows``: every failure of it follows
        from earlier tasks; ``own``: it failed otherwise; ``passed`` or ``not_attempted``."""
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


def _ancestors(depends: dict, task: str) -> set[str]:
    seen: set[str] = set()
    queue = list(depends.get(task, ()))
    while queue:
        t = queue.pop()
        if t not in seen:
            seen.add(t)
            queue.extend(depends.get(t, ()))
    return seen


def reading_order(result: GradeResult) -> list[ExerciseResult]:
    """The exercises in dependency order (a task after every task it builds on), ties broken
    by task order."""
    depends = result.depends or {}
    left = sorted(result.exercises, key=lambda e: task_key(e.id))
    ids = {e.id for e in left}
    done: set[str] = set()
    out = []
    while left:
        ready = next((e for e in left if all(d in done or d not in ids
                                             for d in _ancestors(depends, e.id))), left[0])
        out.append(ready)
        done.add(ready.id)
        left.remove(ready)
    return out


def _identity(test: TestResult) -> tuple[str, str, str, bool] | None:
    """``(key, label, meaning, raised)`` of what a failure names, from its evidence; the key
    of an exception is its type and line (the same line raising again is the same mistake)."""
    ev = test.evidence
    if str(test.status) == "error" and ev.error and ev.line:
        kind = ev.error.split(":", 1)[0].strip()
        where = f", in {ev.function}" if ev.function and ev.function != "<module>" else ""
        label = f"{clip(student_words(ev.error), 160)} (line {ev.line}{where})"
        return f"{kind}@{ev.line}", label, label, True
    if ev.named:
        return label_of(ev.named), label_of(ev.named), ev.named, False
    return None


def _ran_wrong(test: TestResult) -> bool:
    """The failure shows code that ran and went wrong: wrong or missing values, writes outside
    an output, an exception, a crash or a time-out."""
    ev = test.evidence
    return str(test.status) != "failed" or bool(
        ev.wrong or ev.first_wrong or ev.unwritten or ev.past_end or ev.before_start)


def _seen(test: TestResult) -> str:
    """What a failure that names no known mistake saw: its first wrong element and the case."""
    ev = test.evidence
    if ev.first_wrong and ev.yours is not None and ev.reference is not None:
        return (f"first wrong at {ev.first_wrong}: yours {ev.yours:.6g}, reference "
                f"{ev.reference:.6g} ({clip(ev.case, 160)})" if ev.case else
                f"first wrong at {ev.first_wrong}: yours {ev.yours:.6g}, reference "
                f"{ev.reference:.6g}")
    return clip(student_words(test.message or str(test.status)), 220)


def diagnose(result: GradeResult) -> Diagnosis:
    """Read ``result`` in dependency order and find where each mistake starts."""
    out = Diagnosis()
    depends = result.depends or {}
    by_label: dict[str, list[Cause]] = {}
    failing_tasks: dict[str, str] = {}
    rooted: set[str] = set()  # failing tasks with a failure that follows from no other task
    unnamed: dict[str, Cause] = {}  # per task, its first failure of its own that names nothing
    order = reading_order(result)
    for ex in order:
        ancestors = _ancestors(depends, ex.id)
        for test in ex.tests:
            if str(test.status) not in FAILING:
                continue
            identity = _identity(test)
            names = [identity[1:3]] if identity else []
            finding = Finding(ex, test, names)
            if identity:
                key, label, meaning, raised = identity
                # The same mistake: the same line raising again, or the same named mistake in
                # this task or in a task this one builds on.
                known = next((c for c in by_label.get(key, [])
                              if raised or c.task == ex.id or c.task in ancestors), None)
                if known is None:
                    cause = Cause(label, meaning, ex.id, ex.name, test.name, test.evidence.line,
                                  error=raised, function=test.evidence.function)
                    by_label.setdefault(key, []).append(cause)
                    out.causes.append(cause)
                    finding.causes.append(cause)
                elif known.task == ex.id:
                    finding.same.append(known)
                else:
                    finding.follows.append(known)
            else:
                # Wrong values, stray writes, an exception or a crash can come from code this
                # task calls; a check of what the code declares (a prose-only failure) cannot.
                if _ran_wrong(test):
                    finding.upstream = [(t, n) for t, n in failing_tasks.items()
                                        if t in ancestors and t in rooted]
                fn = test.evidence.function
                finding.after = [c for c in out.causes
                                 if c.error and fn and c.function == fn
                                 and (c.task == ex.id or c.task in ancestors)]
                if not finding.upstream and ex.id not in unnamed:
                    unnamed[ex.id] = Cause("no known mistake matches", _seen(test), ex.id,
                                           ex.name, test.name, function=test.evidence.function,
                                           named=False)
            out.findings[(ex.id, test.name)] = finding
            failing_tasks.setdefault(ex.id, ex.name)
            if not finding.downstream:  # a failure of its own: later tasks point back here
                rooted.add(ex.id)
    # Where to start: the named causes, then every task that fails on its own with no named
    # cause, each once, in reading order.
    named_tasks = {c.task for c in out.causes}
    out.start = list(out.causes) + [c for t, c in unnamed.items() if t not in named_tasks]
    if not out.start and out.findings:  # every failure follows from a task with no failure
        finding = next(iter(out.findings.values()))
        out.start = [Cause("no known mistake matches", _seen(finding.test), finding.exercise.id,
                           finding.exercise.name, finding.test.name, named=False)]
    return out


def _join(causes: list[Cause]) -> str:
    refs = [c.reference() for c in causes]
    return refs[0] if len(refs) == 1 else ", ".join(refs[:-1]) + " and " + refs[-1]


def _join_tasks(tasks: list[tuple[str, str]]) -> str:
    refs = [f"Task {t} ({name})" for t, name in tasks]
    return refs[0] if len(refs) == 1 else ", ".join(refs[:-1]) + " and " + refs[-1]


def follows_text(finding: Finding) -> str:
    """The one line of a failure explained by what was named before it."""
    if not finding.names and finding.upstream:
        whose = "its code, which fails its" if len(finding.upstream) == 1 else \
            "their code, which fails their"
        return (f"follows from {_join_tasks(finding.upstream)}: this task calls {whose} own "
                f"tests: fix that first")
    if finding.follows and not finding.same:
        return f"follows from {_join(finding.follows)}: fix that first"
    shorts = ", ".join(c.short for c in finding.same + finding.follows)
    return f"the same {shorts} as above"


def after_text(causes: list[Cause]) -> str:
    """What a failure that names nothing adds when an exception was raised before in the same
    function."""
    return (f"{_join(causes)}, raised in the same function, may be behind this: fix "
            f"{'it' if len(causes) == 1 else 'them'} first, then grade again")


def unnamed_text() -> str:
    return "no known mistake matches"


def _cause_of(finding: Finding) -> dict:
    if finding.causes:
        c = finding.causes[0]
        return {"kind": "error" if c.error else "named", "task": c.task, "label": c.label,
                "text": student_words(c.says())}
    if finding.explained:
        task = finding.follows[0].task if finding.follows else \
            finding.same[0].task if finding.same else finding.upstream[0][0]
        label = (finding.follows or finding.same)[0].label if finding.names else ""
        return {"kind": "follows", "task": task, "label": label, "text": follows_text(finding)}
    return {"kind": "unnamed", "task": finding.exercise.id, "label": "",
            "text": f"{unnamed_text()}: {_seen(finding.test)}"}


def settle(result: GradeResult) -> Diagnosis:
    """Write the diagnosis into ``result``: ``start_here`` (empty when nothing failed) and each
    test's ``cause`` (empty for a test that did not fail). Returns the diagnosis."""
    diagnosis = diagnose(result)
    for ex in result.exercises:
        for test in ex.tests:
            finding = diagnosis.of(ex, test)
            test.cause = _cause_of(finding) if finding is not None else {}
    if diagnosis.start:
        first = diagnosis.start[0]
        result.start_here = {"task": first.task, "exercise": first.exercise, "test": first.test,
                             "cause": first.label if first.named else "",
                             "text": f"start here: {first.start_line()}",
                             "causes": len(diagnosis.start)}
    else:
        result.start_here = {}
    return diagnosis
