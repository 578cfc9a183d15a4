"""GPU stages: where a lab's ``stage("gpu")`` tests run, and what runs there.

    from msda_labs.gpu import GpuUnavailable, pick_runner

    result = pick_runner("lab06").run(job)      # job: a GradingJob of the gpu stage

This package only hands names on; the sub-modules, one job each:

    where      standard library only: which runner (the noxfile asks it before installing)
    runner     the stage runners (local CUDA, Modal) and pick_runner, else GpuUnavailable
    body       what runs on the GPU machine: settings, artifacts, grading one stage there
    modal_app  the Modal app: image with pinned torch/triton, the lab and this package as sources
    prove      the harness that proves every GPU stage on real hardware (chip, slow, wrong)
    opbench    the operator benchmark of nox -s bench (report: opbench_report)

Importing this package imports neither torch nor modal.
"""

from __future__ import annotations

from msda_labs.errors import GpuStageError
from msda_labs.gpu.body import (
    ARTIFACT_ENV,
    ARTIFACT_SUFFIXES,
    GpuSettings,
    artifact_dir,
    ensure_importable,
    grade_here,
    settings_for,
)
from msda_labs.gpu.runner import pick_runner, run_gpu_stage
from msda_labs.gpu.where import GpuUnavailable, how_to_enable, modal_credentials, route

__all__ = [
    "ARTIFACT_ENV",
    "ARTIFACT_SUFFIXES",
    "GpuSettings",
    "GpuStageError",
    "GpuUnavailable",
    "artifact_dir",
    "ensure_importable",
    "grade_here",
    "how_to_enable",
    "modal_credentials",
    "pick_runner",
    "route",
    "run_gpu_stage",
    "settings_for",
]
