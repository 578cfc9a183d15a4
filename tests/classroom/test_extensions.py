"""Per-student extensions and manual adjustments: read from classroom.yml (and the files it
names), applied at the deadline regrade and in the course gradebook, with an audit column.

A fake class of lab 01, due 20 Nov 23:59 (+01:00) with a 2-day late window and 10% a late day,
its commit dates standing for the server's times (a folder of clones without GitHub):

- ada pushed on 22 Nov (2 days late) and has 3 extra days: on time;
- bob pushed on 22 Nov too, without an extension: 2 days late;
- grace pushed on 24 Nov, after the lab's late window, and has a new due date of 25 Nov: her
  commit counts, on time.

The grading itself is replaced by a fake (score 10 for every file): what is tested is which
commit counts and what it costs.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kit import ROOT

from msda_labs.classroom import record as record_module
from msda_labs.classroom.deadline import late_days
from msda_labs.classroom.grades import LabEntry, apply_extensions, apply_policy
from msda_labs.classroom.record import regrade_folder_at_deadline, rows_json
from msda_labs.cli import main
from msda_labs.course.manifest import LatePolicy, ManifestError, load_manifest
from msda_labs.grading.judge.results import ExerciseResult, GradeResult
from msda_labs.grading.judge.results import TestResult as Verdict

DUE = "2026-11-20T23:59:00+01:00"


def _manifest(folder: Path, *, extensions=None, extensions_file=None, adjustments_file=None,
              due: str = DUE) -> Path:
    data = yaml.safe_load((ROOT / "classroom.yml").read_text())
    data["course"]["late_policy"] = {"kind": "penalty", "penalty_per_day": 10}
    for entry in data["labs"]:
        if entry["id"] == "lab01":
            entry.update(due=due, late_days=2)
    if extensions is not None:
        data["extensions"] = extensions
    if extensions_file:
        data["extensions_file"] = extensions_file
    if adjustments_file:
        data["adjustments_file"] = adjustments_file
    path = folder / "classroom.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def course(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "course"
    folder.mkdir()
    (folder / "private").mkdir()
    (folder / "private" / "extensions.yml").write_text(
        "- {student: grace, lab: lab01, due: '2026-11-25T12:00:00+01:00', reason: illness}\n")
    (folder / "private" / "adjustments.csv").write_text(
        "student,lab,points,reason\nbob,lab01,2,test 1.2 was ambiguous\n")
    _manifest(folder, extensions=[{"student": "Ada", "lab": "lab01", "days": 3,
                                   "reason": "accommodation"}],
              extensions_file="private/extensions.yml",
              adjustments_file="private/adjustments.csv")
    monkeypatch.chdir(folder)
    return folder


def _clone(root: Path, student: str, when: str) -> Path:
    repo = root / f"lab-01-{student}"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "lab01.py").write_text(f"# {student}\n")
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when,
           "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@invalid",
           "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@invalid"}
    for cmd in (["git", "add", "-A"], ["git", "commit", "-q", "-m", "work"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True)
    return repo


def _fake_regrade(folder, *, pristine=None, lab_id=None, **options) -> GradeResult:
    result = GradeResult(lab_id, stages=["cpu"])
    result.exercises = [ExerciseResult("1.1", "task", [
        Verdict("test_it", "passed", 10, 10, "", "cpu")])]
    result.integrity = {"checked": True}
    return result


@pytest.fixture
def regraded(course, tmp_path, monkeypatch) -> Path:
    clones = tmp_path / "clones"
    _clone(clones, "ada", "2026-11-22T10:00:00+00:00")
    _clone(clones, "bob", "2026-11-22T10:00:00+00:00")
    _clone(clones, "grace", "2026-11-24T10:00:00+00:00")
    monkeypatch.setattr(record_module, "regrade_checkout", _fake_regrade)
    pairs = regrade_folder_at_deadline(clones, lab="lab01", prefix="lab-01-",
                                       pristine=tmp_path, client=None)
    out = tmp_path / "lab01.json"
    out.write_text(json.dumps(rows_json(pairs)))
    return out


def test_the_manifest_reads_extensions_from_itself_and_a_file(course):
    manifest = load_manifest(course / "classroom.yml")
    ada = manifest.extension_for("lab-01-ADA", "lab01")  # a regrade's name, another case
    assert ada is not None and ada.days == 3 and ada.reason == "accommodation"
    assert ada.due == datetime.fromisoformat(DUE) + timedelta(days=3)
    assert ada.cutoff == ada.due + timedelta(days=2)  # the late window follows the new date
    grace = manifest.deadline_for("course--lab-01-grace", "lab01")
    assert grace[0] == datetime.fromisoformat("2026-11-25T12:00:00+01:00") and grace[2]
    assert manifest.deadline_for("bob", "lab01")[2] is None
    assert manifest.adjustment_for("bob", "lab01").points == 2


def test_the_deadline_regrade_applies_each_students_date(regraded):
    entries = {e["student"]: e for e in json.loads(regraded.read_text())}
    assert entries["ada"]["record"]["late_days"] == 0
    assert "+3 day(s)" in entries["ada"]["record"]["extension"]
    assert "extension" in entries["ada"]["note"]
    assert entries["bob"]["record"]["late_days"] == 2
    assert "extension" not in entries["bob"]["record"]
    # after the lab's late window, inside hers: graded, on time
    assert entries["grace"]["record"]["sha"] and entries["grace"]["record"]["late_days"] == 0
    assert entries["grace"]["result"]["score"] == 10


def _gradebook(inputs: list[Path], out: Path) -> dict[str, dict]:
    assert main(["gradebook", *map(str, inputs), "--format", "csv", "--out", str(out)]) == 0
    with open(out, newline="") as fh:
        return {row["student"]: row for row in csv.DictReader(fh)}


def test_the_gradebook_shows_the_extension_and_keeps_the_adjustment(regraded, tmp_path):
    rows = _gradebook([regraded], tmp_path / "book.csv")
    assert rows["ada"]["score"] == "10" and "extension (+3 day(s))" in rows["ada"]["extension"]
    assert "[classroom.yml: extensions[0]]" in rows["ada"]["extension"]
    assert "extensions.yml: entry 1" in rows["grace"]["extension"]
    # bob: 2 days x 10% off 10 points, then 2 points by hand
    assert rows["bob"]["late_days"] == "2" and rows["bob"]["extension"] == ""
    assert rows["bob"]["score"] == "10" and rows["bob"]["adjustment"].startswith("+2 (test 1.2")
    assert "8/10; +2 by hand" in rows["bob"]["calculation"]
    # A new regrade (other scores) keeps the adjustment: it lives in its own file.
    entries = json.loads(regraded.read_text())
    for entry in entries:
        entry["result"]["score"] = 6
    again = tmp_path / "lab01-again.json"
    again.write_text(json.dumps(entries))
    rows = _gradebook([again], tmp_path / "book2.csv")
    assert rows["bob"]["score"] == "6.8" and rows["bob"]["adjustment"].startswith("+2")


def test_the_gradebook_counts_late_days_again_for_records_without_the_extension(course,
                                                                               tmp_path):
    """A record from before the extension (a class plan's records.json): received 22 Nov, 2
    days late for the lab, none for ada's extended date."""
    entry = {"student": "ada", "lab": "lab01", "commit": "c" * 40, "note": "",
             "result": {"lab": "lab01", "score": 10, "max_score": 10},
             "record": {"sha": "c" * 40, "late_days": 2, "server_time": True,
                        "received_at": "2026-11-22T10:00:00+00:00", "warning": ""}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps([entry]))
    rows = _gradebook([path], tmp_path / "book.csv")
    assert rows["ada"]["late_days"] == "0" and rows["ada"]["score"] == "10"


def test_an_ordinary_regrade_is_never_called_on_time(course, tmp_path):
    path = tmp_path / "plain.json"
    path.write_text(json.dumps([{"student": "bob", "lab": "lab01", "commit": "", "note": "",
                                 "result": {"lab": "lab01", "score": 9, "max_score": 10}}]))
    rows = _gradebook([path], tmp_path / "book.csv")
    assert "on time" not in rows["bob"]["calculation"]
    assert "lateness unknown" in rows["bob"]["calculation"]
    assert rows["bob"]["late_days"] == "unknown"


@pytest.mark.parametrize("extension, words", [
    ({"student": "ada", "lab": "lab01", "days": 2, "due": DUE}, "not both"),
    ({"student": "ada", "lab": "lab01"}, "not neither"),
    ({"student": "ada", "lab": "lab03", "days": 2}, "lab03 has no due date"),
    ({"student": "ada", "lab": "lab01", "due": "2026-11-31T23:59:00+01:00"},
     "extensions[0].due"),
    ({"student": "ada", "lab": "lab01", "due": "2026-11-20T24:00:00+01:00"},
     "hour must be in 0..23"),
])
def test_bad_extensions_name_the_file_and_the_entry(tmp_path, extension, words):
    path = _manifest(tmp_path, extensions=[extension])
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert str(path) in str(caught.value) and words in str(caught.value)


def test_an_extension_given_twice_is_refused(tmp_path):
    (tmp_path / "more.csv").write_text("student,lab,days\nADA,lab01,1\n")
    path = _manifest(tmp_path, extensions=[{"student": "ada", "lab": "lab01", "days": 2}],
                     extensions_file="more.csv")
    with pytest.raises(ManifestError, match="already has an extension"):
        load_manifest(path)


@pytest.mark.parametrize("due", ["2026-11-31T23:59:00+01:00", "2026-02-30T10:00:00Z",
                                 "2026-11-20T24:00:00+01:00", "2026-11-20T23:60:00+01:00"])
def test_an_impossible_unquoted_date_is_the_kits_error_naming_file_and_key(tmp_path, due):
    path = _manifest(tmp_path)
    text = path.read_text().replace(f"'{DUE}'", due).replace(DUE, due)
    assert due in text and f"'{due}'" not in text  # unquoted: YAML would read a timestamp
    path.write_text(text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert str(path) in str(caught.value) and "(lab01).due" in str(caught.value)


@settings(max_examples=40, derandomize=True, deadline=None)
@given(minutes=st.integers(min_value=-3 * 1440, max_value=12 * 1440),
       days=st.integers(min_value=1, max_value=10))
def test_an_extension_never_costs_and_counts_from_the_new_date(tmp_path_factory, minutes,
                                                              days):
    """Whenever the commit came, the late days with an extension of ``days`` are those counted
    from the new date, and never more than without it."""
    folder = tmp_path_factory.mktemp("ext")
    manifest = load_manifest(_manifest(folder, extensions=[{"student": "ada", "lab": "lab01",
                                                            "days": days}]))
    due = datetime.fromisoformat(DUE)
    received = due + timedelta(minutes=minutes)
    without = late_days(received, due)
    entry = LabEntry("ada", "lab01", 10, 10, late_days=without, has_record=True,
                     received_at=received.isoformat())
    apply_extensions([entry], manifest)
    assert entry.late_days == late_days(received, due + timedelta(days=days)) <= without
    (final,) = apply_policy([entry], LatePolicy("penalty", 10), ["lab01"])
    assert final.score == round(10 * (1 - min(100, 10 * entry.late_days) / 100), 2)


def test_extensions_never_reach_a_template(course):
    """Names of students and their accommodations stay out of every export's classroom.yml."""
    from msda_labs.classroom.export import _exported_manifest

    manifest = load_manifest(course / "classroom.yml")
    text = _exported_manifest(manifest, manifest.lab("lab01"))
    assert not re.search(r"\b(ada|Ada|grace)\b", text)
    assert "extensions" not in text and "adjustments" not in text
    assert "accommodation" not in text and "private/" not in text
