"""Helpers of the classroom tests (schemas, lab choice, grading an export). A module of its own
name, not conftest: tests/gpu has a conftest too, and `from conftest import ...` would reach
whichever pytest imported first when both folders run in one session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kit import built_labs

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
