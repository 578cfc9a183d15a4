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

__all__ = ["Status", "GRADING_STAGES", "RUNTIME_MODES", "TestResult", "ExerciseResult",
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

    def __post_init__(self):
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
    # own, msda_labs.grading.sandbox) or {"separated": False, "why": ...}; empty: not recorded.
    separation: dict = field(default_factory=dict)
    # {task id: points} of the GPU stage's tests when this result holds the CPU stages only: the
    # points the handout counts that this run could not grade (the reports say how to earn them).
    gpu_points: dict = field(default_factory=dict)
    # The speed trials timed on the judge's clock (msda_labs.grading.speedjudge): one record
    # each, with the times per call; what the class leaderboard ranks.
    speed: list = field(default_factory=list)

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
        if other.separation and (not self.separation or not other.separation.get("separated")):
            self.separation = dict(other.separation)  # the stage that ran least separated
        if "gpu" in other.stages:  # the GPU stage's points are graded now
            self.gpu_points = {}
        return self

    def to_dict(self) -> dict:
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
            "exercises": [
                {"id": ex.id, "name": ex.name, "score": ex.score, "max_score": ex.max_score,
                 "tests": [{**asdict(t), "status": t.status.value} for t in ex.tests]}
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
                     speed=[dict(r) for r in data.get("speed") or [] if isinstance(r, dict)])
        for ex in data["exercises"]:
            result.exercises.append(ExerciseResult(
                ex["id"], ex["name"], [TestResult(**t) for t in ex["tests"]]))
        return result

    def write_json(self, path: Path | str) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read_json(cls, path: Path | str) -> GradeResult:
        return cls.from_dict(json.loads(Path(path).read_text()))
