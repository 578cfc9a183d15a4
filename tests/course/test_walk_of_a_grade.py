"""The walk of one grade (docs/architecture.md): each room is entered on the way down, and what a
grade needs is worked out once.

A real ``python -m msda_labs grade`` runs in a child process under a profiler hook
(:func:`sys.setprofile`) that sees every call of a function of the kit. Each function belongs to
the room of its module, ranked as import-linter's layers rank them (pyproject.toml); a lab's test
modules are the judge's. For each call the caller is the nearest frame of the kit on the stack
(pytest and torch frames in between are transparent). The run reports:

* every call that climbs: a room calling a function of a room above it. The import contracts
  forbid such an import, but a function handed down (a callback, an object) could still do it;
* how many times each step of the walk ran: the lab resolved and the manifest loaded, the job
  built, the secret read, the student's bytes decoded, the stage run, the integrity checked.

The walk is read from the judge's process only: the child processes that run student code are
the isolation room's business (tests/grading/test_sandbox.py and the attack suites).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The rooms from the top down, as pyproject.toml's layers contract lists them.
ROOMS = [["__main__"], ["cli"], ["classroom"], ["flow", "authoring"], ["gpu"], ["grading"],
         ["grading.speed", "grading.isolation"], ["mistakes", "chips"], ["truth"],
         ["student", "course"], ["errors"]]

TRACER = textwrap.dedent('''
    import json, os, sys
    from collections import Counter
    from pathlib import Path

    root, out, rooms = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    package = str(root / "shared" / "msda_labs") + os.sep
    labs = str(root) + os.sep
    where = {}

    def room(filename):
        if filename in where:
            return where[filename]
        found = None
        if filename.startswith(package):
            module = filename[len(package):].rsplit(".", 1)[0].replace(os.sep, ".")
            for rank, names in enumerate(rooms):
                for name in names:
                    if module == name or module.startswith(name + "."):
                        found = (rank, name)  # the longest name wins: it is listed later
        elif filename.startswith(labs) and "/tests/" in filename and "/lab-" in filename:
            found = (5, "grading")  # a lab's test modules: the judge
        where[filename] = found
        return found

    climbs, calls = Counter(), Counter()

    def hook(frame, event, arg):
        if event != "call":
            return
        callee = room(frame.f_code.co_filename)
        if callee is None:
            return
        calls[frame.f_code.co_qualname] += 1
        caller, up = None, frame.f_back
        while up is not None and caller is None:
            caller = room(up.f_code.co_filename)
            if caller is None:
                up = up.f_back
        if caller is not None and callee[0] < caller[0]:
            climbs[f"{caller[1]}:{up.f_code.co_qualname} -> "
                   f"{callee[1]}:{frame.f_code.co_qualname}"] += 1

    sys.path.insert(0, str(root / "shared"))
    from msda_labs.cli import main

    injected = os.environ.get("WALK_INJECT")  # the tracer's own check: a function of a room
    if injected:
        room_file, source, call = json.loads(injected)
        scope = {}
        exec(compile(source, str(package) + room_file, "exec"), scope)
    sys.setprofile(hook)
    try:
        code = main(sys.argv[4:]) if sys.argv[4:] else 0
        if injected:
            scope[call]()
    finally:
        sys.setprofile(None)
    Path(out).write_text(json.dumps({"code": code, "climbs": climbs, "calls": calls}))
''')

# Functions handed down on purpose, which a lower room calls back. Each is named here with why.
HANDED_DOWN = {
    # The mistake catalogue hands its corner rules (clamping, flat bounds, crossed weights) to the
    # truth's one bilinear corner reader, so that a mistake differs from the truth in that rule
    # alone.
    ("truth", "mistakes"),
}


def _walk(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "walk.json"
    script = tmp_path / "tracer.py"
    script.write_text(TRACER)
    proc = subprocess.run([sys.executable, str(script), str(ROOT), str(out), json.dumps(ROOMS),
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and out.is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


def _climbs(walk: dict) -> list[str]:
    found = []
    for edge in walk["climbs"]:
        caller, callee = (side.split(":", 1)[0] for side in edge.split(" -> "))
        if (caller, callee) not in HANDED_DOWN:
            found.append(edge)
    return found


def test_one_grade_walks_down_once(tmp_path):
    walk = _walk(tmp_path, "grade", "lab01", "--solution", "--task", "1.1", "--json",
                 str(tmp_path / "grade.json"))
    assert walk["code"] == 0
    grade = json.loads((tmp_path / "grade.json").read_text())
    assert grade["score"] == grade["max_score"] > 0, grade["score"]
    assert _climbs(walk) == []
    calls = walk["calls"]
    once = {
        "resolve_lab": "the lab resolved",
        "find_manifest": "classroom.yml found",
        "load_manifest": "classroom.yml read",
        "build_job": "the request turned into a job",
        "GradingJob.build": "the job built",
        "read_secret": "the secret read",
        "SourceInfo.from_bytes": "the submission's bytes decoded for the rules",
        "run_stage": "the stage run",
        "check_folder": "the grading files checked",
    }
    twice = {step: (calls.get(step, 0), what) for step, what in once.items()
             if calls.get(step, 0) != 1}
    assert not twice, f"steps of the walk that did not run exactly once: {twice}"
    # the student's bytes are decoded once in the judge (the child decodes its copy itself)
    assert calls.get("decode_submission", 0) <= 2, calls.get("decode_submission")


def test_the_walk_sees_a_climb(tmp_path, monkeypatch):
    """The tracer can fail: a function of the judge's room that calls the grading flow (as a
    callback handed down would) is reported, with both ends named."""
    source = "def late():\n    import msda_labs.flow as flow\n    return flow.chip_path('lab01')\n"
    monkeypatch.setenv("WALK_INJECT", json.dumps(["grading/judge/late.py", source, "late"]))
    climbs = _climbs(_walk(tmp_path))
    assert "grading:late -> flow:chip_path" in climbs, climbs


def test_the_seed_file_travels_in_the_request(tmp_path, monkeypatch):
    """``grade --seed-file F`` reaches the job through the request, not through the environment:
    the job holds F's secret, its salt is drawn from it, and nothing is left in os.environ."""
    import os

    from msda_labs import cli, flow
    from msda_labs.grading.isolation.secret import SEED_ENV, SEED_FILE_ENV

    monkeypatch.delenv(SEED_ENV, raising=False)
    monkeypatch.delenv(SEED_FILE_ENV, raising=False)
    seed = tmp_path / "seed"
    seed.write_text("81726354\n")
    seed.chmod(0o600)
    job = flow.build_job(flow.GradeRequest(lab="lab01", solution=True, seed_file=str(seed)))
    assert job.secret == "81726354" and job.salt != 0
    built = []

    class Built(Exception):
        pass

    def build_only(request):
        built.append(flow.build_job(request))
        raise Built

    monkeypatch.setattr(flow, "grade", build_only)
    with pytest.raises(Built):
        cli.main(["grade", "lab01", "--solution", "--seed-file", str(seed)])
    assert [j.secret for j in built] == ["81726354"]
    assert SEED_FILE_ENV not in os.environ
