"""Helpers of the kit's own tests: the manifest, chips, starters, mutants, grading runs."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from msda_labs.course.manifest import load_manifest
from msda_labs.mistakes import library
from msda_labs.mistakes.library import Mutant

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
              tasks=(), timeout: float | None = None, extra=(), env=None,
              warm: bool = True) -> dict:
    """Run `python -m msda_labs grade`; return the JSON result (and the run's stdout).

    The run comes from this test process's warm grading server (:mod:`gradeserver`: the same
    command in a fork of an interpreter that has already imported torch and pytest), or from a
    plain subprocess with ``warm=False``, ``$MSDA_PLAIN_GRADE=1``, or an ``env`` that the warm
    image cannot honour. Both give the same result."""
    from gradeserver import run_cli

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "grade.json"
        cmd = ["grade", lab_id, "--json", str(out), *extra]
        if submission is not None:
            cmd += ["--submission", str(submission)]
        if solution:
            cmd.append("--solution")
        for task in tasks:
            cmd += ["--task", task]
        if timeout is not None:
            cmd += ["--timeout", str(timeout)]
        proc = run_cli(cmd, cwd=ROOT, env=env, timeout=900, warm=warm)
        if proc.returncode != 0 or not out.is_file():
            raise AssertionError(f"grading {lab_id} failed (exit {proc.returncode}):\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        data = json.loads(out.read_text())
        data["_stdout"] = proc.stdout
        return data


@functools.cache
def separation_unavailable() -> str:
    """Why a separated grading cannot run on this machine ('' when it can): not root, or a
    platform limit (no mount namespace where the interpreter lies in a folder closed to other
    users, for instance). Found by grading lab 03's chip with separation required (about 5 s,
    once per test process); the tests that need separation skip with this reason."""
    if os.geteuid() != 0:
        return ("separation needs root (it runs each child as a uid of its own); "
                "this run is not root")
    try:
        result = run_grade("lab03", solution=True, tasks=("3.1",), env={"MSDA_SEPARATE": "1"})
    except AssertionError as exc:
        return f"separation is not possible on this machine: {str(exc)[-600:]}"
    if not (result.get("separation") or {}).get("separated"):
        return f"separation is not in force on this machine: {result.get('separation')}"
    return ""


def all_tests(result: dict):
    for ex in result["exercises"]:
        for test in ex["tests"]:
            yield ex, test


def messages(result: dict) -> str:
    return "\n".join(t["message"] for _, t in all_tests(result))


def whole_submission_mutants() -> list[dict]:
    """The entries of ``mutants/whole.yaml``: mutants appended to any lab's chip, each with the
    labs whose CPU grading must catch it (``labs``)."""
    return library.whole_entries(MUTANTS)


def mutants(lab_id: str) -> list[Mutant]:
    return library.load(lab_id, MUTANTS)


def all_mutants() -> list[Mutant]:
    return [m for lab in lab_ids() for m in mutants(lab)]


def load_file_module(path: Path, name: str, *, beside: bool = False):
    """Import the Python file at ``path`` as a module called ``name``.

    Args:
        path: the file (a lab's test, probe or judge module, a helper of the self-test).
        name: the module name to give it (unique per caller, so two loads do not collide).
        beside: put the file's folder on ``sys.path`` while it loads, for a lab's test module
            that imports the probes and judge modules beside it.
    """
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if beside:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        if beside:
            sys.path.remove(str(path.parent))
    return module


class FakeSubmission:
    """Stands in for the grader's ``submission`` fixture in judge-side tests.

    ``run`` hands back a canned ``result``, or, given a ``module``, runs the probe here on it.
    ``source`` is what the judge reads of the submission (``rules.SourceInfo``): given, or read
    from the file of ``lab`` (its chip, a right module), or None.
    """

    def __init__(self, result=None, module=None, *, source=None, lab: str | None = None):
        self.notes: list[str] = []  # what the judge attached to the report (add_note)
        self.speed: list[dict] = []  # the speed records it kept (record_speed)
        self.job = None
        self.result = result
        self.module = module
        if source is None and lab is not None:
            from msda_labs.grading.judge.rules import SourceInfo

            source = SourceInfo.read(chip_path(lab))
        self.source = source

    def run(self, probe, *args, **kwargs):
        if self.module is not None:
            return probe(self.module, *args, **kwargs)
        return self.result

    def add_note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def record_speed(self, record: dict) -> None:
        self.speed.append(dict(record))


def made_up_timing(yours=13.0, reference=70.0, chip=12.5, method="cuda-graph", **extra) -> dict:
    """A speed probe's result with the given times in microseconds (``chip=None``: no chip)."""
    times = {"yours": yours, "reference": reference}
    if chip is not None:
        times["chip"] = chip
    times.update(extra)
    return {"times_us": times, "method": method, "reps": 30, "device": "NVIDIA H200",
            "flushed_l2": method != "wall-clock", "outputs": {}}


def dev_tool(name: str) -> str:
    """The path of a tool from requirements-dev.txt (beside this Python, else on PATH)."""
    import shutil

    import pytest

    beside = Path(sys.executable).parent / name
    path = beside if beside.exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: pip install -r requirements-dev.txt")
    return str(path)


def assert_valid_github_workflow(workflow: Path) -> None:
    """Fail unless ``workflow`` validates against GitHub's workflow schema (check-jsonschema)."""
    proc = subprocess.run([dev_tool("check-jsonschema"), "--builtin-schema",
                           "vendor.github-workflows", str(workflow)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def assert_no_zizmor_finding(workflow: Path) -> None:
    """Fail if zizmor, offline and with the auditor persona, finds anything in ``workflow``."""
    proc = subprocess.run([dev_tool("zizmor"), "--offline", "--persona", "auditor", "--format",
                           "json", str(workflow)], capture_output=True, text=True, timeout=300)
    findings = json.loads(proc.stdout or "[]")
    assert not findings, [(f["ident"], f["determinations"]["severity"]) for f in findings]
