"""What a lab test sees of the student's work: the ``submission`` fixture's object and the
exceptions that stand for each way the submission's code can fail to return a result.

The fixture itself lives in :mod:`msda_labs.grading.judge.plugin`; a test calls
``submission.run(probe, ...)`` or ``submission.call(name, ...)`` and compares what comes back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msda_labs.grading.isolation.executor import InfrastructureError, Outcome
from msda_labs.grading.judge.results import Evidence, Status
from msda_labs.grading.judge.rules import SourceInfo

if TYPE_CHECKING:  # pragma: no cover
    from msda_labs.grading.judge.plugin import GradingSession

__all__ = ["Submission", "SubmissionProblem", "NotAttempted", "SubmissionError",
           "SubmissionCrashed", "SubmissionTimeout", "RuleViolation", "call_probe",
           "imported_probe"]


class SubmissionProblem(Exception):
    """The submission's code did not return a result; ``status`` is the test's verdict;
    ``evidence``: where in the student's file it raised, when known."""

    status = Status.ERROR
    evidence: Evidence | None = None

    @staticmethod
    def for_outcome(kind: str, message: str) -> SubmissionProblem:
        """The exception for an :class:`Outcome` that is not ok (its kind is a status)."""
        for cls in (NotAttempted, SubmissionError, SubmissionCrashed, SubmissionTimeout):
            if cls.status == kind:
                return cls(message)
        raise InfrastructureError(f"the grading worker answered with an unknown kind {kind!r}")


class NotAttempted(SubmissionProblem):
    status = Status.NOT_ATTEMPTED


class SubmissionError(SubmissionProblem):
    status = Status.ERROR


class SubmissionCrashed(SubmissionProblem):
    status = Status.CRASHED


class SubmissionTimeout(SubmissionProblem):
    status = Status.TIMEOUT


class RuleViolation(AssertionError):
    """The submission breaks a rule read from its source."""


def call_probe(module, name: str, *args, **kwargs):
    """The built-in probe: call ``name`` of the submission."""
    fn = getattr(module, name, None)
    if fn is None:
        raise AttributeError(f"your module defines no '{name}'")
    return fn(*args, **kwargs)


def imported_probe(module) -> bool:
    """The preflight probe: importing the module is all it does."""
    return True



class Submission:
    """What a test sees of the student's work: run code in isolation, read the source."""

    def __init__(self, session: GradingSession, mode: str):
        self._session = session
        self.mode = mode
        self.source: SourceInfo = session.source
        self.path: Path = session.submission
        self.job = session.job  # the grading job (its stage, limits, and the kit's knobs)
        self.called: list[str] = []  # the functions call() named: what the test exercises

    def run(self, probe: Callable, *args, timeout: float | None = None, **kwargs) -> Any:
        """``probe(module, *args, **kwargs)`` in a fresh child process; returns its result
        (tensors and plain data) or raises a :class:`SubmissionProblem`."""
        outcome: Outcome = self._session.executor().run(
            probe, *args, mode=self.mode, timeout=timeout or self._session.timeout, **kwargs)
        if outcome.kind == "ok":
            return outcome.value
        problem = SubmissionProblem.for_outcome(outcome.kind, outcome.message)
        extra = outcome.extra or {}
        problem.evidence = Evidence(function=extra.get("function") or "", line=extra.get("line"),
                                    error=extra.get("error") or "")
        raise problem

    def converse(self, probe: Callable, *args, timeout: float | None = None,
                 submission: Path | str | None = None, **kwargs):
        """Start ``probe(module, *args, channel=..., **kwargs)`` in a fresh child and return the
        :class:`~msda_labs.grading.isolation.executor.Conversation` the judge talks with it through
        (``submission``: a kit file imported instead of the student's, for a clean child)."""
        return self._session.executor().converse(
            probe, *args, mode=self.mode, timeout=timeout or self._session.timeout,
            submission=submission, **kwargs)

    def call(self, name: str, *args, **kwargs) -> Any:
        """Call the submission's ``name(*args, **kwargs)`` in a fresh child process."""
        self.called.append(name)
        return self.run(call_probe, name, *args, **kwargs)

    def record_speed(self, record: dict) -> None:
        """Keep one speed trial's outcome in the grade result (``GradeResult.speed``)."""
        self._session.speed.append(dict(record))

    def add_note(self, text: str) -> None:
        """Attach ``text`` to the grade report's notes (shown passed or failed), once."""
        if text not in self._session.notes:
            self._session.notes.append(text)
