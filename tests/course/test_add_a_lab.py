"""Adding a lab takes one manifest entry, the lab's folder and its chip: nothing else.

A copy of the kit (its files as a fresh clone holds them) gets a toy lab 11 (``toylab/``: the
folder with its handout and tests, and its chip) and one entry in ``classroom.yml``. Then, as a
course author would: ``sync`` writes the starter and the handout's tables, the chip grades full and
the starter 0 "not attempted", the noxfile lists the lab's session, and the exported template
grades the same way at its root. No list in the kit names the labs by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOY = Path(__file__).resolve().parent / "toylab"
ENTRY = """  - id: lab11
    folder: lab-11-toy
    title: Toy
    status: ready
    stages: [{name: cpu, timeout_s: 60}]
"""


def _kit_copy(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        path = ROOT / rel
        if path.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / rel)


def _run(args, cwd: Path, package: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(package), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("MSDA_GRADE_SEED", None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def _grade(cwd: Path, package: Path, *args) -> dict:
    out = cwd / "grade.json"
    proc = _run(["-m", "msda_labs", "grade", *args, "--json", str(out)], cwd, package)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    kit = tmp_path_factory.mktemp("kit")
    _kit_copy(kit)
    shutil.copytree(TOY / "lab-11-toy", kit / "lab-11-toy")
    shutil.copy2(TOY / "chips" / "lab11.py", kit / "shared" / "msda_labs" / "chips" / "lab11.py")
    with open(kit / "classroom.yml", "a") as fh:
        fh.write(ENTRY)
    # The new lab's sync, as its author runs it (the other labs' handouts are current already).
    proc = _run(["-m", "msda_labs", "sync", "lab11"], kit, kit / "shared")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return kit


def test_sync_writes_the_starter_and_the_tasks_table(kit):
    starter = (kit / "lab-11-toy" / "lab11.py").read_text()
    assert 'raise NotImplementedError("Task 11.1: double")' in starter
    assert "return x * 2" not in starter
    readme = (kit / "lab-11-toy" / "README.md").read_text()
    assert "| 11.1 | `double` | 2 | 1 |" in readme


def test_the_new_lab_grades_in_the_kit(kit):
    chip = _grade(kit, kit / "shared", "lab11", "--solution")
    starter = _grade(kit, kit / "shared", "lab11")
    assert (chip["lab"], chip["title"]) == ("lab11", "Toy")
    assert (chip["score"], chip["max_score"]) == (2, 2)
    assert starter["score"] == 0
    statuses = {t["status"] for ex in starter["exercises"] for t in ex["tests"]}
    assert statuses == {"not_attempted"}


def test_the_noxfile_has_its_session(kit):
    if shutil.which("nox") is None and not (Path(sys.executable).parent / "nox").exists():
        pytest.skip("nox is not installed beside this interpreter")
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    proc = subprocess.run([nox, "-l"], cwd=kit, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NOX_SCRIPT_MODE": "none"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "- lab11 ->" in proc.stdout


def test_the_new_lab_exports_and_grades_as_a_template(kit, tmp_path):
    proc = _run(["-m", "msda_labs", "export", "lab11", "--out", str(tmp_path)], kit,
                kit / "shared")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    template = tmp_path / "lab-11-toy"
    assert not (template / "shared" / "msda_labs" / "chips" / "lab11.py").exists()
    starter = _grade(template, template / "shared", ".")
    assert (starter["score"], starter["max_score"]) == (0, 2)
    shutil.copy2(kit / "shared" / "msda_labs" / "chips" / "lab11.py", template / "lab11.py")
    chip = _grade(template, template / "shared", ".")
    assert (chip["lab"], chip["title"], chip["score"]) == ("lab11", "Toy", 2)
