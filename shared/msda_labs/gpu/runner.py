"""Where the GPU stage runs: on local CUDA when torch sees a device, else on Modal when the user
has Modal credentials (their own account), else :class:`GpuUnavailable` with the how-to.

    from msda_labs.gpu.runner import run_gpu_stage

    lab = Path("lab-06-make-it-fast")
    result = run_gpu_stage("lab06", lab, lab / "lab06.py")

The result merges into the CPU stages' report (:meth:`GradeResult.merge`), which is what
``grade LAB --stage all`` does (:mod:`msda_labs.flow`). Importing this module imports
neither torch nor modal.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from msda_labs.errors import GpuStageError
from msda_labs.gpu.body import artifact_dir, grade_here, settings_for
from msda_labs.gpu.where import GpuUnavailable, route
from msda_labs.grading.secret import read_secret

if TYPE_CHECKING:  # pragma: no cover
    from msda_labs.grading.results import GradeResult

__all__ = ["GpuUnavailable", "GpuStageError", "route", "run_gpu_stage"]

MODAL_NOTE = "GPU stage ran on Modal ({gpu}), billed to your account"


def run_gpu_stage(lab_id: str, lab_dir: Path, submission: Path, *,
                  timeout: float | None = None, tasks: Iterable[str] = (),
                  seed: int | str | None = None) -> GradeResult:
    """Grade the ``stage("gpu")`` tests of ``lab_id`` (folder ``lab_dir``) on ``submission``.

    Runs on local CUDA when torch sees a device, else on Modal when credentials exist (the
    user's own account; ``MSDA_GPU_RUNNER=local|modal`` forces one). ``timeout`` is the seconds
    one test's code may run (default: the stage's ``timeout_s`` in classroom.yml). Plots and
    tables the tests write land in :func:`msda_labs.gpu.body.artifact_dir`.

    Raises:
        GpuUnavailable: neither a CUDA device nor Modal credentials (the message says how to
            enable either).
        GpuStageError: the stage was started but could not finish (a
            :class:`~msda_labs.errors.KitError`).
    """
    lab_dir = Path(lab_dir).resolve()
    submission = Path(submission).resolve()
    if route(lab_id) == "local":
        return grade_here(lab_dir, submission, stage="gpu", timeout=timeout, tasks=tasks,
                          seed=seed)
    return _run_on_modal(lab_id, lab_dir, submission, timeout=timeout, tasks=tasks, seed=seed)


def _run_on_modal(lab_id: str, lab_dir: Path, submission: Path, *, timeout, tasks, seed):
    from msda_labs.grading.results import GradeResult

    try:
        from msda_labs.gpu import modal_app
    except ImportError as exc:
        raise GpuStageError(f"Modal credentials were found but the modal client is not installed "
                            f"({exc}): pip install modal==1.6.4 (`nox -s {lab_id}-gpu` installs "
                            f"it for you)") from None
    if seed is None:  # the container does not see this process's environment (nor its files)
        seed = read_secret()
    settings = settings_for(lab_id, lab_dir)
    built = modal_app.build(settings, lab_dir)
    payload = built.run_remote(submission, timeout=timeout, tasks=tuple(tasks), seed=seed)
    if payload.get("error"):
        raise GpuStageError(f"the GPU stage on Modal could not grade: {payload['error']}")
    artifacts = payload.pop("artifacts", {}) or {}
    result = GradeResult.from_dict(payload)
    if artifacts:
        out = artifact_dir()
        for name, data in artifacts.items():
            (out / Path(name).name).write_bytes(data)
        result.notes.append(f"GPU stage files ({len(artifacts)}) written to {out}")
    result.notes.insert(0, MODAL_NOTE.format(gpu=settings.gpu))
    return result
