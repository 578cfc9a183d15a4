"""Run one grading stage of one lab on this machine: pytest, the grading plugin, the workers.

    from msda_labs.course.resolve import resolve_lab
    from msda_labs.grading.judge.job import GradingJob
    from msda_labs.grading.judge.stage_run import run_stage

    result = run_stage(GradingJob.build(resolve_lab("lab05"), Path("lab05.py"), stage="cpu"))

This is the low-level step under the grading flow (:mod:`msda_labs.flow`) and the GPU
runner's body (:mod:`msda_labs.gpu.body`): it does not decide where a stage runs, and it never
checks integrity. The job's ``stage`` is a grading stage: ``cpu`` (every test that needs no GPU),
``gpu`` (the tests marked ``@pytest.mark.stage("gpu")``) or ``all``. Without CUDA the GPU tests are
skipped and dropped from the score, with a note.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from msda_labs.errors import KitError

if TYPE_CHECKING:  # pragma: no cover
    from msda_labs.course.resolve import ResolvedLab
    from msda_labs.grading.judge.job import GradingJob
    from msda_labs.grading.judge.results import GradeResult

__all__ = ["run_stage", "collect", "display_path"]


class _Capture:
    """A pytest plugin object that keeps the grading session's result and collection errors."""

    def __init__(self):
        self.result = None
        self.errors: list[str] = []
        self.infrastructure: str = ""

    def pytest_internalerror(self, excrepr, excinfo):
        from msda_labs.grading.isolation.executor import InfrastructureError

        if isinstance(excinfo.value, InfrastructureError):
            self.infrastructure = str(excinfo.value)

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(f"{report.nodeid}: {str(report.longrepr).strip().splitlines()[-1]}")

    def pytest_sessionfinish(self, session, exitstatus):
        from msda_labs.grading.judge.plugin import GRADE_KEY

        gs = session.config.stash.get(GRADE_KEY, None)
        if gs is not None and (gs.records or gs.notes):  # notes: GPU tests skipped, no CUDA
            self.result = gs.result()


# Variables that would change what pytest loads or how it runs, whatever the kit asks for.
_PYTEST_VARIABLES = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DEBUG")
# What every grading session of pytest is started with: no ini file (``-c /dev/null``: no
# pytest.ini, pyproject.toml, setup.cfg or tox.ini of the student's is read), no conftest.py
# (none of the kit's lab tests has one; a student's anywhere on the way is never imported), no
# cache written into the lab folder, and the kit's plugin named explicitly (plugin autoloading
# is off: an entry point that a planted ``*.dist-info`` declares is never loaded).
# no:unraisableexception: its garbage collections at the end of a run cost a second or more of
# a lab's grading, for warnings the grader never shows.
_FIXED_ARGS = ("-p", "no:cacheprovider", "-p", "no:unraisableexception", "-c", os.devnull,
               "--noconftest", "-p", "msda_labs.grading.judge.plugin")


class _PytestEnvironment:
    """For one in-process pytest run: plugin autoloading off and the variables that add options
    or plugins removed; the environment is given back afterwards."""

    def __enter__(self):
        names = (*_PYTEST_VARIABLES, "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
        self.saved = {name: os.environ.get(name) for name in names}
        for name in _PYTEST_VARIABLES:
            os.environ.pop(name, None)
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        # The lab's test modules, rewritten by pytest, and whatever they import are compiled in
        # memory only: no __pycache__ is written into the lab or the course folder.
        self.bytecode = sys.dont_write_bytecode
        sys.dont_write_bytecode = True
        return self

    def __exit__(self, *exc):
        sys.dont_write_bytecode = self.bytecode
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def display_path(path: Path) -> str:
    """``path`` relative to the current folder when it lies below it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path.resolve())


def collect(lab: ResolvedLab | Path, plugin, stage: str = "all") -> int:
    """Collect (not run) the tests of ``lab`` (a resolved lab, or a lab folder's path) for
    ``stage``, with ``plugin`` (a pytest plugin object) watching the collection. Returns pytest's
    exit status: 0, or 5 when nothing was collected; anything else means the lab's tests are
    broken."""
    import pytest

    from msda_labs.course.resolve import resolve_lab
    from msda_labs.grading.judge.job import GradingJob
    from msda_labs.grading.judge.plugin import JobCarrier

    if isinstance(lab, (str, Path)):
        lab = resolve_lab(str(lab))

    # A job that grades nothing: the plugin learns the lab and the stage, no submission is read.
    job = GradingJob(lab=lab, submission=Path(lab.folder) / f"{lab.id}.py", source=b"",
                     stage=stage)
    with _PytestEnvironment():
        return int(pytest.main([str(Path(lab.folder) / "tests"), "--collect-only",
                                "-p", "no:terminal", *_FIXED_ARGS, "--rootdir", str(lab.folder)],
                               plugins=[plugin, JobCarrier(job)]))


def run_stage(job: GradingJob) -> GradeResult:
    """Grade ``job`` (its lab, submission, stage, tasks and limits) in this process.

    The cases are drawn with the job's salt (derived from the instructor's secret and the
    submission's bytes, :mod:`msda_labs.grading.isolation.secret`; no secret: the published cases).

    Returns:
        The result, titled after the lab and naming the submission.

    Raises:
        KitError: the grader could not run, the tests could not be collected, or no test ran.
    """
    import pytest

    from msda_labs.grading.isolation.executor import InfrastructureError
    from msda_labs.grading.judge.plugin import JobCarrier
    from msda_labs.student import cases

    lab = job.lab
    args = [str(Path(lab.folder) / "tests"), "-p", "no:terminal", *_FIXED_ARGS,
            "--rootdir", str(lab.folder), "--strict-markers"]
    if job.select:  # a pytest -k expression (prove's speed-only runs)
        args += ["-k", job.select]
    capture = _Capture()
    try:
        with _PytestEnvironment(), cases.salted(job.salt):
            code = pytest.main(args, plugins=[capture, JobCarrier(job)])
    except InfrastructureError as exc:
        raise KitError(f"the grader could not run: {exc}") from None
    if capture.infrastructure:
        raise KitError(f"the grader could not run: {capture.infrastructure}")
    if capture.errors:
        raise KitError("the lab's tests could not be collected (a grading file is broken; "
                       "restore it with `git checkout -- tests`):\n  "
                       + "\n  ".join(capture.errors))
    if capture.result is None:
        if int(code) == 4:
            raise KitError("pytest refused the grading run (see the message above)")
        raise KitError(f"no tests of {lab.id} ran for stage '{job.stage}'"
                       + (f" and tasks {', '.join(job.tasks)}" if job.tasks else ""))
    result = capture.result
    result.title = lab.title or result.title
    result.submission = display_path(job.submission)
    return result
