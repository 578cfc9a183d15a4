"""The grade of record: the commit that counts for a due date (GitHub's server times, never the
commit dates a student forges), late days under each late policy across the course, and the
Canvas / Moodle / CSV gradebooks.

The class here is three real git repositories whose commit dates are forged
(GIT_COMMITTER_DATE / GIT_AUTHOR_DATE); GitHub is a stand-in serving objects shaped like its
documentation (github_fake.py). Grading itself is replaced by a stub that scores the module it
is handed (the real regrade of a work tree is tested in test_exported_repos.py): what is tested
is which commit's labNN.py reaches the grader and what the record says of it.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from classroom_kit import cheapest_lab
from github_fake import DOCUMENTED, PUSH_PAYLOAD, FakeGitHub, build

from msda_labs.classroom import deadline, regrade
from msda_labs.classroom.github import GitHub, next_link
from msda_labs.classroom.grades import LabEntry, apply_policy, read_entries
from msda_labs.classroom.lms import CANVAS_COLUMNS, MOODLE_COLUMNS
from msda_labs.classroom.record import regrade_folder_at_deadline, rows_json
from msda_labs.cli import main
from msda_labs.course.manifest import LatePolicy
from msda_labs.grading.judge.results import ExerciseResult, GradeResult
from msda_labs.grading.judge.results import TestResult as Verdict

LAB = cheapest_lab().id
DUE = datetime.fromisoformat("2026-11-20T23:59:00+01:00")  # 22:59Z
CHIP, STARTER, BROKEN = b"# CHIP\n", b"# STARTER\n", b"# BROKEN\n"


def _commit(repo: Path, content: bytes, date: str, message: str) -> str:
    (repo / f"{LAB}.py").write_bytes(content)
    env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date,
           "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@invalid",
           "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@invalid"}
    for cmd in (["git", "add", "-A"], ["git", "commit", "-q", "-m", message]):
        subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout.strip()


def _clone(root: Path, student: str) -> Path:
    repo = root / f"lab-00-{student}"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run(["git", "remote", "add", "origin",
                    f"https://github.com/course/lab-00-{student}.git"], cwd=repo, check=True)
    return repo


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """Three clones with forged commit dates, and what GitHub recorded of their pushes.

    - ada: the starter pushed on time; the chip, its commit dated 15 Nov (on time, forged),
      pushed 21 Nov 05:00Z: 1 day late, inside a 2-day late window.
    - grace: the chip pushed on time (workflow run and push event); a broken commit dated
      19 Nov (forged) pushed 23 Nov, after the late window.
    - linus: the chip dated 2030 (forged) pushed on time; GitHub lists only its push event.
    """
    root = tmp_path_factory.mktemp("clones")
    fake = FakeGitHub()
    shas = {}
    ada = _clone(root, "ada")
    shas["ada1"] = _commit(ada, STARTER, "2026-11-01T10:00:00+00:00", "start")
    shas["ada2"] = _commit(ada, CHIP, "2026-11-15T10:00:00+00:00", "done (backdated)")
    grace = _clone(root, "grace")
    shas["grace1"] = _commit(grace, CHIP, "2026-11-18T10:00:00+00:00", "done")
    shas["grace2"] = _commit(grace, BROKEN, "2026-11-19T10:00:00+00:00", "oops (backdated)")
    linus = _clone(root, "linus")
    shas["linus1"] = _commit(linus, CHIP, "2030-01-01T00:00:00+00:00", "from the future")
    for name in ("ada", "grace", "linus"):
        fake.add_repo(f"lab-00-{name}")
    fake.add_run("course/lab-00-ada", shas["ada1"], "2026-11-02T09:00:00Z",
                 commit_date="2026-11-01T10:00:00Z")
    fake.add_push("course/lab-00-ada", shas["ada1"], "2026-11-02T09:00:00Z")
    fake.add_run("course/lab-00-ada", shas["ada2"], "2026-11-21T05:00:00Z",
                 commit_date="2026-11-15T10:00:00Z")
    fake.add_push("course/lab-00-ada", shas["ada2"], "2026-11-21T05:00:00Z", before=shas["ada1"])
    fake.add_run("course/lab-00-grace", shas["grace1"], "2026-11-20T20:00:00Z")
    fake.add_push("course/lab-00-grace", shas["grace1"], "2026-11-20T20:00:00Z")
    fake.add_run("course/lab-00-grace", shas["grace2"], "2026-11-23T08:00:00Z")
    fake.add_push("course/lab-00-grace", shas["grace2"], "2026-11-23T08:00:00Z",
                  before=shas["grace1"])
    # A run on another branch and one for a pull request say nothing of main's head.
    fake.add_run("course/lab-00-grace", shas["grace2"], "2026-11-20T21:00:00Z", branch="wip")
    fake.add_run("course/lab-00-grace", shas["grace2"], "2026-11-20T21:30:00Z",
                 event="pull_request")
    fake.add_push("course/lab-00-linus", shas["linus1"], "2026-11-19T12:00:00Z")
    return root, fake, shas


def _graded_modules(monkeypatch):
    """Replace the grading process: score 10 for the chip, 0 otherwise; record what it got."""
    seen = []

    def fake(work, lab_id, **kwargs):
        module = (work / f"{lab_id}.py").read_bytes()
        seen.append(module)
        points = 10 if module == CHIP else 0
        result = GradeResult(lab_id, stages=["cpu"])
        result.exercises = [ExerciseResult("0.1", "task", [
            Verdict("test_it", "passed" if points else "failed", points, 10, "", "cpu")])]
        return result

    monkeypatch.setattr(regrade, "_grade_subprocess", fake)
    return seen


def _lab(late_days=2):
    return dataclasses.replace(cheapest_lab(), due=DUE, late_days=late_days)


def test_the_templates_have_the_documented_shape():
    """Each served object is a documented example's shape: the keys the kit reads, typed."""
    for name, keys in DOCUMENTED.items():
        obj = build(name, owner="o", name="r", repo="o/r", head_sha="a" * 40, created_at="x",
                    event="push", title="t", login="l", commit_date="y", before="b" * 40,
                    path="p", content="", )
        for key, kind in keys.items():
            assert isinstance(obj.get(key), kind), (name, key)
    event = build("push-event", repo="o/r", owner="o", head_sha="a" * 40, before="b" * 40,
                  created_at="x", login="l")
    assert event["type"] == "PushEvent"
    assert {k: type(v) for k, v in event["payload"].items()} == PUSH_PAYLOAD


def test_pagination_follows_the_link_header():
    fake = FakeGitHub()
    for i in range(250):
        fake.add_repo(f"lab-00-s{i:03d}")
    client = GitHub("t", transport=fake.transport)
    names = [r["name"] for r in client.pages("/orgs/course/repos")]
    assert len(names) == 250 and len(set(names)) == 250 and client.calls == 3
    assert next_link({"link": '<https://api.github.com/x?page=2>; rel="next"'}) == \
        "https://api.github.com/x?page=2"
    assert next_link({"Link": '<https://api.github.com/x?page=1>; rel="prev"'}) is None


def test_server_times_pick_the_commit_and_the_forged_dates_are_ignored(klass, exports,
                                                                        monkeypatch, tmp_path):
    root, fake, shas = klass
    seen = _graded_modules(monkeypatch)
    client = GitHub("t", transport=fake.transport)
    pairs = regrade_folder_at_deadline(root, lab=LAB, prefix="lab-00-", pristine=exports[LAB],
                                       client=client, lab_info=_lab())
    by = {row.student: (row, record) for row, record in pairs}
    assert sorted(by) == ["ada", "grace", "linus"] and len(seen) == 3

    row, record = by["ada"]  # the late chip, received 21 Nov 05:00Z: 1 day late
    assert row.commit == shas["ada2"] and row.score == 10 and seen[0] == CHIP
    assert record["received_at"] == "2026-11-21T05:00:00+00:00" and record["late_days"] == 1
    assert record["server_time"] and record["sources"] == ["push event", "workflow run"]
    assert "1 day(s) late" in row.note and "received 2026-11-21 05:00:00Z" in row.note
    assert row.result.notes[0] == row.note

    row, record = by["grace"]  # the broken commit came after the window: the chip counts
    assert row.commit == shas["grace1"] and row.score == 10 and record["late_days"] == 0
    assert "on time" in row.note

    row, record = by["linus"]  # dated 2030, received 19 Nov: on time, from the push event
    assert row.commit == shas["linus1"] and record["sources"] == ["push event"]
    assert record["late_days"] == 0 and not record["warning"]

    # A head GitHub never listed (expired events, deleted runs) is not considered, and said so.
    linus = root / "lab-00-linus"
    unseen = _commit(linus, BROKEN, "2026-11-19T12:00:00+00:00", "never seen")
    try:
        (row, record), = regrade_folder_at_deadline(linus, lab=LAB, prefix="lab-00-",
                                                    pristine=exports[LAB], client=client,
                                                    lab_info=_lab())
    finally:
        subprocess.run(["git", "reset", "-q", "--hard", shas["linus1"]], cwd=linus, check=True)
    assert row.commit == shas["linus1"] and f"({unseen[:12]}) appears in no push event" in \
        record["warning"] and "WARNING" in row.note

    # Without a late window (cutoff = due), ada's commit of record is the starter.
    pairs = regrade_folder_at_deadline(root / "lab-00-ada", lab=LAB, prefix="lab-00-",
                                       pristine=exports[LAB], client=client,
                                       lab_info=_lab(late_days=0))
    (row, record), = pairs
    assert row.commit == shas["ada1"] and row.score == 0 and record["late_days"] == 0

    # The written outputs: gradebook rows sealed, the JSON carries every record.
    out = tmp_path / "lab00.json"
    out.write_text(json.dumps(rows_json([(r, rec) for r, rec in by.values()])))
    entries = {e.student: e for e in read_entries([out])}
    assert entries["ada"].late_days == 1 and entries["ada"].has_record
    assert regrade.verify_outputs([r for r, _ in by.values()]) == []


def test_without_server_times_the_commit_dates_are_used_with_a_warning(klass, exports,
                                                                        monkeypatch):
    root, _, shas = klass
    _graded_modules(monkeypatch)
    pairs = regrade_folder_at_deadline(root, lab=LAB, prefix="lab-00-", pristine=exports[LAB],
                                       client=None, lab_info=_lab())
    by = {row.student: (row, record) for row, record in pairs}
    # The forged dates win here, which is why every row says so.
    assert by["ada"][0].commit == shas["ada2"] and by["ada"][1]["late_days"] == 0
    assert by["grace"][0].commit == shas["grace2"] and by["grace"][0].score == 0
    assert by["linus"][0].commit == "" and by["linus"][0].score == ""
    for row, record in by.values():
        assert record["server_time"] is False
        assert deadline.COMMIT_DATES in record["warning"]
        assert row.commit == "" or "WARNING" in row.note
    assert "WARNING" in by["ada"][0].note and "commit date (not a server time)" in by["ada"][0].note


def test_commit_of_record_rules():
    t = datetime.fromisoformat
    seen = [deadline.Sighting("a" * 40, t("2026-11-19T10:00:00+00:00"), "push event"),
            deadline.Sighting("b" * 40, t("2026-11-21T10:00:00+00:00"), "push event"),
            # a force push back to the on-time commit, inside the window
            deadline.Sighting("a" * 40, t("2026-11-22T10:00:00+00:00"), "push event")]
    record = deadline.commit_of_record(seen, DUE, DUE + (t("2026-11-23T00:00:00+00:00") - DUE))
    assert record.sha == "a" * 40 and record.late_days == 0  # received before the due date
    record = deadline.commit_of_record(seen[:2], DUE, t("2026-11-23T00:00:00+00:00"))
    assert record.sha == "b" * 40 and record.late_days == 1
    assert deadline.late_days(DUE, DUE) == 0
    assert deadline.late_days(t("2026-11-20T23:00:00+00:00"), DUE) == 1  # one minute late
    assert deadline.late_days(t("2026-11-22T22:59:01+00:00"), DUE) == 3
    assert not deadline.commit_of_record([], DUE, DUE).found


# ----------------------------------------------------------------------------- late policies

def _entries():
    """Ada is late 2 days on lab01 and 2 on lab05; grace is never late; linus was not graded."""
    return [LabEntry("ada", "lab01", 8, 10, late_days=2, has_record=True),
            LabEntry("ada", "lab05", 30, 40, late_days=2, has_record=True),
            LabEntry("grace", "lab01", 10, 10, has_record=True),
            LabEntry("grace", "lab05", 40, 40, has_record=True),
            LabEntry("linus", "lab05", None, None)]


def _by(finals):
    return {(f.entry.student, f.entry.lab): f for f in finals}


def test_penalty_policy_charges_every_late_day():
    finals = _by(apply_policy(_entries(), LatePolicy("penalty", 10), ["lab01", "lab05"]))
    assert finals["ada", "lab01"].score == 6.4 and finals["ada", "lab05"].score == 24
    assert finals["ada", "lab01"].calculation == \
        "8/10; 2 late day(s), 2 charged x 10% = 20% off; 6.4/10"
    grace = finals["grace", "lab05"]
    assert grace.score == 40 and grace.calculation == "40/40; on time"
    assert finals["linus", "lab05"].score is None


def test_free_days_are_spent_across_the_course_then_the_penalty():
    policy = LatePolicy("free_days", 25, free_days=3)
    finals = _by(apply_policy(_entries(), policy, ["lab01", "lab05"]))
    first, second = finals["ada", "lab01"], finals["ada", "lab05"]
    assert (first.free_days_used, first.free_days_left, first.score) == (2, 1, 8)
    assert (second.free_days_used, second.free_days_left, second.penalty_percent) == (1, 0, 25)
    assert second.score == 22.5
    assert second.calculation == "30/40; 2 late day(s): 1 free (0 left), 1 charged x 25% = 25% " \
                                 "off; 22.5/40"
    # The order is the due dates': with lab05 due first, lab05 takes the free days.
    finals = _by(apply_policy(_entries(), policy, ["lab05", "lab01"]))
    assert finals["ada", "lab05"].score == 30 and finals["ada", "lab01"].score == 6
    assert finals["grace", "lab05"].free_days_left == 3


def test_no_late_work_policy():
    # The cutoff is the due date: ada's late chip is never the commit of record...
    t = datetime.fromisoformat
    seen = [deadline.Sighting("a" * 40, t("2026-11-19T10:00:00+00:00"), "workflow run"),
            deadline.Sighting("b" * 40, t("2026-11-21T10:00:00+00:00"), "workflow run")]
    lab = dataclasses.replace(cheapest_lab(), due=DUE, late_days=0)
    assert deadline.commit_of_record(seen, lab.due, lab.cutoff).sha == "a" * 40
    # ...and a record that says late anyway (made under another policy) scores 0.
    finals = _by(apply_policy(_entries(), LatePolicy("none"), ["lab01", "lab05"]))
    assert finals["ada", "lab01"].score == 0 and "takes no late work" in \
        finals["ada", "lab01"].calculation
    assert finals["grace", "lab01"].score == 10


# ------------------------------------------------------------------------------ LMS exports

def _write(tmp_path, name, text) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture
def course(tmp_path, kit_root):
    """A classroom.yml with due dates and the free-days policy; regrade lists of two labs."""
    import yaml

    data = yaml.safe_load((kit_root / "classroom.yml").read_text())
    data["course"]["late_policy"] = {"kind": "free_days", "free_days": 1, "penalty_per_day": 10}
    for entry in data["labs"]:
        if entry["id"] == "lab01":
            entry.update(due="2026-10-01T23:59:00+02:00", late_days=3)
        if entry["id"] == "lab05":
            entry.update(due="2026-11-20T23:59:00+01:00", late_days=3)
    manifest = _write(tmp_path, "classroom.yml", yaml.safe_dump(data))

    def entry(student, lab, score, top, late):
        return {"student": student, "lab": lab, "commit": "c" * 40, "note": "",
                "result": {"lab": lab, "score": score, "max_score": top},
                "record": {"sha": "c" * 40, "late_days": late, "server_time": True,
                           "received_at": "2026-11-21T05:00:00+00:00", "warning": ""}}

    lab01 = _write(tmp_path, "lab01.json", json.dumps(
        [entry("ada", "lab01", 10, 10, 1), entry("grace", "lab01", 5, 10, 0),
         entry("zed", "lab01", 7, 10, 0)]))
    lab05 = _write(tmp_path, "lab05.json", json.dumps(
        [entry("ada", "lab05", 40, 40, 2), entry("grace", "lab05", 20, 40, 0)]))
    roster = _write(tmp_path, "roster.csv",
                    "github,name,email,id,sis_user_id,sis_login_id,section,username,idnumber\n"
                    "ada,\"Lovelace, Ada\",ada@uni.example,101,S101,ada.l,A,alovelace,9001\n"
                    "Grace,Grace Hopper,grace@uni.example,102,S102,grace.h,A,ghopper,9002\n"
                    "barbara,Barbara Liskov,barbara@uni.example,103,S103,barb.l,B,bliskov,9003\n")
    return manifest, [lab01, lab05], roster


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def test_canvas_file_has_the_documented_columns(course, tmp_path, capsys):
    manifest, inputs, roster = course
    out = tmp_path / "canvas.csv"
    assert main(["gradebook", *map(str, inputs), "--format", "canvas", "--roster", str(roster),
                 "--manifest", str(manifest), "--out", str(out),
                 "--assignment", "lab05=Lab 5 (12345)"]) == 0
    rows = _rows(out)
    assert tuple(rows[0][:5]) == CANVAS_COLUMNS == (
        "Student", "ID", "SIS User ID", "SIS Login ID", "Section")
    assert rows[0][5:] == ["lab01: The spec", "Lab 5 (12345)"]
    table = {r[0]: r for r in rows[1:]}
    # ada: lab01 1 day late (the one free day), lab05 2 days late at 10% each
    assert table["Lovelace, Ada"] == ["Lovelace, Ada", "101", "S101", "ada.l", "A", "10", "32"]
    assert table["Grace Hopper"][5:] == ["5", "20"]  # the roster's login matches in any case
    assert table["Barbara Liskov"][5:] == ["", ""]  # in the roster, no repository: blank cells
    problems = {tuple(r[:2]) for r in _rows(tmp_path / "canvas-problems.csv")[1:]}
    assert problems == {("not in the roster", "zed"), ("no repository", "barbara")}
    err = capsys.readouterr().err
    assert "PROBLEM not in the roster: zed" in err and "PROBLEM no repository: barbara" in err
    assert main(["gradebook", *map(str, inputs), "--format", "canvas", "--roster", str(roster),
                 "--manifest", str(manifest), "--out", str(out), "--strict"]) == 1


def test_moodle_file_and_the_plain_csv(course, tmp_path, capsys):
    manifest, inputs, roster = course
    out = tmp_path / "moodle.csv"
    assert main(["gradebook", *map(str, inputs), "--format", "moodle", "--roster", str(roster),
                 "--manifest", str(manifest), "--out", str(out)]) == 0
    rows = _rows(out)
    assert tuple(rows[0][:5]) == MOODLE_COLUMNS
    table = {r[3]: r for r in rows[1:]}  # by email, what Moodle maps to useremail
    assert table["ada@uni.example"][:5] == ["Ada", "Lovelace", "9001", "ada@uni.example",
                                            "alovelace"]
    assert table["ada@uni.example"][5:] == ["10", "32"]
    out = tmp_path / "course.csv"
    assert main(["gradebook", *map(str, inputs), "--roster", str(roster),
                 "--manifest", str(manifest), "--out", str(out)]) == 0
    rows = {(r[0], r[1]): r for r in _rows(out)[1:]}
    assert len(rows) == 5  # zed is not in the roster, and still in the gradebook
    assert rows["zed", "lab01"][-1] == "no"
    ada = rows["ada", "lab05"]
    assert ada[2:9] == ["40", "40", "2", "0", "0", "20", "32"]
    assert ada[11] == "40/40; 2 late day(s): 0 free (0 left), 2 charged x 10% = 20% off; 32/40"
    assert "late policy: 1 free late day(s) across the course" in capsys.readouterr().out


def test_lms_formats_need_a_roster_and_a_roster_needs_logins(course, tmp_path):
    manifest, inputs, _ = course
    out = str(tmp_path / "x.csv")
    assert main(["gradebook", str(inputs[0]), "--format", "canvas", "--manifest", str(manifest),
                 "--out", out]) != 0
    bad = _write(tmp_path, "bad.csv", "login,email\nada,a@x\n")
    assert main(["gradebook", str(inputs[0]), "--format", "moodle", "--roster", str(bad),
                 "--manifest", str(manifest), "--out", out]) != 0


# ------------------------------------------------------------------------ a class of 1,000

@pytest.fixture(scope="module")
def thousand():
    """1,000 students' repositories of lab05 in 11 pages of the organisation's list (with the
    template and another assignment's repositories among them), each with its pushes: every
    tenth student last pushed inside the late window, student 999 never pushed on time."""
    fake = FakeGitHub()
    fake.add_repo("lab-05-forward-correct", is_template=True)
    for i in range(1000):
        name = f"lab-05-s{i:04d}"
        fake.add_repo(name)
        full = f"course/{name}"
        early, late = f"{i:04d}".ljust(40, "a"), f"{i:04d}".ljust(40, "b")
        if i == 999:
            fake.add_run(full, late, "2026-12-01T10:00:00Z")  # after the window
            continue
        fake.add_run(full, early, "2026-11-19T10:00:00Z")
        if i % 10 == 0:
            fake.add_push(full, late, "2026-11-21T10:00:00Z", before=early)
    for i in range(30):
        fake.add_repo(f"lab-06-s{i:04d}")
    return fake


def test_a_class_of_1000_is_planned_in_dispatches_of_at_most_256(thousand, tmp_path, kit_root,
                                                                  monkeypatch, capsys):
    import yaml

    from msda_labs.classroom import dispatch, github

    data = yaml.safe_load((kit_root / "classroom.yml").read_text())
    data["course"]["late_policy"] = {"kind": "penalty", "penalty_per_day": 10}
    for entry in data["labs"]:
        if entry["id"] == "lab05":
            entry.update(due="2026-11-20T23:59:00+01:00", late_days=3)
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "classroom.yml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path / "course")  # find_manifest() reads this classroom.yml
    monkeypatch.setattr(github, "urllib_transport", thousand.transport)
    monkeypatch.setenv("GH_TOKEN", "t")
    out = tmp_path / "plan"
    assert main(["class", "plan", "--org", "course", "--prefix", "lab-05-", "--lab", "lab05",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1000 repositories listed, 999 planned in 4 dispatch(es) of [256, 256, 256, 231], " \
           "1 unresolved" in printed
    planned = []
    for number in range(1, 5):
        text = (out / f"dispatch-{number:02d}.txt").read_text()
        matrix = dispatch.plan("lab05", text, check_manifest=False)  # the workflow's own check
        assert len(matrix["include"]) <= dispatch.MAX_SUBMISSIONS
        planned += [item["label"] for item in matrix["include"]]
    assert len(planned) == len(set(planned)) == 999
    expected = {f"course/lab-05-s{i:04d}@" + f"{i:04d}".ljust(40, "b" if i % 10 == 0 else "a")
                for i in range(999)}
    assert set(planned) == expected
    records = {r["repository"]: r["record"] for r in json.loads((out / "records.json").read_text())}
    assert records["course/lab-05-s0010"]["late_days"] == 1
    assert records["course/lab-05-s0011"]["late_days"] == 0
    unresolved = _rows(out / "unresolved.csv")
    assert unresolved[1][:2] == ["course/lab-05-s0999", "s0999"]
    assert "nothing received by" in unresolved[1][2]
    script = (out / "dispatch.sh").read_text()
    assert script.count("gh workflow run regrade.yml -f lab=lab05 -f gpu=false") == 4
    # 11 pages of repositories, then two lists (runs, events) per student's repository
    assert len(thousand.requests) == 11 + 2 * 1000

    # --dispatch runs the script: one `gh workflow run` per list (a stand-in gh records them)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done '
                                f'>> {tmp_path}/gh.calls\nprintf "\\036" >> {tmp_path}/gh.calls\n')
    (bin_dir / "gh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert main(["class", "plan", "--org", "course", "--prefix", "lab-05-", "--lab", "lab05",
                 "--out", str(tmp_path / "plan2"), "--dispatch"]) == 0
    calls = [call.rstrip("\0").split("\0")
             for call in (tmp_path / "gh.calls").read_text().split("\036") if call]
    assert len(calls) == 4
    sent = []
    for call in calls:
        assert call[:7] == ["workflow", "run", "regrade.yml", "-f", "lab=lab05", "-f", "gpu=false"]
        assert call[7] == "-f" and call[8].startswith("submissions=")
        sent += dispatch.parse_submissions(call[8].removeprefix("submissions="))
    assert {s.label for s in sent} == expected


# ------------------------------------------------------------------ the manifest's due dates

def _manifest_with(tmp_path, kit_root, course=None, lab05=None) -> Path:
    import yaml

    data = yaml.safe_load((kit_root / "classroom.yml").read_text())
    data["course"].update(course or {})
    for entry in data["labs"]:
        if entry["id"] == "lab05":
            entry.update(lab05 or {})
    path = tmp_path / "course" / "classroom.yml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("course, lab05, message", [
    ({}, {"due": "2026-11-20T23:59:00"}, "has no timezone"),
    ({}, {"due": "2026-11-20"}, "has no time of day"),
    ({}, {"due": "next friday"}, "'next friday' is not an ISO 8601 date and time"),
    ({"timezone": "Mars/Olympus"}, {"due": "2026-11-20T23:59"}, "not an IANA timezone"),
    ({}, {"late_days": 2}, "a late window needs a due date"),
    ({}, {"due": "2026-11-20T23:59Z", "late_days": 2}, "course.late_policy is 'none'"),
    ({"late_policy": {"kind": "penalty"}}, {}, "'penalty_per_day' is a required property"),
    ({"late_policy": {"kind": "free_days", "penalty_per_day": 5}}, {},
     "'free_days' is a required property"),
    ({"late_policy": {"kind": "none", "free_days": 2}}, {}, "kind 'none' takes no free_days"),
    ({"late_policy": {"kind": "penalty", "penalty_per_day": 150}}, {}, "150 is greater than"),
    ({}, {"late_days": -1, "due": "2026-11-20T23:59Z"}, "-1 is less than the minimum"),
])
def test_due_dates_and_policies_are_validated_with_clear_errors(tmp_path, kit_root, course,
                                                                 lab05, message):
    from msda_labs.course.manifest import ManifestError, load_manifest

    path = _manifest_with(tmp_path, kit_root, course, lab05)
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert message in str(info.value)


def test_due_dates_are_read_exported_and_used_by_the_insight_page(tmp_path, kit_root,
                                                                  monkeypatch):
    from datetime import date

    from msda_labs.classroom import insight
    from msda_labs.classroom.export import export_lab
    from msda_labs.course.manifest import load_manifest

    path = _manifest_with(tmp_path, kit_root,
                          {"timezone": "Europe/Berlin",
                           "late_policy": {"kind": "free_days", "free_days": 3,
                                           "penalty_per_day": 10}},
                          # unquoted in YAML, a timestamp: read back as the text written
                          {"due": datetime.fromisoformat("2026-11-20T23:59:00+01:00"),
                           "late_days": 2})
    manifest = load_manifest(path)
    lab = manifest.lab("lab05")
    assert lab.due.isoformat() == "2026-11-20T23:59:00+01:00" and lab.late_days == 2
    assert lab.cutoff.isoformat() == "2026-11-22T23:59:00+01:00"
    assert manifest.lab("lab01").due is None
    # A due date without an offset is in course.timezone (CET in November, CEST in June).
    path = _manifest_with(tmp_path, kit_root, {"timezone": "Europe/Berlin"},
                          {"due": "2026-06-20T23:59"})
    assert load_manifest(path).lab("lab05").due.utcoffset().total_seconds() == 7200

    path = _manifest_with(tmp_path, kit_root,
                          {"late_policy": {"kind": "penalty", "penalty_per_day": 10}},
                          {"due": "2026-11-20T23:59:00+01:00", "late_days": 2})
    manifest = load_manifest(path)
    (tmp_path / "course" / "shared").symlink_to(kit_root / "shared")
    (tmp_path / "course" / "requirements.txt").symlink_to(kit_root / "requirements.txt")
    (tmp_path / "course" / "lab-05-forward-correct").symlink_to(
        kit_root / "lab-05-forward-correct")
    export = export_lab(manifest, manifest.lab("lab05"), tmp_path / "out")
    readme = (export / "README.md").read_text()
    assert "**Due: 2026-11-20 23:59+01:00**" in readme
    assert "accepted until 2026-11-22 23:59+01:00 (2 day(s) after)" in readme
    assert "late work loses 10% of the lab's points per late day" in readme
    assert "due: '2026-11-20T23:59:00+01:00'" in (export / "classroom.yml").read_text()

    monkeypatch.chdir(tmp_path / "course")
    assert insight.manifest_due() == {"lab05": date(2026, 11, 20)}

    def graded(student, lab):
        result = GradeResult(lab, stages=["cpu"])
        result.exercises = [ExerciseResult("1.1", "t", [Verdict("test_t", "passed", 1, 1, "")])]
        return insight.Graded(student, lab, result, "")

    both = [graded("ada", "lab01"), graded("grace", "lab05")]
    data = insight.build_insight(both, today=date(2026, 11, 21))
    assert data["stuck"] == [{"student": "ada",
                              "reasons": ["lab05 not attempted (due 2026-11-20)"]}]
    assert insight.build_insight(both, today=date(2026, 11, 19))["stuck"] == []  # not yet due
    assert insight.build_insight(both, due={}, today=date(2026, 11, 21))["stuck"] == []
    # A page of lab01 alone never calls anyone stuck on lab05.
    assert insight.build_insight(both[:1], today=date(2026, 11, 21))["stuck"] == []


@pytest.mark.parametrize("url, expected", [
    ("https://github.com/course/lab-05-ada.git", ("course", "lab-05-ada")),
    ("https://x-access-token:secret@github.com/course/lab-05-ada", ("course", "lab-05-ada")),
    ("git@github.com:course/lab-05-ada.git", ("course", "lab-05-ada")),
    ("https://gitlab.com/course/lab-05-ada.git", None),
    ("/srv/git/lab-05-ada.git", None),
])
def test_the_github_repository_of_a_clone(tmp_path, url, expected):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", url], check=True)
    assert deadline.github_remote(tmp_path) == expected


def test_the_commit_is_read_from_the_object_store_without_attributes_or_links(tmp_path):
    repo = _clone(tmp_path, "eve")
    (repo / ".gitattributes").write_text(f"{LAB}.py export-ignore\n*.py filter=nope\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "run.sh").write_text("#!/bin/sh\n")
    (repo / "tests" / "run.sh").chmod(0o755)
    (repo / "link.py").symlink_to("/etc/passwd")
    (repo / "big.bin").write_bytes(b"x" * 4096)
    sha = _commit(repo, CHIP, "2026-11-01T10:00:00+00:00", "tree")
    before = sorted(p.name for p in (repo / ".git").iterdir())
    tree = deadline.materialise(repo, sha, tmp_path / "tree", limit=1024)
    assert (tree / f"{LAB}.py").read_bytes() == CHIP  # export-ignore does not apply
    assert os.access(tree / "tests" / "run.sh", os.X_OK)
    assert not (tree / "link.py").exists() and not (tree / "link.py").is_symlink()
    assert not (tree / "big.bin").exists()  # over the limit
    assert sorted(p.name for p in (repo / ".git").iterdir()) == before
    with pytest.raises(deadline.DeadlineError):
        deadline.materialise(repo, "f" * 40, tmp_path / "nothing")


def test_workflow_reports_take_their_late_days_from_the_plan_records(course, tmp_path):
    manifest, _, roster = course
    sha, other = "d" * 40, "e" * 40

    def report(folder, commit):  # a regrade job's regrade-<folder>/regrade.json: no record
        path = tmp_path / f"regrade-{folder}" / "regrade.json"
        path.parent.mkdir()
        path.write_text(json.dumps([{"student": folder, "lab": "lab05", "commit": commit,
                                     "note": "", "result": {"lab": "lab05", "score": 40,
                                                            "max_score": 40}}]))
        return str(path)

    inputs = [report("course--lab-05-ada", sha), report("course--lab-05-grace", other)]
    # the downloaded artifacts' folder stands for the regrade.json files under it
    assert sorted(e.student for e in read_entries([tmp_path])) == \
        ["course--lab-05-ada", "course--lab-05-grace"]
    records = tmp_path / "records.json"
    records.write_text(json.dumps([
        {"student": f"course--lab-05-{name}", "lab": "lab05", "repository": "r",
         "record": {"sha": sha, "late_days": 2, "server_time": True,
                    "received_at": "2026-11-22T10:00:00+00:00", "warning": ""}}
        for name in ("ada", "grace")]))
    out = tmp_path / "canvas.csv"
    assert main(["gradebook", *inputs, "--records", str(records), "--format", "canvas",
                 "--roster", str(roster), "--prefix", "lab-05-", "--manifest", str(manifest),
                 "--out", str(out)]) == 0
    table = {r[0]: r[5:] for r in _rows(out)[1:]}
    assert table["Lovelace, Ada"] == ["36"]  # 2 days late: 1 free, 1 at 10%
    assert table["Grace Hopper"] == ["40"]  # graded another commit: no late days charged
    out = tmp_path / "all.csv"
    assert main(["gradebook", *inputs, "--records", str(records), "--roster", str(roster),
                 "--prefix", "lab-05-", "--manifest", str(manifest), "--out", str(out)]) == 0
    grace = next(r for r in _rows(out)[1:] if r[0] == "course--lab-05-grace")
    assert "not the commit of record" in grace[12]


def test_the_commands_regrade_at_the_deadline_and_a_whole_class(klass, exports, tmp_path,
                                                                kit_root, monkeypatch, capsys):
    """regrade --at-deadline (with and without --github) and class regrade (clone-free), from
    the command line, with the lab's due date read from classroom.yml."""
    from msda_labs.classroom import github

    root, fake, shas = klass
    _graded_modules(monkeypatch)
    _manifest_with(tmp_path, kit_root, {"late_policy": {"kind": "penalty", "penalty_per_day": 5}})
    path = tmp_path / "course" / "classroom.yml"
    path.write_text(path.read_text().replace(
        f"  id: {LAB}\n", f"  id: {LAB}\n  due: '2026-11-20T23:59:00+01:00'\n  late_days: 2\n"))
    monkeypatch.chdir(tmp_path / "course")
    monkeypatch.setattr(github, "urllib_transport", fake.transport)
    book, out = tmp_path / "gb.csv", tmp_path / "lab00.json"
    common = ["--lab", LAB, "--prefix", "lab-00-", "--pristine", str(exports[LAB]),
              "--gradebook", str(book), "--json", str(out), "--no-insight"]
    monkeypatch.delenv("GH_TOKEN", raising=False)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    assert main(["regrade", str(root), "--at-deadline", "--github", *common]) != 0
    assert "export GH_TOKEN" in capsys.readouterr().err and not book.exists()
    monkeypatch.setenv("GH_TOKEN", "t")
    assert main(["regrade", str(root), "--at-deadline", "--github", *common]) == 0
    rows = {r[0]: r for r in _rows(book)[1:]}
    assert rows["ada"][5] == shas["ada2"] and rows["grace"][5] == shas["grace1"]
    assert {e["student"]: e["record"]["late_days"] for e in json.loads(out.read_text())} == \
        {"ada": 1, "grace": 0, "linus": 0}
    assert "WARNING" not in capsys.readouterr().err

    assert main(["regrade", str(root), "--at-deadline", *common]) == 0
    assert "WARNING: 3 commit(s) of record chosen by commit dates" in capsys.readouterr().err
    assert main(["regrade", str(root), "--github", *common]) != 0  # --github needs --at-deadline

    # The whole class without a clone: the module at the commit of record through the API.
    for key, sha in shas.items():
        data = subprocess.run(["git", "show", f"{sha}:{LAB}.py"], cwd=root / f"lab-00-{key[:-1]}",
                              capture_output=True, check=True).stdout
        fake.add_file(f"course/lab-00-{key[:-1]}", f"{LAB}.py", sha, data)
    assert main(["class", "regrade", "--org", "course", "--prefix", "lab-00-", "--lab", LAB,
                 "--pristine", str(exports[LAB]), "--gradebook", str(book), "--json", str(out),
                 "--no-insight"]) == 0
    rows = {r[0]: r for r in _rows(book)[1:]}
    assert [rows[s][2] for s in ("ada", "grace", "linus")] == ["10", "10", "10"]
    assert rows["ada"][5] == shas["ada2"] and "1 day(s) late" in rows["ada"][6]
    finals = tmp_path / "course.csv"
    assert main(["gradebook", str(out), "--out", str(finals)]) == 0
    ada = next(r for r in _rows(finals)[1:] if r[0] == "ada")
    assert ada[8] == "9.5" and ada[11] == "10/10; 1 late day(s), 1 charged x 5% = 5% off; 9.5/10"


def test_a_checkout_that_could_not_be_graded_is_reported_not_dropped(course, tmp_path):
    manifest, _, roster = course
    listing = _write(tmp_path, "lab05.json", json.dumps([
        {"student": "ada", "lab": "lab05", "commit": "", "note": "", "result":
            {"lab": "lab05", "score": 40, "max_score": 40}},
        # failed before its lab was known: the file's one lab
        {"student": "barbara", "lab": "", "commit": "", "note": "not a git clone",
         "result": None}]))
    assert [(e.student, e.lab, e.score) for e in read_entries([listing])] == \
        [("ada", "lab05", 40.0), ("barbara", "lab05", None)]
    out = tmp_path / "moodle.csv"
    assert main(["gradebook", str(listing), "--format", "moodle", "--roster", str(roster),
                 "--manifest", str(manifest), "--out", str(out)]) == 0
    problems = _rows(tmp_path / "moodle-problems.csv")[1:]
    assert ["not graded", "barbara", "lab05", "not a git clone"] in problems
    assert ["no repository", "Grace"] == problems[-1][:2]
    assert {r[3]: r[5] for r in _rows(out)[1:]}["barbara@uni.example"] == ""


def test_a_detached_clone_is_judged_on_origins_default_branch(tmp_path):
    repo = _clone(tmp_path, "dee")
    _commit(repo, CHIP, "2026-11-01T10:00:00+00:00", "one")
    subprocess.run(["git", "checkout", "-q", "--detach"], cwd=repo, check=True)
    assert deadline._branch_of(repo) == "main"
    subprocess.run(["git", "update-ref", "refs/remotes/origin/trunk", "HEAD"], cwd=repo,
                   check=True)
    subprocess.run(["git", "symbolic-ref", "refs/remotes/origin/HEAD",
                    "refs/remotes/origin/trunk"], cwd=repo, check=True)
    assert deadline._branch_of(repo) == "trunk"


def test_the_token_never_follows_a_redirect_off_the_api_host():
    import urllib.request

    from msda_labs.classroom.github import GitHubError, _SameHost

    request = urllib.request.Request("https://api.github.com/repos/c/r/events",
                                     headers={"Authorization": "Bearer secret"})
    with pytest.raises(GitHubError, match="not followed"):
        _SameHost().redirect_request(request, None, 302, "Found", {}, "https://elsewhere.example/")
    with pytest.raises(GitHubError, match="not followed"):
        _SameHost().redirect_request(request, None, 302, "Found", {},
                                     "http://api.github.com/repos/c/r/events")
    moved = _SameHost().redirect_request(request, None, 301, "Moved", {},
                                         "https://api.github.com/repositories/7/events")
    assert moved.full_url.endswith("/repositories/7/events")
    client = GitHub("secret", transport=lambda url, headers: (200, {}, b"[]"))
    with pytest.raises(GitHubError, match="not under"):
        client.get("https://elsewhere.example/x")
    limited = GitHub("secret", transport=lambda url, headers: (
        403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1795000000"},
        b'{"message": "API rate limit exceeded"}'))
    with pytest.raises(GitHubError, match="used up until .*Z; run again then"):
        list(limited.pages("/orgs/course/repos"))


def test_regrade_at_the_deadline_of_a_lab_without_a_due_date_stops_first(tmp_path, capsys):
    assert main(["regrade", str(tmp_path), "--at-deadline", "--lab", LAB]) != 0
    assert "has no due date in classroom.yml" in capsys.readouterr().err
