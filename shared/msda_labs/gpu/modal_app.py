"""The Modal app of the GPU stages: grade a lab's GPU tests in a container with a real GPU.

    from msda_labs.gpu.body import settings_for
    from msda_labs.gpu.modal_app import build

    built = build(settings_for("lab06", lab_dir), lab_dir)
    data = built.run_job(job)                    # on Modal, billed to the caller's account
    data = built.grade.local(str(lab_dir), ...)  # the same body, run in this process

What the container holds (:func:`image_for`):

* Debian slim with classroom.yml's Python, and pinned wheels: ``torch==2.13.0`` from PyPI's
  default index, which is its CUDA build, the ``triton`` that this torch requires (3.7.1; the
  CPU grading pin, triton 3.9.0, goes with the CPU build only), and numpy, pytest, pyyaml,
  jsonschema at requirements.txt's pins, plus matplotlib for the plots;
* this package (``msda_labs``, the grader and the chips this copy of the kit carries) and the
  lab folder, added as local sources when the container starts (no rebuild when they change);
* classroom.yml, so the grader reads the lab's title and time limits as it does locally.

The function asks for classroom.yml's GPU type of the lab's ``gpu`` stage (``gpu:`` on the
stage, else the course's, else H100) and its ``job_timeout_s`` as the time limit of the whole
stage; one test's code keeps the stage's ``timeout_s``. It returns the result object as a dict
(:meth:`GradeResult.to_dict`), plus ``"artifacts"``: the plots and tables the tests wrote.

This module imports modal; nothing on the local-CUDA path imports it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import modal

from msda_labs.errors import GpuStageError
from msda_labs.gpu.body import GpuSettings, grade_submission_text

__all__ = ["APP_NAME", "REMOTE_ROOT", "BuiltApp", "build", "image_for", "package_pins",
           "grade_in_container"]

APP_NAME = "msda-labs-gpu"
TORCH_INDEX_ENV = "MSDA_MODAL_TORCH_INDEX"
REMOTE_ROOT = "/root/course"
DEFAULT_TORCH = "2.13.0"
# PyPI's torch wheels pin their triton exactly; these are the pairs that were checked.
TRITON_FOR_TORCH = {"2.13.0": "3.7.1"}
FALLBACK_PINS = {"numpy": "2.4.6", "pytest": "9.2.0", "pyyaml": "6.0.4", "jsonschema": "4.26.0"}
EXTRA_PINS = {"matplotlib": "3.11.2"}
_SKIP_PARTS = {"__pycache__", ".git", ".nox", ".venv", ".pytest_cache", "gpu-artifacts",
               "node_modules", ".mypy_cache", ".ruff_cache"}


def _ignored(path: Path) -> bool:
    """Files that never travel to the container (caches, environments, earlier outputs)."""
    return bool(set(path.parts) & _SKIP_PARTS) or path.suffix == ".pyc" or \
        path.name.endswith(".grade.json") or any(p.endswith(".egg-info") for p in path.parts)


def package_pins(requirements: Path | None) -> list[str]:
    """The container's pip requirements: torch's CUDA build and its triton, the rest pinned as
    in requirements.txt (when found), else as in :data:`FALLBACK_PINS`."""
    found: dict[str, str] = {}
    if requirements is not None and requirements.is_file():
        for line in requirements.read_text().splitlines():
            match = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+)", line)
            if match:
                found[match.group(1).lower()] = match.group(2)
    torch = found.get("torch", DEFAULT_TORCH).split("+")[0]  # never a +cpu local build
    pins = [f"torch=={torch}"]
    if torch in TRITON_FOR_TORCH:
        pins.append(f"triton=={TRITON_FOR_TORCH[torch]}")
    for name, version in FALLBACK_PINS.items():
        pins.append(f"{name}=={found.get(name, version)}")
    pins += [f"{name}=={version}" for name, version in EXTRA_PINS.items()]
    return pins


def _remote_lab_dir(settings: GpuSettings, lab_dir: Path) -> str:
    return str(PurePosixPath(REMOTE_ROOT) / lab_dir.name)


def image_for(settings: GpuSettings, lab_dir: Path) -> modal.Image:
    """The container image: pinned wheels first (cached between runs), then the sources."""
    lab_dir = Path(lab_dir).resolve()
    manifest = settings.manifest
    requirements = manifest.parent / "requirements.txt" if manifest else None
    image = (
        modal.Image.debian_slim(python_version=settings.python)
        # MSDA_MODAL_TORCH_INDEX: another torch build (e.g. .../whl/cu128) if Modal's driver is
        # too old for PyPI's CUDA 13.0 build; the default is PyPI's.
        .pip_install(*package_pins(requirements),
                     extra_index_url=os.environ.get(TORCH_INDEX_ENV) or None)
        .env({
            "PYTHONPATH": "/root",
            "PYTHONUNBUFFERED": "1",
            "TRITON_DEFAULT_FP_FUSION": "1",
            "MSDA_GPU_RUNNER": "local",
        })
        .add_local_python_source("msda_labs", ignore=_ignored)
        .add_local_dir(lab_dir, _remote_lab_dir(settings, lab_dir), ignore=_ignored)
    )
    if manifest is not None and manifest.is_file() and \
            not manifest.resolve().is_relative_to(lab_dir):
        image = image.add_local_file(manifest, f"{REMOTE_ROOT}/classroom.yml")
    return image


@dataclass
class BuiltApp:
    """An app with one function, ``grade``, for one lab (see :func:`build`)."""

    app: modal.App
    image: modal.Image
    grade: Any  # modal.Function
    settings: GpuSettings
    lab_dir: Path
    remote_lab_dir: str

    @property
    def gpu(self) -> str:
        return self.settings.gpu

    @property
    def timeout_s(self) -> int:
        return self.settings.job_timeout_s

    def run_job(self, job) -> dict:
        """Grade ``job`` (a :class:`~msda_labs.grading.judge.job.GradingJob`) on Modal: its
        submission's text, stage, tasks, limit and secret travel as the function's arguments."""
        try:
            with modal.enable_output(), self.app.run():
                return self.grade.remote(*self._arguments(job, self.remote_lab_dir))
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - every Modal failure becomes one clear message
            raise GpuStageError(
                f"Modal could not run the GPU stage of {self.settings.lab} "
                f"({type(exc).__name__}: {str(exc).strip()[:500]}). Check your credentials with "
                f"`modal token info`, your plan's GPU access and credit on modal.com, or run on "
                f"a machine with a CUDA GPU instead") from None

    def run_job_local(self, job) -> dict:
        """The function's body, run in this process on the local lab folder (``.local()``)."""
        return self.grade.local(*self._arguments(job, str(self.lab_dir)))

    def _arguments(self, job, lab_dir: str) -> tuple:
        text = job.source.decode("utf-8", "surrogateescape")
        return (lab_dir, job.submission.name, text, job.stage,
                job.timeout or self.settings.timeout_s, list(job.tasks), job.secret)


def build(settings: GpuSettings, lab_dir: Path | str) -> BuiltApp:
    """Define the app, the image and the grading function for one lab (no network needed)."""
    lab_dir = Path(lab_dir).resolve()
    image = image_for(settings, lab_dir)
    app = modal.App(APP_NAME)
    # Not serialized: the container imports this module (added with the package) and finds
    # grade_in_container by name, so the caller's Python version need not match the image's.
    function = app.function(
        image=image, gpu=settings.gpu, cpu=settings.cpu, timeout=int(settings.job_timeout_s),
        include_source=False, name=f"grade_{settings.lab}",
    )(grade_in_container)
    return BuiltApp(app=app, image=image, grade=function, settings=settings, lab_dir=lab_dir,
                    remote_lab_dir=_remote_lab_dir(settings, lab_dir))


def grade_in_container(lab_dir: str, submission_name: str, submission_text: str,
                       stage: str = "gpu", timeout: float | None = None,
                       tasks: list[str] | None = None, seed: int | str | None = None) -> dict:
    """Grade ``stage`` of the lab in ``lab_dir`` on the submission text; returns the result as a
    dict (:meth:`GradeResult.to_dict`) with ``"artifacts"`` ({file name: bytes}) added, or
    ``{"error": message}`` when the grader could not run.

    The body of the Modal function: in a GPU container it first checks that CUDA is there, then
    grades with :func:`msda_labs.gpu.body.grade_submission_text`; ``.local()`` runs it in the
    caller's process (on a machine without CUDA the GPU tests then skip, and are dropped from the
    score with a note)."""
    if not modal.is_local() and stage in ("gpu", "all"):
        import torch

        if not torch.cuda.is_available():  # in a GPU container: say so, never score 0/0
            return {"error": f"the Modal container sees no CUDA device (torch {torch.__version__}"
                             f" built for CUDA {torch.version.cuda}); if the driver is older than"
                             f" that CUDA, set {TORCH_INDEX_ENV} to a torch index of an older "
                             f"CUDA, e.g. https://download.pytorch.org/whl/cu128"}
    if not modal.is_local() and os.geteuid() == 0:
        # A Modal container runs as root: the student's code runs as a uid of its own, or not at
        # all (msda_labs.grading.isolation.sandbox).
        os.environ.setdefault("MSDA_SEPARATE", "1")
    return grade_submission_text(lab_dir, submission_name, submission_text, stage, timeout,
                                 tuple(tasks or ()), seed)
