"""Helpers of the kit's own tests: the manifest, chips, starters, mutants, grading runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from msda_labs.course.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = load_manifest(ROOT / "classroom.yml")
CHIPS = ROOT / "shared" / "msda_labs" / "chips"
MUTANTS = Path(__file__).resolve().parent / "mutants"


def built_labs():
    return [lab for lab in MANIFEST.labs if lab.built]


def lab_ids():
    return [lab.id for lab in built_labs()]


def chip_path(lab_id: str) -> Path:
    return CHIPS / f"{lab_id}.py"


def starter_path(lab_id: str) -> Path:
    lab = MANIFEST.lab(lab_id)
    return ROOT / lab.folder / f"{lab.id}.py"


def run_grade(lab_id: str, *, submission: Path | None = None, solution: bool = False,
              tasks=(), timeout: float | None = None, extra=(), env=None) -> dict:
    """Run `python -m msda_labs grade` in a subprocess; return the JSON result (and the run)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "grade.json"
        cmd = [sys.executable, "-m", "msda_labs", "grade", lab_id, "--json", str(out), *extra]
        if submission is not None:
            cmd += ["--submission", str(submission)]
        if solution:
            cmd.append("--solution")
        for task in tasks:
            cmd += ["--task", task]
        if timeout is not None:
            cmd += ["--timeout", str(timeout)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900,
                              env={**os.environ, **(env or {})})
        if proc.returncode != 0 or not out.is_file():
            raise AssertionError(f"grading {lab_id} failed (exit {proc.returncode}):\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        data = json.loads(out.read_text())
        data["_stdout"] = proc.stdout
        return data


def all_tests(result: dict):
    for ex in result["exercises"]:
        for test in ex["tests"]:
            yield ex, test


def messages(result: dict) -> str:
    return "\n".join(t["message"] for _, t in all_tests(result))


@dataclass
class Mutant:
    lab: str
    id: str
    why: str
    replace: list = field(default_factory=list)
    expect: str | None = None
    tasks: list = field(default_factory=list)
    rules: list = field(default_factory=list)  # ladder rules it breaks (course.ladder)
    # a whole-submission mutant appended to the chip (msda_labs.mistakes.submissions)
    append: str | None = None

    def apply(self, source: str) -> str:
        for old, new in self.replace:
            count = source.count(old)
            if count != 1:
                raise AssertionError(f"mutant {self.lab}/{self.id}: {old!r} occurs {count} times "
                                     f"in the chip (it must occur exactly once)")
            source = source.replace(old, new)
        if self.append is not None:
            from msda_labs.gpu.prove import make_variant

            source = make_variant(source, self.append)
        return source


def whole_submission_mutants() -> list[dict]:
    """The entries of ``mutants/whole.yaml``: mutants appended to any lab's chip, each with the
    labs whose CPU grading must catch it (``labs``)."""
    return yaml.safe_load((MUTANTS / "whole.yaml").read_text()) or []


def mutants(lab_id: str) -> list[Mutant]:
    path = MUTANTS / f"{lab_id}.yaml"
    data = (yaml.safe_load(path.read_text()) or []) if path.is_file() else []
    found = [Mutant(lab=lab_id, **entry) for entry in data]
    for entry in whole_submission_mutants():
        if lab_id in entry.get("labs", ()):
            fields = {k: v for k, v in entry.items() if k not in ("labs", "id")}
            found.append(Mutant(lab=lab_id, id=f"whole_{entry['id']}", append=entry["id"],
                                **fields))
    return found


def all_mutants() -> list[Mutant]:
    return [m for lab in lab_ids() for m in mutants(lab)]
