"""The teacher-side graders in the layouts their platforms use (``MSDA_ACT_LABS=all``, the
``nox -s workflows`` session):

* Gradescope: the autograder zip unpacked into a folder laid out like ``/autograder``
  (``source/``, ``submission/``, ``results/``), ``setup.sh`` run there, then ``run_autograder``
  on an upload of ``labNN.py`` alone;
* Classroom 50: the autograder exported into a ``classroom50`` repository, bundled the way its
  publish workflow bundles ``<classroom>/autograders/<assignment>/`` into
  ``<classroom>/autograders/<assignment>.tar.gz``, unpacked and run the way its runner runs
  ``<assignment>/autograder.py`` (cwd: the student's checkout; its environment variables), and
  the result stamped and checked the way the runner does before it publishes.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
from harness import commit_all
from kit import MANIFEST, chip_path
from selection import runs_kit_workflows

from msda_labs.classroom.export import export_lab
from msda_labs.cli import main

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "classroom"))

pytestmark = pytest.mark.skipif(not runs_kit_workflows(),
                                reason="platform layouts run with MSDA_ACT_LABS=all "
                                       "(nox -s workflows)")
LAB = "lab01"


def _validate(data: dict, name: str) -> None:
    import jsonschema

    schema = json.loads((TESTS / "classroom" / "schemas" / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(data)


def _python(act_setup) -> str:
    return str(next((act_setup.toolcache / "Python").iterdir()) / "x64" / "bin" / "python")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MSDA_", "GITHUB_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_RETRIES="0", **extra)
    return env


def test_gradescope_setup_and_run_autograder_in_an_autograder_layout(act_setup, tmp_path):
    zip_path = tmp_path / "autograder.zip"
    assert main(["export", LAB, "--gradescope", str(zip_path)]) == 0
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
    for name in ("setup.sh", "run_autograder"):
        (root / "source" / name).chmod(0o755)
    env = _env(AUTOGRADER_ROOT=str(root), MSDA_SETUP_PYTHON=_python(act_setup))
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env,
                           capture_output=True, text=True, timeout=1200)
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    torch = subprocess.run([str(root / "venv" / "bin" / "python"), "-c",
                            "import torch; print(torch.__version__)"],
                           capture_output=True, text=True)
    assert torch.returncode == 0 and "+cu" not in torch.stdout, torch.stdout + torch.stderr
    (root / "submission").mkdir()
    (root / "results").mkdir()
    shutil.copy2(chip_path(LAB), root / "submission" / f"{LAB}.py")  # the module alone
    run = subprocess.run([str(root / "source" / "run_autograder")], env=_env(
        AUTOGRADER_ROOT=str(root)), capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads((root / "results" / "results.json").read_text())
    _validate(data, "gradescope-results")
    assert data["tests"] and data["score"] == sum(t["max_score"] for t in data["tests"]) > 0, \
        data.get("output", "")[-3000:]
    # absent grading files were supplied, not reported as changed
    assert "changed grading files" not in data["output"]
    assert data["extra_data"]["integrity"]["tampered"] == []


def _publish(classroom50: Path, pages: Path) -> list[Path]:
    """What Classroom 50's publish workflow does with the autograder folders: each
    ``*/autograders/*/`` folder becomes ``<classroom>/autograders/<assignment>.tar.gz``."""
    bundles = []
    for folder in sorted(classroom50.glob("*/autograders/*/")):
        classroom, assignment = folder.parent.parent.name, folder.name
        target = pages / classroom / "autograders" / f"{assignment}.tar.gz"
        target.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(target, "w:gz") as tar:
            tar.add(folder, arcname=assignment)
        bundles.append(target)
    return bundles


def test_classroom50_autograder_in_the_runners_layout(act_setup, tmp_path):
    classroom, assignment = "msda-2027", "lab-01"
    repo = tmp_path / "classroom50"
    assert main(["export", LAB, "--classroom50", str(repo), "--classroom", classroom,
                 "--assignment", assignment]) == 0
    pages = tmp_path / "pages"
    bundles = _publish(repo, pages)
    assert bundles == [pages / classroom / "autograders" / f"{assignment}.tar.gz"]
    runtime = tmp_path / "runner-temp" / "classroom50-runtime"
    with tarfile.open(fileobj=io.BytesIO(bundles[0].read_bytes()), mode="r:gz") as tar:
        tar.extractall(runtime, filter="data")
    entrypoint = runtime / assignment / "autograder.py"
    assert entrypoint.is_file()

    student = export_lab(MANIFEST, MANIFEST.lab(LAB), tmp_path / "students", git=True)
    shutil.copy2(chip_path(LAB), student / f"{LAB}.py")
    (student / ".classroom50.yaml").write_text(f"classroom: {classroom}\n"
                                               f"assignment: {assignment}\n")
    shim = student / ".github" / "workflows" / "autograde.yaml"
    shim.write_text("name: autograde\non: push\njobs: {}\n")
    commit_all(student, "my submission", date="2027-02-03T04:05:06Z")
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=student, capture_output=True,
                         text=True, check=True).stdout.strip()
    server, name = "https://github.com", f"course/{classroom}-{assignment}-ada"
    tag = f"submit/20270203T040506Z-{sha[:7]}"
    env = _env(CLASSROOM=classroom, ASSIGNMENT=assignment, SUBMISSION_TAG=tag,
               GITHUB_REPOSITORY=name, GITHUB_SHA=sha, GITHUB_ACTOR="ada",
               GITHUB_ACTOR_ID="4242", USERNAME="ada", OWNER="ada", ASSIGNMENT_TYPE="individual",
               COMMIT_URL=f"{server}/{name}/commit/{sha}",
               RELEASE_URL=f"{server}/{name}/releases/tag/{tag}",
               REVIEW_URL=f"{server}/{name}/commit/{sha}",
               CLASSROOM50_BUNDLE_DIR=str(runtime), RUNNER_TEMP=str(runtime.parent))
    proc = subprocess.run([_python(act_setup), str(entrypoint)], cwd=student, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((student / "result.json").read_text())
    _validate(data, "classroom50-result")
    assert data["datetime"] == "2027-02-03T04:05:06Z"  # the graded commit's date
    graded = [t for t in data["tests"] if not t["test-name"].startswith("integrity")]
    assert data["score"] == data["max-score"] == sum(t["max-score"] for t in graded) > 0
    integrity = [t for t in data["tests"] if t["test-name"].startswith("integrity")]
    assert integrity and integrity[0]["passed"], integrity  # the shim and marker are no edits
    # the runner stamps these before it validates and publishes; the result stays valid
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    stamped = {**data, "owner": "ada", "assignment_type": "individual",
               "datetime": "2027-02-03T04:05:06Z", "graded_at": now,
               "submitted_by": {"username": "ada", "id": 4242}}
    _validate(stamped, "classroom50-result")
    assert stamped["datetime"] == data["datetime"]
    assert data["submission"].startswith("submit/") and data["owner"] == "ada"
