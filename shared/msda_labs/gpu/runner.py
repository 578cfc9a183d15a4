"""Where the GPU stage runs: a runner takes a grading job whole and returns one result.

    from msda_labs.gpu.runner import pick_runner

    runner = pick_runner("lab06")         # LocalRunner (gpu.body) on local CUDA, else ModalRunner
    result = runner.run(job)              # job: a GradingJob of the gpu stage

:func:`pick_runner` decides where (local CUDA when torch sees a device, else Modal when the user
has Modal credentials, their own account; ``MSDA_GPU_RUNNER=local|modal`` forces one), else raises
:class:`GpuUnavailable` with the how-to. The grading flow (:mod:`msda_labs.flow`) and the regrade
finish what a runner returns in one place (title, notes, integrity); a runner adds only what is
its own (the device, the Modal note, the files the tests wrote). Importing this module imports
neither torch nor modal.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from msda_labs.errors import GpuStageError
from msda_labs.gpu.body import LocalRunner, artifact_dir, settings_for
from msda_labs.gpu.where import GpuUnavailable, route

if TYPE_CHECKING:  # pragma: no cover
    from msda_labs.grading.judge.job import GradingJob
    from msda_labs.grading.judge.results import GradeResult

__all__ = ["GpuUnavailable", "GpuStageError", "StageRunner", "LocalRunner", "ModalRunner",
           "pick_runner", "route", "run_gpu_stage"]

MODAL_NOTE = "GPU stage ran on Modal ({gpu}), billed to your account"


class StageRunner(Protocol):
    """Grades one job somewhere and returns its result."""

    name: str

    def run(self, job: GradingJob) -> GradeResult: ...


class ModalRunner:
    """Modal, on the user's own account: the job travels as its submission's text and settings;
    the container builds the same job again from them (:mod:`msda_labs.gpu.modal_app`)."""

    name = "modal"

    def run(self, job: GradingJob) -> GradeResult:
        from msda_labs.grading.judge.results import GradeResult

        try:
            from msda_labs.gpu import modal_app
        except ImportError as exc:
            raise GpuStageError(f"Modal credentials were found but the modal client is not "
                                f"installed ({exc}): pip install modal==1.6.4 (`nox -s "
                                f"{job.lab.id}-gpu` installs it for you)") from None
        settings = settings_for(job.lab.id, Path(job.lab.folder))
        built = modal_app.build(settings, Path(job.lab.folder))
        payload = built.run_job(job)
        if payload.get("error"):
            raise GpuStageError(f"the GPU stage on Modal could not grade: {payload['error']}")
        artifacts = payload.pop("artifacts", {}) or {}
        result = GradeResult.from_dict(payload)
        if artifacts:
            out = job.artifacts or artifact_dir()
            out.mkdir(parents=True, exist_ok=True)
            for name, data in artifacts.items():
                (out / Path(name).name).write_bytes(data)
            result.notes.append(f"GPU stage files ({len(artifacts)}) written to {out}")
        result.notes.insert(0, MODAL_NOTE.format(gpu=settings.gpu))
        return result


_RUNNERS: dict[str, type] = {"local": LocalRunner, "modal": ModalRunner}


def pick_runner(lab_id: str) -> StageRunner:
    """The runner for ``lab_id``'s GPU stage on this machine (see :func:`route`).

    Raises:
        GpuUnavailable: neither a CUDA device nor Modal credentials (the message says how to
            enable either).
    """
    return _RUNNERS[route(lab_id)]()


def run_gpu_stage(job: GradingJob) -> GradeResult:
    """Grade ``job`` (a gpu-stage job) where its lab's GPU stage runs on this machine.

    Raises:
        GpuUnavailable: no CUDA device and no Modal credentials.
        GpuStageError: the stage was started but could not finish (a
            :class:`~msda_labs.errors.KitError`).
    """
    return pick_runner(job.lab.id).run(job)
