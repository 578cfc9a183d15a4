"""Grading results as data: one object, rendered by separate writers (terminal, JSON, Markdown,
GitHub Classroom reporter, Classroom 50, Gradescope).

Words used here: a test's *status* is its verdict (:class:`Status`); its *stage* is the grading
stage that runs it (``cpu``: every test that needs no GPU, ``gpu``: the tests marked
``@pytest.mark.stage("gpu")``); its *mode* is where the submission's code ran (``cpu``,
``interpret``: Triton's interpreter, ``aot``: compiled for a target without running, ``gpu``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

__all__ = ["Status", "GRADING_STAGES", "RUNTIME_MODES", "Evidence", "TestResult", "ExerciseResult",
           "GradeResult"]

GRADING_STAGES = ("cpu", "gpu")
RUNTIME_MODES = ("cpu", "interpret", "aot", "gpu")


class Status(str, Enum):
    """A test's verdict, with the label every surface shows for it.

    ``terminal``: the terminal and Markdown reports and the GitHub annotations; ``github``: the
    status of GitHub Classroom's command grader (pass, fail, error); ``feedback``: the word
    before the message on the platforms; ``telling``: which failing test explains an exercise
    best (lower first). Gradescope and Classroom 50 know only passed or not (:attr:`passed`).
    The value is the word stored in grade.json.
    """

    #               value            terminal         github   feedback         telling
    PASSED = ("passed", "ok", "pass", "passed", 9)
    FAILED = ("failed", "FAILED", "fail", "failed", 0)
    NOT_ATTEMPTED = ("not_attempted", "not attempted", "fail", "not attempted", 9)
    ERROR = ("error", "ERROR", "error", "error", 1)
    CRASHED = ("crashed", "CRASHED", "error", "crashed", 2)
    TIMEOUT = ("timeout", "TIMEOUT", "error", "timed out", 3)

    def __new__(cls, value: str, terminal: str, github: str, feedback: str, telling: int):
        member = str.__new__(cls, value)
        member._value_ = value
        member.terminal = terminal
        member.github = github
        member.feedback = feedback
        member.telling = telling
        return member

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def passed(self) -> bool:
        return self is Status.PASSED

    @property
    def gradescope(self) -> str:
        return "passed" if self.passed else "failed"


@dataclass
class Evidence:
    """What a failing test saw, as data: the reports write their prose from these fields and
    never read a message back. Every field is optional; a test fills what it measured.

    ``function``, ``line``, ``error``: the student's function the test exercised, and for an
    exception the submission raised, its line in the student's file and ``Type: first line``.
    ``case``: what ran on which inputs. ``wrong``/``total``: how many elements differ of how
    many; ``first_wrong`` (an index such as ``[3, 1]``) with ``yours`` and ``reference`` there.
    ``checked``: the known mistakes whose output was compared; ``matched``: those the output
    equals exactly (one named mistake when it is the only one). ``past_end``: positions written
    past the end of an output (0: the element right after the last), ``before_start``: how many
    before it, ``unwritten``: elements never written. ``named``: the mistake the evidence rules
    in, as one sentence ``label: what it means`` (empty: no known mistake fits).
    """

    __test__ = False

    function: str = ""
    line: int | None = None
    error: str = ""
    case: str = ""
    wrong: int | None = None
    total: int | None = None
    first_wrong: str = ""
    yours: float | None = None
    reference: float | None = None
    checked: list[str] = field(default_factory=list)
    matched: list[str] = field(default_factory=list)
    past_end: list[int] = field(default_factory=list)
    before_start: int = 0
    unwritten: int | None = None
    named: str = ""

    def to_dict(self) -> dict:
        """The fields that hold something (grade.json stays short)."""
        return {k: v for k, v in asdict(self).items() if v not in (None, "", [], 0)}

    @classmethod
    def from_dict(cls, data: dict | None) -> Evidence:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})

    def merged(self, other: Evidence | None) -> Evidence:
        """These fields, with the ones left empty here taken from ``other``."""
        if other is None:
            return self
        mine = asdict(self)
        return Evidence(**{k: v if v not in (None, "", [], 0) else getattr(other, k)
                           for k, v in mine.items()})


@dataclass
class TestResult:
    """One graded test. ``stage`` and ``mode``: see the module's docstring."""

    __test__ = False  # not a pytest test class

    name: str
    status: Status
    score: int
    max_score: int
    message: str = ""
    stage: str = "cpu"
    duration: float = 0.0
    mode: str = ""  # empty: the same as ``stage`` (grade.json written before modes were stored)
    evidence: Evidence = field(default_factory=Evidence)
    # Where a failure's cause lies (msda_labs.grading.judge.diagnosis.settle): {"kind": "named" |
    # "error" | "follows" | "unnamed", "task": where it starts, "label": the mistake, "text"}.
    cause: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.evidence, Evidence):
            self.evidence = Evidence.from_dict(self.evidence)
        try:
            self.status = Status(self.status)
        except ValueError:
            raise ValueError(f"unknown test status {self.status!r}; expected one of "
                             f"{', '.join(s.value for s in Status)}") from None
        # grade.json before this field: "stage" held the mode (cpu, interpret, aot or gpu).
        self.mode = self.mode or self.stage
        if self.stage not in GRADING_STAGES:
            self.stage = "gpu" if self.mode == "gpu" else "cpu"
        if self.mode not in RUNTIME_MODES:
            raise ValueError(f"{self.name}: unknown mode {self.mode!r}; expected one of "
                             f"{', '.join(RUNTIME_MODES)}")
        if not (0 <= self.score <= self.max_score):
            raise ValueError(f"{self.name}: score {self.score} outside 0..{self.max_score}")


class _Totals:
    """``score`` and ``max_score`` of a result made of parts that each have both."""

    def _parts(self) -> list:
        raise NotImplementedError

    @property
    def score(self) -> int:
        return sum(part.score for part in self._parts())

    @property
    def max_score(self) -> int:
        return sum(part.max_score for part in self._parts())


@dataclass
class ExerciseResult(_Totals):
    id: str
    name: str
    tests: list[TestResult] = field(default_factory=list)

    def _parts(self) -> list[TestResult]:
        return self.tests

    @property
    def status(self) -> str:
        """passed when every test passed, not_attempted when none was, else partial."""
        statuses = {t.status for t in self.tests}
        if statuses == {"passed"}:
            return "passed"
        if statuses == {"not_attempted"}:
            return "not_attempted"
        return "partial" if "passed" in statuses else "failed"


@dataclass
class GradeResult(_Totals):
    lab: str
    title: str = ""
    exercises: list[ExerciseResult] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    submission: str = ""
    integrity: dict = field(default_factory=lambda: {"checked": False, "modified": []})
    notes: list[str] = field(default_factory=list)
    # How the submission's code ran: {"separated": True, "uid": ..., "netns": ...} (a uid of its
    # own, msda_labs.grading.isolation.sandbox) or {"separated": False, "why": ...}; empty: not
    # recorded.
    separation: dict = field(default_factory=dict)
    # {task id: points} of the GPU stage's tests when this result holds the CPU stages only: the
    # points the handout counts that this run could not grade (the reports say how to earn them).
    gpu_points: dict = field(default_factory=dict)
    # The speed trials timed on the judge's clock (msda_labs.grading.judge.speedjudge): one record
    # each, with the times per call; what the class leaderboard ranks.
    speed: list = field(default_factory=list)
    # The tasks each task's graded function calls ({"1.2": ["1.1"]}), read from the lab's
    # reference solution (msda_labs.grading.judge.dependencies): the order the reports read tasks
    # in.
    depends: dict = field(default_factory=dict)
    # Where to start reading (msda_labs.grading.judge.diagnosis.settle): {"task", "exercise",
    # "test", "cause": the named mistake or "", "text": the report's start-here line}; empty: all
    # passed.
    start_here: dict = field(default_factory=dict)

    def _parts(self) -> list[ExerciseResult]:
        return self.exercises

    def tests(self):
        for ex in self.exercises:
            for test in ex.tests:
                yield ex, test

    def exercise(self, ex_id: str, name: str = "") -> ExerciseResult:
        for ex in self.exercises:
            if ex.id == ex_id:
                return ex
        ex = ExerciseResult(ex_id, name)
        self.exercises.append(ex)
        return ex

    def merge(self, other: GradeResult) -> GradeResult:
        """Add another stage's results (e.g. the GPU stage) to this report."""
        if other.lab != self.lab:
            raise ValueError(f"cannot merge results of {other.lab} into {self.lab}")
        for ex in other.exercises:
            mine = self.exercise(ex.id, ex.name)
            known = {t.name for t in mine.tests}
            mine.tests.extend(t for t in ex.tests if t.name not in known)
        self.exercises.sort(key=lambda e: [int(p) if p.isdigit() else p
                                           for p in e.id.replace(".", " ").split()])
        self.stages += [s for s in other.stages if s not in self.stages]
        self.notes += [n for n in other.notes if n not in self.notes]
        self.speed += [r for r in other.speed if r not in self.speed]
        for task, needs in other.depends.items():
            self.depends.setdefault(task, list(needs))
        if other.separation and (not self.separation or not other.separation.get("separated")):
            self.separation = dict(other.separation)  # the stage that ran least separated
        if "gpu" in other.stages:  # the GPU stage's points are graded now
            self.gpu_points = {}
        return self

    def to_dict(self) -> dict:
        from msda_labs.grading.judge.diagnosis import (
            settle,  # reads results only through their fields
        )

        settle(self)
        return {
            "lab": self.lab,
            "title": self.title,
            "score": self.score,
            "max_score": self.max_score,
            "stages": list(self.stages),
            "submission": self.submission,
            "integrity": self.integrity,
            "notes": list(self.notes),
            "separation": dict(self.separation),
            "gpu_points": dict(self.gpu_points),
            **({"speed": list(self.speed)} if self.speed else {}),
            "depends": {task: list(needs) for task, needs in self.depends.items()},
            "start_here": dict(self.start_here),
            "exercises": [
                {"id": ex.id, "name": ex.name, "score": ex.score, "max_score": ex.max_score,
                 "tests": [{**asdict(t), "status": t.status.value,
                            "evidence": t.evidence.to_dict()} for t in ex.tests]}
                for ex in self.exercises
            ],
        }

    @classmethod
    def from_dict(cls, data: dict) -> GradeResult:
        result = cls(lab=data["lab"], title=data.get("title", ""),
                     stages=list(data.get("stages", [])), submission=data.get("submission", ""),
                     integrity=data.get("integrity") or {"checked": False, "modified": []},
                     notes=list(data.get("notes", [])),
                     separation=dict(data.get("separation") or {}),
                     gpu_points={str(k): int(v) for k, v in (data.get("gpu_points") or {}).items()},
                     speed=[dict(r) for r in data.get("speed") or [] if isinstance(r, dict)],
                     depends={str(k): [str(t) for t in v]
                              for k, v in (data.get("depends") or {}).items()},
                     start_here=dict(data.get("start_here") or {}))
        for ex in data["exercises"]:
            result.exercises.append(ExerciseResult(
                ex["id"], ex["name"], [TestResult(**t) for t in ex["tests"]]))
        return result

    def write_json(self, path: Path | str) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read_json(cls, path: Path | str) -> GradeResult:
        return cls.from_dict(json.loads(Path(path).read_text()))
