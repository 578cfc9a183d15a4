"""What runs on the GPU machine, locally or in Modal's container: the stage's settings, the files
it writes, and grading one stage there.

    settings = settings_for("lab06", lab_dir)      # classroom.yml's GPU type and time limits
    result = grade_here(lab_dir, lab_dir / "lab06.py", stage="gpu")

:func:`grade_here` grades in this process whatever devices exist (without CUDA the GPU tests
skip and leave the score, with a note); :func:`grade_submission_text` is the body of the Modal
function (:mod:`msda_labs.gpu.modal_app`), which receives the submission as text and sends back
the result as a dict with the plots and tables the tests wrote. Importing this module imports
neither torch nor modal.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from msda_labs.course.manifest import DEFAULT_GPU, DEFAULT_JOB_TIMEOUT, DEFAULT_TIMEOUT
from msda_labs.errors import KitError

if TYPE_CHECKING:  # pragma: no cover
    from msda_labs.grading.judge.job import GradingJob
    from msda_labs.grading.judge.results import GradeResult

__all__ = ["ARTIFACT_ENV", "ARTIFACT_SUFFIXES", "GpuSettings", "settings_for", "artifact_dir",
           "ensure_importable", "device_note", "LocalRunner", "grade_here", "collect_artifacts",
           "grade_submission_text"]

ARTIFACT_ENV = "MSDA_ARTIFACT_DIR"
ARTIFACT_SUFFIXES = (".png", ".svg", ".pdf", ".csv", ".json", ".txt", ".md")
_ARTIFACT_LIMIT = 16 << 20  # bytes a Modal run sends back (plots and tables, not data)
# Where no manifest says: the course's stage defaults (msda_labs.course.manifest).
FALLBACK_GPU = DEFAULT_GPU
FALLBACK_TIMEOUT_S = DEFAULT_TIMEOUT["gpu"]
FALLBACK_JOB_TIMEOUT_S = DEFAULT_JOB_TIMEOUT
# Physical cores the Modal container reserves (Modal's default is 0.125): a GPU stage compiles its
# kernels in parallel, one core each (grading.judge.probes.compile_ahead), and 8 cores cost about
# 10% of an H100's price a second while a stage with a dozen kernels runs in well under half.
GPU_STAGE_CPUS = 8.0


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
    cpu: float = GPU_STAGE_CPUS  # cores reserved for the container


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
    container. (The stage runner loads the pytest plugin itself when pytest will not.)"""
    import msda_labs

    root = str(Path(msda_labs.__file__).resolve().parents[1])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def device_note() -> str | None:
    """Which GPU, torch and triton graded, when torch sees a CUDA device."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    if not torch.cuda.is_available():
        return None
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:  # pragma: no cover
        triton_version = "missing"
    props = torch.cuda.get_device_properties(0)
    return (f"GPU stage ran on {props.name} (compute capability {props.major}.{props.minor}), "
            f"torch {torch.__version__}, triton {triton_version}")


class LocalRunner:
    """This machine: the job graded in this process (GPU tests skip where torch sees no CUDA)."""

    name = "local"

    def run(self, job: GradingJob) -> GradeResult:
        from msda_labs.grading.judge.stage_run import run_stage

        ensure_importable()
        result = run_stage(job)
        note = device_note()
        if note and job.stage in ("gpu", "all"):
            result.notes.append(note)
        return result


def grade_here(lab_dir: Path | str, submission: Path | str, *, stage: str = "gpu",
               timeout: float | None = None, tasks: Iterable[str] = (),
               seed: int | str | None = None) -> GradeResult:
    """Grade ``stage`` of the lab in ``lab_dir`` in this process, whatever devices there are:
    the job built here, graded by the local runner, finished with the integrity check.

    Without CUDA the GPU tests are skipped for that reason and dropped from the score, with a
    note; the result then holds only the other stages' tests (none for ``stage="gpu"``).

    Raises:
        KitError: the submission is missing, or the stage could not be graded.
    """
    from msda_labs.course.resolve import resolve_lab
    from msda_labs.grading.isolation.secret import read_secret
    from msda_labs.grading.judge.integrity import check_folder
    from msda_labs.grading.judge.job import GradingJob

    lab = resolve_lab(str(lab_dir))
    submission = Path(submission)
    if not submission.is_file():
        raise KitError(f"--submission {submission}: no such file")
    job = GradingJob.build(lab, submission, stage=stage, tasks=tasks, timeout=timeout,
                           secret=read_secret(seed))
    result = LocalRunner().run(job)
    result.integrity = check_folder(lab.folder)
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


def grade_submission_text(lab_dir: str, submission_name: str, submission_text: str,
                          stage: str = "gpu", timeout: float | None = None,
                          tasks: Iterable[str] = (), seed: int | str | None = None) -> dict:
    """Grade ``stage`` of the lab in ``lab_dir`` on a submission sent as text.

    Returns the result as a dict (:meth:`GradeResult.to_dict`) with ``"artifacts"`` ({file name:
    bytes}, the files the tests wrote to :func:`artifact_dir`) added, or ``{"error": message}``
    when the grader could not run."""
    work = Path(tempfile.mkdtemp(prefix="msda-gpu-"))
    submission = work / "submission" / Path(submission_name).name
    submission.parent.mkdir(parents=True)
    submission.write_text(submission_text)
    artifacts = work / "artifacts"
    saved = os.environ.get(ARTIFACT_ENV)
    os.environ[ARTIFACT_ENV] = str(artifacts)
    try:
        result = grade_here(lab_dir, submission, stage=stage, timeout=timeout,
                            tasks=tuple(tasks or ()), seed=seed)
        data = result.to_dict()
        data["artifacts"] = collect_artifacts(artifacts)
        return data
    except KitError as exc:
        return {"error": str(exc)}
    finally:
        if saved is None:
            os.environ.pop(ARTIFACT_ENV, None)
        else:
            os.environ[ARTIFACT_ENV] = saved
        shutil.rmtree(work, ignore_errors=True)
