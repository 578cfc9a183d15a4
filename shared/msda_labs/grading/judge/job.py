"""One grading job: everything a grading run needs, resolved once, then passed whole.

    job = GradingJob.build(resolve_lab("lab05"), Path("lab05.py"), stage="cpu")
    result = run_stage(job)                       # msda_labs.grading.judge.stage_run

The job is built where a grade is asked for (the grading flow, the GPU body, a regrade's child)
and nothing below re-derives it: the lab's identity, title and runtime mode come from the
manifest entry the job carries (a lab's test modules declare only their tasks), the submission's
bytes are read once (their digest names the submission, and the case salt is derived from them
and the instructor's secret), and the time limit, the tasks and the artifact folder ride on the
job, never in the environment of the judge.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

from msda_labs.course.manifest import DEFAULT_TIMEOUT
from msda_labs.course.resolve import ResolvedLab
from msda_labs.errors import KitError

__all__ = ["GradingJob", "STAGES", "FALLBACK_TIMEOUT_S", "SUBMISSION_LIMIT"]

STAGES = ("cpu", "gpu", "all")  # grading stages: every test that needs no GPU, the GPU ones, both
FALLBACK_TIMEOUT_S = DEFAULT_TIMEOUT["cpu"]  # one test's code, for a job built by hand
SUBMISSION_LIMIT = 1 << 20  # bytes: a lab module is a few hundred lines; more is not a module


@dataclass(frozen=True)
class GradingJob:
    """What one grading run grades, how, and where its files go. Immutable: a runner that needs
    another stage makes another job with :meth:`for_stage`."""

    lab: ResolvedLab
    submission: Path  # absolute path of the module graded (for messages and the child's import)
    source: bytes = field(repr=False)  # the submission's bytes, read once
    stage: str = "cpu"
    tasks: tuple[str, ...] = ()
    timeout: float = FALLBACK_TIMEOUT_S  # seconds one test's code may run
    secret: str | None = field(default=None, repr=False)  # the instructor's seed, if any
    solution: bool = False  # the submission is the lab's chip (``grade --solution``)
    artifacts: Path | None = None  # where GPU tests write plots and tables
    select: str = ""  # a pytest -k expression: grade only the tests it picks (prove's speed runs)
    speed_repeat: int = 1  # trials of each speed test (prove's fairness runs)

    @classmethod
    def build(cls, lab: ResolvedLab, submission: Path, *, stage: str = "cpu",
              tasks=(), timeout: float | None = None, secret: str | None = None,
              solution: bool = False, artifacts: Path | None = None, select: str = "",
              speed_repeat: int = 1) -> GradingJob:
        """The job for ``submission`` of ``lab``; reads the submission's bytes (bounded, regular
        files only) and raises :class:`KitError` where the request cannot be graded."""
        if stage not in STAGES:
            raise KitError(f"unknown grading stage {stage!r}: expected one of {', '.join(STAGES)}")
        path = Path(submission).resolve()
        source = _read_module(path)
        limit = timeout if timeout else stage_timeout(lab, stage)
        return cls(lab=lab, submission=path, source=source, stage=stage,
                   tasks=tuple(tasks), timeout=float(limit), secret=secret or None,
                   solution=solution, artifacts=artifacts, select=select,
                   speed_repeat=max(1, int(speed_repeat)))

    def for_stage(self, stage: str) -> GradingJob:
        """This job for another grading stage, with that stage's time limit unless one was set."""
        if stage not in STAGES:
            raise KitError(f"unknown grading stage {stage!r}: expected one of {', '.join(STAGES)}")
        timeout = self.timeout
        if timeout == stage_timeout(self.lab, self.stage):
            timeout = stage_timeout(self.lab, stage)
        return replace(self, stage=stage, timeout=float(timeout))

    @property
    def mode(self) -> str:
        """Where the submission's code runs for the tests that need no GPU: the lab's first
        stage other than gpu in the manifest (cpu, interpret or aot); cpu for a bare folder."""
        return next((s for s in self.lab.stages if s != "gpu"), "cpu")

    @property
    def number(self) -> int | None:
        """The lab's number (``lab05`` -> 5), or None for an id that has none."""
        digits = self.lab.id[3:]
        return int(digits) if self.lab.id.startswith("lab") and digits.isdigit() else None

    @property
    def digest(self) -> str:
        """SHA-256 of the submission's bytes: the same file is the same submission."""
        return hashlib.sha256(self.source).hexdigest()

    @property
    def salt(self) -> int:
        """The case salt of this submission (0 without a secret: the published cases)."""
        from msda_labs.grading.isolation.secret import case_salt

        return case_salt(self.secret, self.source)


def stage_timeout(lab: ResolvedLab, stage: str) -> float:
    """The manifest's limit for one test's code in ``stage`` (the largest of its modes); for a
    lab no manifest describes, the course's default for the stage."""
    limits = [t for name, t in lab.timeouts.items() if (name == "gpu") == (stage == "gpu")]
    if limits:
        return float(max(limits))
    return float(DEFAULT_TIMEOUT["gpu" if stage == "gpu" else "cpu"])


def _read_module(path: Path) -> bytes:
    """The bytes of a student module: a regular file (no link, FIFO or device), at most
    :data:`SUBMISSION_LIMIT` bytes, opened without following links or blocking."""
    import os
    import stat

    try:
        info = os.lstat(path)
    except OSError:
        raise KitError(f"{path} is missing: the student module should be there") from None
    if not stat.S_ISREG(info.st_mode):
        raise KitError(f"{path} is not a regular file (a link, folder or device): the student "
                       f"module must be a plain file")
    if info.st_size > SUBMISSION_LIMIT:
        raise KitError(f"{path} holds {info.st_size} bytes: a student module is at most "
                       f"{SUBMISSION_LIMIT} bytes")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise KitError(f"cannot read {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(SUBMISSION_LIMIT + 1)
    if len(data) > SUBMISSION_LIMIT:
        raise KitError(f"{path} grew past {SUBMISSION_LIMIT} bytes while it was read")
    return data
