"""Instructor commands that used to fail quietly or wrongly: the dispatch script run from another
folder, the regrade session's libraries, ``regrade --gpu`` on a CPU lab, ``validate``, and the
insight page's integrity flags, lateness and embedded reports."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from kit import ROOT

from msda_labs.classroom.classwide import Resolved, write_plan
from msda_labs.classroom.deadline import CommitOfRecord
from msda_labs.classroom.github import ClassRepo
from msda_labs.classroom.insight import Graded
from msda_labs.classroom.insight_page import write_insight
from msda_labs.cli import main
from msda_labs.grading.judge.results import ExerciseResult, GradeResult
from msda_labs.grading.judge.results import TestResult as Verdict


def _fake_gh(tmp_path: Path, monkeypatch) -> Path:
    """A stand-in ``gh`` on the PATH that records its arguments (NUL-separated, one call a
    record)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "gh.calls"
    (bin_dir / "gh").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done '
                                f'>> {calls}\nprintf "\\036" >> {calls}\n')
    (bin_dir / "gh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def _plan(out: Path, students: int = 3) -> None:
    when = datetime.fromisoformat("2026-11-20T10:00:00+00:00")
    resolved = [Resolved(ClassRepo("course", f"lab-05-s{i}", f"s{i}", "main"),
                         CommitOfRecord(f"{i:040d}", when, True)) for i in range(students)]
    write_plan(resolved, "lab05", out, size=2)


def test_the_dispatch_script_works_from_any_folder(tmp_path, monkeypatch):
    calls = _fake_gh(tmp_path, monkeypatch)
    _plan(tmp_path / "plan")
    proc = subprocess.run(["sh", "plan/dispatch.sh"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    sent = [c.rstrip("\0").split("\0") for c in calls.read_text().split("\036") if c]
    assert len(sent) == 2  # 3 students in lists of 2
    lists = [c[-1].removeprefix("submissions=").split() for c in sent]
    assert lists == [[f"course/lab-05-s0@{0:040d}", f"course/lab-05-s1@{1:040d}"],
                     [f"course/lab-05-s2@{2:040d}"]]


def test_the_dispatch_script_stops_on_a_missing_list(tmp_path, monkeypatch):
    calls = _fake_gh(tmp_path, monkeypatch)
    _plan(tmp_path / "plan")
    (tmp_path / "plan" / "dispatch-01.txt").unlink()
    proc = subprocess.run(["sh", "plan/dispatch.sh"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "dispatch-01.txt" in proc.stderr
    assert not calls.exists()  # nothing sent, not an empty list


class _Session:
    posargs = ["clones/"]

    def __init__(self):
        self.installed, self.ran = [], []

    def install(self, *args, **kwargs):
        self.installed += args

    def run(self, *args, **kwargs):
        self.ran.append(args)


def test_the_regrade_session_installs_what_the_insight_page_and_similarity_need():
    spec = importlib.util.spec_from_file_location("kit_noxfile", ROOT / "noxfile.py")
    noxfile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(noxfile)
    session = _Session()
    noxfile.regrade(session)
    pins = dict(line.strip().split("==") for line in
                (ROOT / "requirements-dev.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for name in ("matplotlib", "jinja2", "copydetect"):
        assert f"{name}=={pins[name]}" in session.installed
    assert session.ran[-1] == ("python", "-m", "msda_labs", "regrade", "clones/")


def test_regrade_gpu_on_a_cpu_lab_speaks_to_the_instructor(tmp_path, capsys):
    checkout = tmp_path / "lab-01-ada"
    checkout.mkdir()
    (checkout / "lab01.py").write_text("x = 1\n")
    assert main(["regrade", str(tmp_path), "--gpu", "--gradebook",
                 str(tmp_path / "out" / "g.csv")]) == 2
    err = capsys.readouterr().err
    assert "lab01 has no GPU stage in classroom.yml (its stages: cpu)" in err
    assert "nox -s" not in err and "Regrade without --gpu" in err
    assert not (tmp_path / "out").exists()  # stopped before grading anyone


def test_validate_checks_the_manifest(tmp_path, capsys):
    assert main(["validate", str(ROOT / "classroom.yml")]) == 0
    assert "valid; 11 lab(s)" in capsys.readouterr().out
    data = yaml.safe_load((ROOT / "classroom.yml").read_text())
    data["labs"][1]["due"] = "2026-11-20T23:59:00+01:00"
    data["extensions"] = [{"student": "ada", "lab": "lab01", "days": 400}]
    bad = tmp_path / "classroom.yml"
    bad.write_text(yaml.safe_dump(data))
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "extensions[0].days" in err


def _result(lab: str, points: int, integrity: dict) -> GradeResult:
    result = GradeResult(lab, title="The spec", stages=["cpu"], submission=f"{lab}.py",
                         integrity=integrity)
    result.exercises = [ExerciseResult("1.1", "bilinear_sample", [
        Verdict("test_corners", "passed" if points else "not_attempted", points, 4, "", "cpu")])]
    return result


def test_the_insight_page_shows_integrity_and_lateness_and_embeds_reports(tmp_path):
    tampered = {"checked": True, "tampered": ["tests/test_lab01.py"], "added": []}
    clean = {"checked": True, "tampered": [], "added": []}
    graded = [Graded("ada", "lab01", _result("lab01", 4, clean), "", "on time"),
              Graded("bob", "lab01", _result("lab01", 0, tampered), "", "2 day(s) late"),
              Graded("cy", "lab01", _result("lab01", 4, clean), "", "")]
    page = tmp_path / "mail" / "insight.html"
    write_insight(graded, page, due={})
    html = page.read_text()
    assert "Integrity flags (1)" in html
    assert re.search(r'href="#report-lab01-bob">bob \(lab01\)</a>: modified: '
                     r'tests/test_lab01.py', html)
    assert "2 day(s) late" in html and "on time" in html and ">unknown<" in html
    # every link to a report stays inside the page, and every report is in it
    links = re.findall(r'href="([^"]+)"', html)
    assert not [link for link in links if link.endswith(".md")]
    for student in ("ada", "bob", "cy"):
        assert f'<details id="report-lab01-{student}">' in html
        assert f'href="#report-lab01-{student}"' in html
    data = json.loads(page.with_suffix(".json").read_text())
    assert data["integrity_flags"] == [{"student": "bob", "lab": "lab01",
                                        "integrity": "modified: tests/test_lab01.py",
                                        "anchor": "report-lab01-bob"}]


@pytest.mark.parametrize("record, words", [
    (None, ""), ({"sha": "a" * 40, "late_days": 0}, "on time"),
    ({"sha": "a" * 40, "late_days": 3, "extension": "x"}, "3 day(s) late (with an extension)"),
    ({"sha": "", "late_days": 0}, "")])
def test_lateness_in_words(record, words):
    from msda_labs.classroom.insight import lateness

    assert lateness(record) == words


def test_one_student_across_labs(tmp_path, capsys):
    """Two labs' regrade lists (named with and without the organisation); ada's rows and
    reports come back, nobody else's."""
    def entry(name, lab, points, record=None):
        return {"student": name, "lab": lab, "commit": "", "note": "",
                "result": _result(lab, points, {"checked": True}).to_dict(), "record": record}

    (tmp_path / "lab01.json").write_text(json.dumps([
        entry("ada", "lab01", 4, {"sha": "a" * 40, "late_days": 1}), entry("bob", "lab01", 0)]))
    (tmp_path / "w" / "regrade-x").mkdir(parents=True)
    (tmp_path / "w" / "regrade-x" / "regrade.json").write_text(json.dumps([
        entry("course--lab-03-ada", "lab03", 0), entry("course--lab-03-bob", "lab03", 4)]))
    page = tmp_path / "ada.html"
    assert main(["student", "ADA", str(tmp_path / "lab01.json"), str(tmp_path / "w"),
                 "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "ADA: 2 lab(s), 4/8 points" in out
    assert re.search(r"lab01\s+4/4\s+1 day\(s\) late", out)
    assert re.search(r"lab03\s+0/4\s+unknown", out) and "course--lab-03-ada" in out
    assert "bob" not in out and out.count("## lab0") == 2
    html = page.read_text()
    assert "<pre>## lab01" in html and "<pre>## lab03" in html and "http" not in html
    assert main(["student", "nobody", str(tmp_path / "lab01.json")]) == 2


def test_the_page_beside_a_deadline_regrade_shows_each_students_lateness(tmp_path):
    """``regrade --at-deadline`` hands the commits of record to the page beside its gradebook."""
    from msda_labs.classroom.insight_page import write_beside_gradebook
    from msda_labs.classroom.regrade import GradebookRow

    rows = [GradebookRow(name, "lab01", 4, 4, "clean", "a" * 40,
                         result=_result("lab01", 4, {"checked": True})) for name in ("ada", "bob")]
    records = {"ada": {"sha": "a" * 40, "late_days": 2, "server_time": True},
               "bob": {"sha": "a" * 40, "late_days": 0, "server_time": False}}
    page, line = write_beside_gradebook(rows, tmp_path / "insight.html", records)
    assert page is not None, line
    table = {r["student"]: r["labs"]["lab01"]
             for r in json.loads(page.with_suffix(".json").read_text())["table"]}
    assert table["ada"]["late"] == "2 day(s) late"
    assert table["bob"]["late"] == "on time (by commit dates)"
