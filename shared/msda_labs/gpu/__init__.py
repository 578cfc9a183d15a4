"""GPU stages: a lab's ``stage("gpu")`` tests on local CUDA, else on Modal, else a how-to.

    from msda_labs.gpu import GpuUnavailable, run_gpu_stage

    lab = Path("lab-06-make-it-fast")
    result = run_gpu_stage("lab06", lab, lab / "lab06.py")

:func:`run_gpu_stage` grades on this machine when torch sees a CUDA device, else in a container on
Modal when the user has Modal credentials (their own account), else raises
:class:`GpuUnavailable` with a message that says how to enable either. Its result merges into the
CPU stages' report (:meth:`GradeResult.merge`), which is what ``grade LAB --stage all`` does.

The sub-modules, one job each:

    where      standard library only: which runner (the noxfile asks it before installing)
    modal_app  the Modal app: image with pinned torch/triton, the lab and this package as sources
    speed      device-time comparison of the student's operator with the chip (for lab tests)
    bench      device-timing helpers of lab 06 (bandwidth, the wide-vs-narrow race)
    prove      the harness that proves every GPU stage on real hardware (chip, slow, wrong)

Importing this package imports neither torch nor modal.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from msda_labs.cli import UsageProblem
from msda_labs.gpu.where import GpuUnavailable, how_to_enable, modal_credentials, route

if TYPE_CHECKING:  # pragma: no cover
    from msda_labs.grading.results import GradeResult

__all__ = [
    "ARTIFACT_ENV",
    "GpuSettings",
    "GpuStageError",
    "GpuUnavailable",
    "artifact_dir",
    "ensure_importable",
    "grade_here",
    "how_to_enable",
    "modal_credentials",
    "route",
    "run_gpu_stage",
    "settings_for",
]

ARTIFACT_ENV = "MSDA_ARTIFACT_DIR"
ARTIFACT_SUFFIXES = (".png", ".svg", ".pdf", ".csv", ".json", ".txt", ".md")
_ARTIFACT_LIMIT = 16 << 20  # bytes a Modal run sends back (plots and tables, not data)
FALLBACK_GPU = "H100"
FALLBACK_TIMEOUT_S = 300
FALLBACK_JOB_TIMEOUT_S = 1800


class GpuStageError(UsageProblem):
    """The GPU stage was started but could not finish (Modal refused, the image failed...)."""


def artifact_dir() -> Path:
    """Where GPU tests write plots and tables: ``$MSDA_ARTIFACT_DIR``, else ``./gpu-artifacts``.

    Tests write here from the judge process (never from the submission's child), e.g.
    ``fig.savefig(artifact_dir() / "lab06-bandwidth.png")``."""
    path = Path(os.environ.get(ARTIFACT_ENV) or Path.cwd() / "gpu-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def ensure_importable() -> None:
    """Put this package on PYTHONPATH for the grading workers (separate processes) where the kit
    is not pip-installed: a GPU machine's own python with ``PYTHONPATH=shared``, a Modal
    container. (The grade command loads the pytest plugin itself when pytest will not.)"""
    import msda_labs

    root = str(Path(msda_labs.__file__).resolve().parents[1])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


@dataclass(frozen=True)
class GpuSettings:
    """What classroom.yml says about a lab's GPU stage (with fallbacks where it says nothing)."""

    lab: str
    title: str = ""
    gpu: str = FALLBACK_GPU
    timeout_s: int = FALLBACK_TIMEOUT_S  # one test's code
    job_timeout_s: int = FALLBACK_JOB_TIMEOUT_S  # the whole stage (the Modal function)
    python: str = "3.11"
    manifest: Path | None = None
    has_gpu_stage: bool | None = None  # None: no manifest says


def settings_for(lab_id: str, lab_dir: Path | str | None = None) -> GpuSettings:
    """Read the GPU stage of ``lab_id`` from the classroom.yml above ``lab_dir`` (or the kit's)."""
    try:
        from msda_labs.course.manifest import find_manifest, load_manifest

        manifest = load_manifest(find_manifest(Path(lab_dir) if lab_dir else None))
        lab = manifest.lab(lab_id)
    except Exception:  # noqa: BLE001 - no manifest (a bare lab folder): the fallbacks hold
        return GpuSettings(lab=lab_id)
    stage = lab.stage("gpu")
    course_gpu = manifest.raw.get("course", {}).get("gpu") or FALLBACK_GPU
    return GpuSettings(
        lab=lab.id, title=lab.title,
        gpu=(stage.gpu if stage and stage.gpu else course_gpu),
        timeout_s=stage.timeout_s if stage else FALLBACK_TIMEOUT_S,
        job_timeout_s=stage.job_timeout_s if stage else FALLBACK_JOB_TIMEOUT_S,
        python=manifest.python, manifest=manifest.path, has_gpu_stage=stage is not None)


def _device_note() -> str | None:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return (f"GPU stage ran on {props.name} (compute capability {props.major}.{props.minor}), "
            f"torch {torch.__version__}, triton {_triton_version()}")


def _triton_version() -> str:
    try:
        import triton
    except ImportError:  # pragma: no cover
        return "missing"
    return triton.__version__


def grade_here(lab_dir: Path | str, submission: Path | str, *, stage: str = "gpu",
               timeout: float | None = None, tasks: Iterable[str] = (),
               seed: int | None = None) -> GradeResult:
    """Grade ``stage`` of the lab in ``lab_dir`` in this process, whatever devices there are.

    Without CUDA the GPU tests are skipped for that reason and dropped from the score, with a
    note; the result then holds only the other stages' tests (none for ``stage="gpu"``)."""
    from msda_labs.cli import GradeRequest, grade

    ensure_importable()
    result = grade(GradeRequest(lab=str(lab_dir), submission=str(submission), stage=stage,
                                tasks=tuple(tasks), timeout=timeout, seed=seed, where="here"))
    note = _device_note()
    if note and stage in ("gpu", "all"):
        result.notes.append(note)
    return result


def run_gpu_stage(lab_id: str, lab_dir: Path, submission: Path, *,
                  timeout: float | None = None, tasks: Iterable[str] = (),
                  seed: int | None = None) -> GradeResult:
    """Grade the ``stage("gpu")`` tests of ``lab_id`` (folder ``lab_dir``) on ``submission``.

    Runs on local CUDA when torch sees a device, else on Modal when credentials exist (the
    user's own account; ``MSDA_GPU_RUNNER=local|modal`` forces one), else raises
    :class:`GpuUnavailable`. ``timeout`` is the seconds one test's code may run (default: the
    stage's ``timeout_s`` in classroom.yml). Raises :class:`GpuStageError` (a
    :class:`msda_labs.cli.UsageProblem`) when the stage was started but could not finish.

    Plots and tables the tests write land in :func:`artifact_dir`."""
    lab_dir = Path(lab_dir).resolve()
    submission = Path(submission).resolve()
    runner = route(lab_id)
    if runner == "local":
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
    if seed is None and os.environ.get("MSDA_GRADE_SEED", "").strip().lstrip("-").isdigit():
        seed = int(os.environ["MSDA_GRADE_SEED"])  # the container does not see this process's env
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
            target = out / Path(name).name
            target.write_bytes(data)
        result.notes.append(f"GPU stage files ({len(artifacts)}) written to {out}")
    result.notes.insert(0, f"GPU stage ran on Modal ({settings.gpu}), billed to your account")
    return result


def collect_artifacts(folder: Path, limit: int = _ARTIFACT_LIMIT) -> dict[str, bytes]:
    """The plot and table files under ``folder`` (flattened names), up to ``limit`` bytes."""
    found: dict[str, bytes] = {}
    total = 0
    if not folder.is_dir():
        return found
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix.lower() not in ARTIFACT_SUFFIXES:
            continue
        size = path.stat().st_size
        if total + size > limit:
            continue
        found[str(path.relative_to(folder)).replace(os.sep, "__")] = path.read_bytes()
        total += size
    return found


def scratch_dir(prefix: str = "msda-gpu-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
