"""Fixtures of the classroom tests: exports of every ready lab, schemas, a graded sample result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kit import MANIFEST, ROOT, built_labs, chip_path

from msda_labs.classroom.export import export_lab
from msda_labs.grading.results import ExerciseResult, GradeResult, TestResult

SCHEMAS = Path(__file__).resolve().parent / "schemas"


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def validate(instance, name: str) -> None:
    import jsonschema

    jsonschema.Draft202012Validator(schema(name)).validate(instance)


def representative_lab():
    """The lab graded from a fresh virtualenv: the first ready lab that runs Triton's
    interpreter (it needs the triton wheel), else the first ready lab."""
    labs = built_labs()
    return next((lab for lab in labs if lab.stage("interpret")), labs[0])


def cheapest_lab():
    """The lab the tamper / regrade / platform round trips use: the first ready CPU lab."""
    labs = built_labs()
    return next((lab for lab in labs if [s.name for s in lab.stages] == ["cpu"]), labs[0])


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MSDA_", "GITHUB_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def grade_export(folder: Path, *extra, env=None) -> dict:
    """`python -m msda_labs grade .` at the root of an export, with its own shared/ package
    first on the path (the kit's interpreter and pins)."""
    out = folder.parent / f"{folder.name}.grade.json"
    proc = subprocess.run([sys.executable, "-m", "msda_labs", "grade", ".", "--json", str(out),
                           *extra], cwd=folder, capture_output=True, text=True, timeout=600,
                          env=clean_env(PYTHONPATH=str(folder / "shared"), **(env or {})))
    assert proc.returncode == 0 and out.is_file(), f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    data = json.loads(out.read_text())
    data["_stdout"] = proc.stdout
    return data


@pytest.fixture(scope="session")
def exports(tmp_path_factory) -> dict[str, Path]:
    """{lab id: export folder} for every lab classroom.yml marks ready (read-only for tests)."""
    out = tmp_path_factory.mktemp("exports")
    return {lab.id: export_lab(MANIFEST, lab, out) for lab in built_labs()}


@pytest.fixture
def sample_result() -> GradeResult:
    """A result with every verdict, two tasks and a modified grading file."""
    result = GradeResult(lab="lab05", title="The forward kernel, correct", stages=["interpret"],
                         submission="lab05.py",
                         integrity={"checked": True, "modified": ["tests/test_lab05.py"]})
    result.exercises = [
        ExerciseResult("5.1", "msda_fwd", [
            TestResult("test_small", "passed", 2, 2, "", "interpret", 0.25),
            TestResult("test_ragged", "failed", 0, 3, "case B=1 Q=5: element [0, 3] 1.0 vs 2.0",
                       "interpret", 0.5),
        ]),
        ExerciseResult("5.2", "msda_fwd_levels", [
            TestResult("test_levels", "not_attempted", 0, 2, "Task 5.2: msda_fwd_levels"),
            TestResult("test_crash", "crashed", 0, 1, "the process died (SIGSEGV)"),
            TestResult("test_hang", "timeout", 0, 1, "ran past 120 s"),
            TestResult("test_err", "error", 0, 1, "IndexError: index 9 is out of bounds"),
        ]),
    ]
    return result


@pytest.fixture
def chip_of():
    return chip_path


@pytest.fixture(scope="session")
def kit_root() -> Path:
    return ROOT
