"""The grading flow: a request, its lab, each stage routed to where it runs, one merged result.

    from msda_labs.flow import GradeRequest, grade

    result = grade(GradeRequest(lab="lab06", stage="all"))   # CPU stages here, GPU stage routed

``grade`` builds one grading job (:class:`~msda_labs.grading.judge.job.GradingJob`: the lab resolved
once through :mod:`msda_labs.course.resolve`, the submission's bytes, the stage, tasks, limit and
secret), runs the CPU stages here (:func:`msda_labs.grading.judge.stage_run.run_stage`) and the GPU
stage through a GPU runner (local CUDA or Modal, :mod:`msda_labs.gpu.runner`), merges them, and
finishes the result in one place (title, notes, integrity). Every problem a person can fix is a
:class:`~msda_labs.errors.KitError`; the command line (:mod:`msda_labs.cli`) is a thin adapter
around this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from msda_labs.course.resolve import ResolvedLab, resolve_lab
from msda_labs.errors import KitError
from msda_labs.grading.judge.job import GradingJob
from msda_labs.grading.judge.stage_run import display_path, run_stage

if TYPE_CHECKING:  # pragma: no cover
    from msda_labs.grading.judge.results import GradeResult

__all__ = ["GradeRequest", "grade", "build_job", "chip_path", "SOLUTION_NOTE"]

SOLUTION_NOTE = "graded the chip (reference solution)"


@dataclass
class GradeRequest:
    """One ``grade`` command: which lab, which submission, which grading stage(s)."""

    lab: str
    submission: str | None = None
    solution: bool = False
    stage: str = "cpu"  # grading stage: cpu | gpu | all
    tasks: tuple[str, ...] = ()
    timeout: float | None = None
    seed: int | None = None
    seed_file: str | None = None  # a file holding the secret seed (kept off the command line)
    # "auto": the GPU stage runs on local CUDA, else on Modal (msda_labs.gpu.runner); "here":
    # every asked stage runs in this process, whatever devices exist (GPU tests skip without CUDA).
    where: str = "auto"
    select: str = ""  # a pytest -k expression over the lab's tests (the kit's own tools)
    speed_repeat: int = 1  # trials of each speed test (the kit's fairness measurements)


def chip_path(lab_id: str) -> Path:
    """Where this copy of the kit keeps the chip (reference solution) of ``lab_id``."""
    import msda_labs.chips as chips

    return Path(chips.__file__).parent / f"{lab_id}.py"


def _submission(request: GradeRequest, lab: ResolvedLab) -> Path:
    if request.solution:
        path = chip_path(lab.id)
        if not path.is_file():
            raise KitError(f"--solution: the chip of {lab.id} is not part of this copy of the "
                           f"kit (an exported lab carries only the chips of earlier labs)")
        return path
    if request.submission:
        path = Path(request.submission)
        if not path.is_file():
            raise KitError(f"--submission {request.submission}: no such file")
        return path
    path = lab.folder / f"{lab.id}.py"
    if not path.is_file():
        raise KitError(f"{path} is missing: the student module of {lab.id} should be there")
    return path


EXTRA_NOTE = ("files beyond the template, never imported or run by the grader (only {module} is "
              "graded): {names}")


def _integrity(lab: ResolvedLab) -> dict:
    from msda_labs.grading.judge.integrity import check_folder

    return check_folder(lab.folder)


def _note_extra(result: GradeResult, lab: ResolvedLab) -> None:
    """Say what the repository holds beyond its template (the integrity check lists it)."""
    extra = (result.integrity or {}).get("extra") or []
    if extra:
        shown = ", ".join(extra[:8]) + (f" ... ({len(extra)} in all)" if len(extra) > 8 else "")
        result.notes.append(EXTRA_NOTE.format(module=f"{lab.id}.py", names=shown))


def build_job(request: GradeRequest) -> GradingJob:
    """The one grading job of ``request``: the lab resolved, the submission read, the secret and
    the stage's limit fixed. Raises :class:`KitError` where it cannot be graded."""
    from msda_labs.grading.isolation.secret import read_secret

    lab = resolve_lab(request.lab)
    return GradingJob.build(lab, _submission(request, lab), stage=request.stage,
                            tasks=request.tasks, timeout=request.timeout,
                            secret=read_secret(request.seed, request.seed_file),
                            solution=request.solution,
                            select=request.select, speed_repeat=request.speed_repeat)


def grade(request: GradeRequest) -> GradeResult:
    """Grade one lab; returns the result or raises :class:`KitError`."""
    job = build_job(request)
    if job.stage in ("gpu", "all") and request.where != "here":
        result = _grade_with_gpu(job)
    else:
        result = run_stage(job)
    return _finish(result, job)


def _finish(result: GradeResult, job: GradingJob) -> GradeResult:
    """What every grade gets once, whichever runner produced it: the title, the submission's
    name, the chip's note, the integrity check and the files beyond the template."""
    result.title = job.lab.title or result.title
    result.submission = display_path(job.submission)
    if job.solution and SOLUTION_NOTE not in result.notes:
        result.notes.insert(0, SOLUTION_NOTE)
    result.integrity = _integrity(job.lab)
    _note_extra(result, job.lab)
    return result


def _grade_with_gpu(job: GradingJob) -> GradeResult:
    """``--stage gpu``: the GPU tests on local CUDA, else on Modal, else how to enable either;
    ``--stage all``: the CPU stages here, merged with the GPU stage into one report."""
    from msda_labs.gpu.runner import GpuUnavailable, pick_runner

    lab = job.lab
    if lab.stages and "gpu" not in lab.stages:
        if job.stage == "gpu":
            raise KitError(f"{lab.id} has no GPU stage (its stages: {', '.join(lab.stages)})")
        return run_stage(job.for_stage("cpu"))
    try:
        runner = pick_runner(lab.id)  # fail fast, before the CPU stages spend their time
        result = run_stage(job.for_stage("cpu")) if job.stage == "all" else None
        gpu = runner.run(job.for_stage("gpu"))
    except GpuUnavailable as exc:
        raise KitError(str(exc)) from None
    return gpu if result is None else result.merge(gpu)
