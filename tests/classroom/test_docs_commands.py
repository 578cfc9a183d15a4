"""docs/instructors.md's commands, as written: every ``python -m msda_labs`` line of its bash
blocks parses with the kit's own parser, and the cheap ones run, through a shell, on a fake
course made for them (its manifest carries the documented extensions block).

The fake course: ``classroom.yml`` (the kit's, lab 01 and lab 05 due, the late policy and the
docs' ``extensions`` YAML block merged in), the files that block names, the lab folders (links
to the kit's), ``clones/`` (lab 01 checkouts: two hand-written solutions and a copy of one),
``lab01.json``, ``lab05.json``, ``lab08.json`` (regrade lists with commits of record) and
``roster.csv``. The regrades, exports and GitHub commands cost a grading or a network: they are
parsed here and run by their own tests (test_regrade_units, test_deadline, test_export...).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from classroom_kit import clean_env
from kit import ROOT

from msda_labs.cli import build_parser

DOC = ROOT / "docs" / "instructors.md"
RUN_HERE = {"validate", "similarity", "gradebook", "student"}
RUN_ELSEWHERE = {"export", "regrade", "insight", "class"}
DATA = Path(__file__).resolve().parent / "data" / "similarity"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.S)


def documented_commands() -> list[str]:
    """Every ``python -m msda_labs`` command of the bash blocks, continuation lines joined,
    comments kept (the shell drops them)."""
    commands = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith("python -m msda_labs "):
                commands.append(line.strip())
    return commands


def _argv(command: str) -> list[str]:
    return shlex.split(command, comments=True)[3:]


COMMANDS = documented_commands()


def test_the_docs_document_every_instructor_command():
    subcommands = {_argv(c)[0] for c in COMMANDS}
    assert subcommands == RUN_HERE | RUN_ELSEWHERE, subcommands


@pytest.mark.parametrize("command", COMMANDS)
def test_each_documented_command_parses_as_written(command):
    parser = build_parser()
    try:
        ns = parser.parse_args(_argv(command))
    except SystemExit as exc:  # argparse's way of refusing
        pytest.fail(f"{command!r} does not parse (exit {exc.code})")
    assert callable(ns.func)


def _regrade_list(students: dict[str, tuple[int, int]], lab: str) -> list[dict]:
    return [{"student": name, "lab": lab, "commit": "c" * 40, "note": "",
             "result": {"lab": lab, "score": score, "max_score": 10, "stages": ["cpu"],
                        "exercises": []},
             "record": {"sha": "c" * 40, "late_days": late, "server_time": True,
                        "received_at": "2026-11-21T05:00:00+00:00", "warning": ""}}
            for name, (score, late) in students.items()]


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("course")
    data = yaml.safe_load((ROOT / "classroom.yml").read_text())
    data["course"]["late_policy"] = {"kind": "penalty", "penalty_per_day": 10}
    for entry in data["labs"]:
        if entry["id"] in ("lab01", "lab05", "lab08"):
            entry.update(due="2026-11-20T23:59:00+01:00", late_days=3)
        (folder / entry["folder"]).symlink_to(ROOT / entry["folder"])
    (documented_yaml,) = [b for b in _blocks("yaml") if "extensions:" in b]
    data.update(yaml.safe_load(documented_yaml))
    (folder / "classroom.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    (folder / "private").mkdir()
    (folder / "private" / "extensions.yml").write_text(
        "- {student: linus, lab: lab01, days: 1, reason: illness}\n")
    (folder / "private" / "adjustments.csv").write_text(
        "student,lab,points,reason\ngrace,lab05,1,a regrade request upheld\n")
    honest = (DATA / "honest_a.py").read_text()
    for name, text in (("ada", honest), ("grace", (DATA / "honest_b.py").read_text()),
                       ("linus", honest.replace("total", "acc").replace("offsets", "starts"))):
        (folder / "clones" / f"lab-01-{name}").mkdir(parents=True)
        (folder / "clones" / f"lab-01-{name}" / "lab01.py").write_text(text)
    marks = {"ada": (9, 4), "grace": (7, 1), "linus": (10, 2)}
    for lab in ("lab01", "lab05", "lab08"):
        (folder / f"{lab}.json").write_text(json.dumps(_regrade_list(marks, lab)))
    (folder / "roster.csv").write_text(
        "github,name,email,id,sis_user_id,sis_login_id,section,username,idnumber\n"
        "ada,\"Lovelace, Ada\",ada@uni.example,101,S101,ada.l,A,alovelace,9001\n"
        "grace,Grace Hopper,grace@uni.example,102,S102,grace.h,A,ghopper,9002\n"
        "linus,Linus T,linus@uni.example,103,S103,linus.t,B,ltorvalds,9003\n")
    return folder


def _run(command: str, folder: Path) -> subprocess.CompletedProcess:
    line = command.replace("python -m msda_labs", f"{shlex.quote(sys.executable)} -m msda_labs",
                           1)
    return subprocess.run(["bash", "-c", line], cwd=folder, capture_output=True, text=True,
                          timeout=300, env=clean_env())


def test_the_cheap_commands_run_as_written(course):
    ran = []
    for command in COMMANDS:
        if _argv(command)[0] not in RUN_HERE:
            continue
        proc = _run(command, course)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"
        ran.append(command)
    assert len(ran) == 7  # validate x2, similarity, gradebook x3, student
    # What they wrote, as the docs say.
    for name in ("similarity.html", "similarity.csv", "similarity.json", "canvas.csv",
                 "moodle.csv", "course.csv", "ada.html"):
        assert (course / name).is_file(), name
    similarity = json.loads((course / "similarity.json").read_text())
    assert [(p["first"], p["second"]) for p in similarity["pairs"]] == [("ada", "linus")]
    with open(course / "course.csv", newline="") as fh:
        import csv

        rows = {(r["student"], r["lab"]): r for r in csv.DictReader(fh)}
    # the documented extensions: with ada's 3 extra days on lab05, her commit received on 21 Nov
    # is on time there; lab01 keeps the 4 late days of its record
    assert rows["ada", "lab05"]["extension"].startswith("extension (+3 day(s))")
    assert rows["ada", "lab05"]["late_days"] == "0" and rows["ada", "lab01"]["late_days"] == "4"
    assert rows["linus", "lab01"]["extension"].startswith("extension (+1 day(s))")
    assert rows["grace", "lab05"]["adjustment"].startswith("+1 (a regrade request upheld)")
