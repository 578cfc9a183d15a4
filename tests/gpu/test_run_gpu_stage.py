"""The grade command's GPU stage: the how-to where there is no runner, and the Modal route's
results merged with the CPU stages into one report (Modal replaced by the function's body run
here, with a synthetic GPU test result, so that no network is needed)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB = Path(__file__).resolve().parent / "fixture" / "lab-99-gpu-fixture"


def _bare_env(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MODAL_") and k != "MSDA_GPU_RUNNER"}
    env.update(MODAL_CONFIG_PATH=str(tmp_path / "no-modal.toml"), CUDA_VISIBLE_DEVICES="",
               **extra)
    return env


def _grade(tmp_path, *args, env=None, timeout=600):
    out = tmp_path / "grade.json"
    cmd = [sys.executable, "-m", "msda_labs", "grade", str(LAB), "--json", str(out), *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                          env=env or _bare_env(tmp_path))
    data = json.loads(out.read_text()) if out.is_file() else None
    return proc, data, time.monotonic() - start


@pytest.mark.parametrize("stage", ["gpu", "all"])
def test_no_gpu_no_modal_stops_with_the_how_to(tmp_path, stage):
    proc, data, _ = _grade(tmp_path, "--stage", stage)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert data is None and "Task" not in proc.stdout  # stopped before grading anything
    for phrase in ("needs a CUDA GPU or a Modal account", "modal token new",
                   "MODAL_TOKEN_ID", "nox -s lab99-gpu"):
        assert phrase in proc.stderr, proc.stderr


def test_lab_without_gpu_stage_says_so(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "msda_labs", "grade", "lab01", "--stage", "gpu"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=_bare_env(tmp_path))
    assert proc.returncode == 2 and "lab01 has no GPU stage" in proc.stderr, proc.stderr


_FAKE_MODAL = r"""
import sys
from msda_labs.gpu import modal_app
from msda_labs.cli import main

def run_job(self, job):
    # Modal's side, without Modal: the body runs here (no CUDA: no GPU test runs), then one
    # GPU test result is added as a container with a GPU would report it.
    assert self.gpu == "T4" and self.timeout_s == 900, (self.gpu, self.timeout_s)
    assert str(job.secret) == "7", job.secret  # a secret seed in the environment reaches it
    data = self.run_job_local(job)
    data["exercises"].append({"id": "99.3", "name": "double_on_gpu", "tests": [{
        "name": "test_double_on_gpu", "status": "passed", "score": 3, "max_score": 3,
        "message": "", "stage": "gpu", "duration": 0.5}]})
    data["stages"] = ["gpu"]
    data["notes"] = ["GPU stage ran on Fake H100"]
    data["artifacts"] = {"lab99-bandwidth.csv": b"variant,GB/s\nchip,3000\n"}
    return data

modal_app.BuiltApp.run_job = run_job
raise SystemExit(main(sys.argv[1:]))
"""


def test_modal_route_merges_the_gpu_stage_into_one_report(tmp_path):
    env = _bare_env(tmp_path, MODAL_TOKEN_ID="ak-fake", MODAL_TOKEN_SECRET="as-fake",
                    MSDA_ARTIFACT_DIR=str(tmp_path / "art"), MSDA_GRADE_SEED="7")
    out = tmp_path / "grade.json"
    proc = subprocess.run([sys.executable, "-c", _FAKE_MODAL, "grade", str(LAB), "--stage", "all",
                           "--json", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    tests = {t["name"]: (ex["id"], t["stage"], t["status"]) for ex in data["exercises"]
             for t in ex["tests"]}
    assert tests == {"test_double": ("99.1", "cpu", "passed"),
                     "test_double_speed": ("99.2", "cpu", "passed"),
                     "test_double_on_gpu": ("99.3", "gpu", "passed")}, tests
    assert data["score"] == data["max_score"] == 6
    assert data["stages"] == ["cpu", "gpu"]
    assert any(n.startswith("speed of double") for n in data["notes"])
    assert "GPU stage ran on Modal (T4), billed to your account" in data["notes"]
    assert "GPU stage ran on Fake H100" in data["notes"]
    assert (tmp_path / "art" / "lab99-bandwidth.csv").read_text().startswith("variant,GB/s")
    assert "Task 99.3" in proc.stdout and "6/6" in proc.stdout


def test_nox_gpu_session_stops_before_installing_anything(tmp_path):
    """`nox -s lab06-gpu` on a machine without GPU and Modal: the how-to in seconds, exit 2."""
    pytest.importorskip("nox", reason="nox runs the sessions (CI installs it in .ci/run)")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s",
                           "lab06-gpu", "--envdir", str(tmp_path / "envs")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=_bare_env(tmp_path))
    took = time.monotonic() - start
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "modal token new" in proc.stderr and "nox -s lab06-gpu" in proc.stderr
    assert "pip install" not in proc.stdout.replace("pip install modal", "")
    assert took < 120, f"took {took:.0f} s: it should stop before installing anything"
