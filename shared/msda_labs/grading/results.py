"""Grading results as data: one object, rendered by separate writers (terminal, JSON, Markdown,
GitHub Classroom reporter, Classroom 50, Gradescope)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["STATUSES", "TestResult", "ExerciseResult", "GradeResult"]

STATUSES = ("passed", "failed", "not_attempted", "error", "crashed", "timeout")


@dataclass
class TestResult:
    name: str
    status: str
    score: int
    max_score: int
    message: str = ""
    stage: str = "cpu"
    duration: float = 0.0

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown test status {self.status!r}; expected one of {STATUSES}")
        if not (0 <= self.score <= self.max_score):
            raise ValueError(f"{self.name}: score {self.score} outside 0..{self.max_score}")


@dataclass
class ExerciseResult:
    id: str
    name: str
    tests: list[TestResult] = field(default_factory=list)

    @property
    def score(self) -> int:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> int:
        return sum(t.max_score for t in self.tests)

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
class GradeResult:
    lab: str
    title: str = ""
    exercises: list[ExerciseResult] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    submission: str = ""
    integrity: dict = field(default_factory=lambda: {"checked": False, "modified": []})
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> int:
        return sum(e.score for e in self.exercises)

    @property
    def max_score(self) -> int:
        return sum(e.max_score for e in self.exercises)

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
            "exercises": [
                {"id": ex.id, "name": ex.name, "score": ex.score, "max_score": ex.max_score,
                 "tests": [{k: v for k, v in asdict(t).items()} for t in ex.tests]}
                for ex in self.exercises
            ],
        }

    @classmethod
    def from_dict(cls, data: dict) -> GradeResult:
        result = cls(lab=data["lab"], title=data.get("title", ""),
                     stages=list(data.get("stages", [])), submission=data.get("submission", ""),
                     integrity=data.get("integrity") or {"checked": False, "modified": []},
                     notes=list(data.get("notes", [])))
        for ex in data["exercises"]:
            result.exercises.append(ExerciseResult(
                ex["id"], ex["name"], [TestResult(**t) for t in ex["tests"]]))
        return result

    def write_json(self, path: Path | str) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read_json(cls, path: Path | str) -> GradeResult:
        return cls.from_dict(json.loads(Path(path).read_text()))
