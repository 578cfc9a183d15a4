"""The grading flow: a request, its lab, each stage routed to where it runs, one merged result.

    from msda_labs.flow import GradeRequest, grade

    result = grade(GradeRequest(lab="lab06", stage="all"))   # CPU stages here, GPU stage routed

``grade`` resolves the lab (:mod:`msda_labs.course.resolve`), picks the submission (the lab's
``labNN.py``, ``--submission FILE`` or the chip), runs the CPU stages here
(:func:`msda_labs.grading.stage_run.run_stage`) and the GPU stage through the GPU runner (local
CUDA or Modal, :mod:`msda_labs.gpu.runner`), merges them, and adds the integrity check and the
notes. Every problem a person can fix is a :class:`~msda_labs.errors.KitError`; the command line
(:mod:`msda_labs.cli`) is a thin adapter around this module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from msda_labs.course.resolve import ResolvedLab, resolve_lab
from msda_labs.errors import KitError
from msda_labs.grading.stage_run import display_path, run_stage

if TYPE_CHECKING:  # pragma: no cover
    from msda_labs.grading.results import GradeResult

__all__ = ["GradeRequest", "grade", "chip_path", "SOLUTION_NOTE"]

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
    # "auto": the GPU stage runs on local CUDA, else on Modal (msda_labs.gpu.runner); "here":
    # every asked stage runs in this process, whatever devices exist (GPU tests skip without CUDA).
    where: str = "auto"


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
    from msda_labs.grading.integrity import check_folder

    return check_folder(lab.folder)


def _note_extra(result: GradeResult, lab: ResolvedLab) -> None:
    """Say what the repository holds beyond its template (the integrity check lists it)."""
    extra = (result.integrity or {}).get("extra") or []
    if extra:
        shown = ", ".join(extra[:8]) + (f" ... ({len(extra)} in all)" if len(extra) > 8 else "")
        result.notes.append(EXTRA_NOTE.format(module=f"{lab.id}.py", names=shown))


def grade(request: GradeRequest) -> GradeResult:
    """Grade one lab; returns the result or raises :class:`KitError`."""
    lab = resolve_lab(request.lab)
    submission = _submission(request, lab)
    if request.stage in ("gpu", "all") and request.where != "here":
        return _grade_with_gpu(request, lab, submission)
    result = run_stage(lab, submission, stage=request.stage, tasks=request.tasks,
                       timeout=request.timeout, seed=request.seed)
    if request.solution:
        result.notes.insert(0, SOLUTION_NOTE)
    result.integrity = _integrity(lab)
    _note_extra(result, lab)
    return result


def _grade_with_gpu(request: GradeRequest, lab: ResolvedLab, submission: Path) -> GradeResult:
    """``--stage gpu``: the GPU tests on local CUDA, else on Modal, else how to enable either;
    ``--stage all``: the CPU stages here, merged with the GPU stage into one report."""
    from msda_labs.gpu.runner import GpuUnavailable, route, run_gpu_stage

    if lab.stages and "gpu" not in lab.stages:
        if request.stage == "gpu":
            raise KitError(f"{lab.id} has no GPU stage (its stages: {', '.join(lab.stages)})")
        return grade(replace(request, stage="cpu"))
    try:
        route(lab.id)  # fail fast, before the CPU stages spend their time
        result = grade(replace(request, stage="cpu")) if request.stage == "all" else None
        gpu = run_gpu_stage(lab.id, lab.folder, submission, timeout=request.timeout,
                            tasks=request.tasks, seed=request.seed)
    except GpuUnavailable as exc:
        raise KitError(str(exc)) from None
    gpu.title = lab.title or gpu.title
    gpu.submission = display_path(submission)
    if request.solution:
        gpu.notes.insert(0, SOLUTION_NOTE)
    if result is None:
        gpu.integrity = _integrity(lab)
        _note_extra(gpu, lab)
        return gpu
    return result.merge(gpu)
