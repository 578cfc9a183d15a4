"""The Modal app without a network: app, image and function are defined from classroom.yml, and
the function's body, run here through ``.local()``, grades a lab (GPU tests skip without CUDA)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

modal = pytest.importorskip("modal", reason="the Modal client (requirements-dev.txt) is needed")

from msda_labs.gpu import GpuSettings, settings_for  # noqa: E402
from msda_labs.gpu.body import GPU_STAGE_CPUS  # noqa: E402
from msda_labs.gpu.modal_app import (  # noqa: E402
    REMOTE_ROOT,
    _ignored,
    build,
    grade_in_container,
    package_pins,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parent / "fixture"
LAB = FIXTURE / "lab-99-gpu-fixture"


def test_settings_come_from_classroom_yml_with_fallbacks(tmp_path):
    fixture = settings_for("lab99", LAB)
    assert (fixture.gpu, fixture.timeout_s, fixture.job_timeout_s) == ("T4", 45, 900)
    assert fixture.manifest == FIXTURE / "classroom.yml" and fixture.has_gpu_stage
    kit = settings_for("lab06", ROOT / "lab-06-make-it-fast")
    assert kit.gpu == "H100"  # the stage names none: the course's GPU
    assert kit.timeout_s == 600 and kit.job_timeout_s == 1800  # job_timeout_s: the default
    bare = settings_for("lab42", tmp_path)  # an unknown lab: every fallback
    assert (bare.gpu, bare.timeout_s, bare.job_timeout_s) == ("H100", 300, 1800)


def test_app_image_and_function_are_defined_offline():
    built = build(settings_for("lab99", LAB), LAB)
    assert isinstance(built.app, modal.App) and isinstance(built.image, modal.Image)
    assert built.app.name == "msda-labs-gpu"
    assert (built.gpu, built.timeout_s) == ("T4", 900)
    assert built.remote_lab_dir == f"{REMOTE_ROOT}/lab-99-gpu-fixture"
    assert isinstance(built.grade, modal.Function)
    spec = getattr(built.grade, "_spec_", None) or getattr(built.grade, "_spec", None)
    if spec is not None:
        assert spec.gpus == "T4"
        assert spec.cpu == GPU_STAGE_CPUS  # the stage compiles its kernels in parallel


def test_every_gpu_lab_of_the_kit_defines_an_app():
    from msda_labs.course.manifest import load_manifest

    manifest = load_manifest(ROOT / "classroom.yml")
    for lab in manifest.labs:
        folder = manifest.root / lab.folder
        if lab.has_gpu and folder.is_dir():
            built = build(settings_for(lab.id, folder), folder)
            assert built.gpu == (lab.stage("gpu").gpu or "H100")
            assert built.timeout_s == lab.stage("gpu").job_timeout_s


def test_image_pins_the_cuda_build_of_torch_and_its_triton():
    pins = package_pins(ROOT / "requirements.txt")
    assert "torch==2.13.0" in pins, pins  # no +cpu: PyPI's default wheel is the CUDA build
    assert "triton==3.7.1" in pins, pins  # what torch 2.13.0's wheel requires, not 3.9.0
    assert not any("+cpu" in p or p.startswith("triton==3.9") for p in pins)
    requirements = (ROOT / "requirements.txt").read_text()
    for name in ("numpy", "pytest", "pyyaml", "jsonschema"):
        pin = next(p for p in pins if p.startswith(f"{name}=="))
        assert pin in requirements, f"{pin} is not requirements.txt's pin"
    assert package_pins(None)[:2] == ["torch==2.13.0", "triton==3.7.1"]


def test_caches_and_earlier_outputs_do_not_travel():
    for path in ("__pycache__/x.pyc", "tests/__pycache__/t.py", ".venv/lib/a.py", "a.pyc",
                 "lab06-gpu.grade.json", "gpu-artifacts/plot.png", "msda_labs.egg-info/PKG"):
        assert _ignored(Path(path)), path
    for path in ("lab06.py", "tests/test_lab06_speed.py", "README.md", "img/tiling.png"):
        assert not _ignored(Path(path)), path


_LOCAL = """
import json, sys
from pathlib import Path
from msda_labs.course.resolve import resolve_lab
from msda_labs.gpu import settings_for
from msda_labs.gpu.modal_app import build
from msda_labs.grading.judge.job import GradingJob
lab = Path(sys.argv[1])
built = build(settings_for("lab99", lab), lab)
job = GradingJob.build(resolve_lab(str(lab)), lab / "lab99.py", stage=sys.argv[2])
data = built.run_job_local(job)
data["artifacts"] = {k: v.decode() for k, v in data.get("artifacts", {}).items()}
print("RESULT " + json.dumps(data))
"""


def _local(stage: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _LOCAL, str(LAB), stage], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "MSDA_GPU_RUNNER": "local"})
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(lines[-1][len("RESULT "):])


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_has_cuda(), reason="checks what happens where there is no CUDA device")
def test_local_body_grades_on_cpu_and_drops_the_gpu_tests_honestly():
    data = _local("all")
    tests = {t["name"]: t for ex in data["exercises"] for t in ex["tests"]}
    assert set(tests) == {"test_double", "test_double_speed"}, tests  # no GPU test, no points
    assert all(t["status"] == "passed" for t in tests.values())
    assert data["score"] == data["max_score"] == 3  # 2 + 1; the GPU test's 3 are not counted
    assert data["stages"] == ["cpu"]
    assert "GPU tests skipped: no CUDA device here" in data["notes"]
    # a GPU test skipped for another reason is dropped too, and the note says why
    assert "GPU test test_double_on_a_future_gpu not graded here (skipped: needs compute " \
        "capability 99.0)" in data["notes"]
    assert any(n.startswith("speed of double") for n in data["notes"])
    assert "lab99-speed.csv" in data["artifacts"]  # what the tests wrote comes back
    assert data["artifacts"]["lab99-speed.csv"].startswith("variant,us")


@pytest.mark.skipif(_has_cuda(), reason="checks what happens where there is no CUDA device")
def test_local_body_gpu_stage_without_cuda_scores_nothing():
    data = _local("gpu")
    assert data["exercises"] == [] and data["score"] == data["max_score"] == 0
    assert data["notes"][0] == "GPU tests skipped: no CUDA device here"


def test_body_reports_a_lab_it_cannot_grade(tmp_path):
    data = grade_in_container(str(tmp_path), "lab99.py", "x = 1\n")
    assert set(data) == {"error"} and "not a lab folder" in data["error"]


def test_importing_the_gpu_package_imports_neither_modal_nor_torch():
    code = ("import sys, msda_labs.gpu, msda_labs.gpu.where, msda_labs.gpu.prove; "
            "print(sorted(m for m in ('modal', 'torch') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


def test_settings_are_plain_data():
    assert GpuSettings(lab="lab05").gpu == "H100"
