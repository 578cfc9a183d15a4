"""The whole class in one dispatch (.github/workflows/regrade-class.yml), outside act: the plan
of 1,000 recorded repositories read through MSDA_GITHUB_REPLAY, the batches within one matrix,
the fetch of a commit of record, and the gradebook job's commands with the late policy applied
(final-grades.csv, canvas.csv, moodle.csv). The act run of the same workflow is in
tests/workflows/test_act_class_dispatch.py.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
from github_replay import check_shapes, record_class, thousand_students

from msda_labs.classroom import dispatch, github
from msda_labs.classroom.grades import CSV_COLUMNS
from msda_labs.classroom.lms import CANVAS_COLUMNS, MOODLE_COLUMNS
from msda_labs.grading.judge.results import ExerciseResult, GradeResult
from msda_labs.grading.judge.results import TestResult as Verdict

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@invalid", "-c", "commit.gpgsign=false",
       "-c", "init.defaultBranch=main"]


def _course(tmp_path: Path, kit_root: Path, policy: dict, lab: str = "lab05") -> Path:
    """A copy of classroom.yml with ``lab`` due 20 Nov 23:59 (+01:00), a 3-day late window."""
    import yaml

    data = yaml.safe_load((kit_root / "classroom.yml").read_text())
    data["course"]["late_policy"] = policy
    for entry in data["labs"]:
        if entry["id"] == lab:
            entry.update(due="2026-11-20T23:59:00+01:00", late_days=3)
    folder = tmp_path / "course"
    folder.mkdir()
    (folder / "classroom.yml").write_text(yaml.safe_dump(data))
    return folder


def _outputs(path: Path) -> dict[str, str]:
    """$GITHUB_OUTPUT's ``key<<DELIMITER`` blocks."""
    lines, values = path.read_text().splitlines(), {}
    i = 0
    while i < len(lines):
        key, _, delimiter = lines[i].partition("<<")
        end = lines.index(delimiter, i + 1)
        values[key] = "\n".join(lines[i + 1:end])
        i = end + 1
    return values


def test_batches_keep_a_class_of_any_size_within_one_matrix():
    for n in (1, 2, 255, 256, 257, 999, 1000, 5000):
        items = list(range(n))
        groups = dispatch.batches(items)
        assert len(groups) <= 256 and [i for g in groups for i in g] == items
        assert max(map(len, groups)) - min(map(len, groups)) <= max(map(len, groups)) - 1
        if n <= 256:
            assert all(len(g) == 1 for g in groups)  # a job each, as regrade.yml
    assert [len(g) for g in dispatch.batches(list(range(1000)))] == [4] * 250
    with pytest.raises(dispatch.DispatchError, match="prefix"):
        dispatch.parse_class("course", "")
    with pytest.raises(dispatch.DispatchError, match="organisation"):
        dispatch.parse_class("-course", "lab-05-")


def test_a_class_of_1000_is_planned_from_the_recorded_responses(tmp_path, kit_root,
                                                                monkeypatch, capsys):
    fake, expected = thousand_students()
    replay = tmp_path / "replay"
    assert record_class(fake, replay, "course", "lab-05-") == 11 + 2 * 1000
    shapes = check_shapes(replay)
    assert shapes == {"org-repo": 1031, "workflow-run": 1000, "push-event": 100}

    monkeypatch.chdir(_course(tmp_path, kit_root, {"kind": "penalty", "penalty_per_day": 10}))
    monkeypatch.setenv(github.REPLAY_ENV, str(replay))
    monkeypatch.setattr(github, "urllib_transport", None)  # the network is never called
    monkeypatch.setenv("GH_TOKEN", "recorded")
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "output"))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    for key, value in {"ORG": "course", "PREFIX": "lab-05-", "LAB": "lab05",
                       "AT_DEADLINE": "true", "GPU": "false"}.items():
        monkeypatch.setenv(key, value)
    assert dispatch.main(["class-plan", "--out", str(tmp_path / "plan")]) == 0
    printed = capsys.readouterr().out
    assert "1000 repositories listed, 999 planned in 250 job(s) of at most 4, 1 unresolved; " \
           "2011 API calls" in printed

    outputs = _outputs(tmp_path / "output")
    assert outputs["lab"] == "lab05" and outputs["gpu"] == "false"
    include = json.loads(outputs["matrix"])["include"]
    assert len(include) == 250 <= 256
    planned = []
    for item in include:  # each batch passes the regrade job's own check
        entries = dispatch.parse_submissions(item["submissions"])
        assert len(entries) <= 4 and item["label"] == f"batch {item['batch']} ({len(entries)})"
        planned += [(e.repository, e.ref) for e in entries]
    assert len(planned) == len(set(planned)) == 999
    assert dict(planned) == expected  # the commit the recorded server times say
    records = {r["repository"]: r["record"]
               for r in json.loads((tmp_path / "plan" / "records.json").read_text())}
    assert records["course/lab-05-s0010"]["late_days"] == 1
    assert records["course/lab-05-s0011"]["late_days"] == 0
    assert all(r["server_time"] for r in records.values())
    summary = (tmp_path / "summary.md").read_text()
    assert "**999 planned** in 250 job(s)" in summary and "course/lab-05-s0999" in summary

    # without a due date's deadline: the last commit received, even the one after the window
    assert dispatch.main(["class-plan", "--latest", "--out", str(tmp_path / "latest")]) == 0
    latest = json.loads((tmp_path / "latest" / "matrix.json").read_text())["include"]
    assert "course/lab-05-s0999@" + "0999".ljust(40, "b") in latest[-1]["submissions"]

    # 1,000 students' matrix is far inside the 1 MB a job's outputs may hold
    assert 2 * len(outputs["matrix"]) < dispatch.OUTPUT_LIMIT / 5
    monkeypatch.setattr(dispatch, "OUTPUT_LIMIT", 2 * len(outputs["matrix"]) - 2)
    assert dispatch.main(["class-plan", "--out", str(tmp_path / "big")]) == 2
    assert "over the" in capsys.readouterr().err

    # a call that was not recorded is refused, never sent to the network
    monkeypatch.setenv("ORG", "another-org")
    assert dispatch.main(["class-plan", "--out", str(tmp_path / "other")]) == 2
    assert "not recorded" in capsys.readouterr().err


def test_a_class_without_a_token_or_a_due_date_stops_first(tmp_path, kit_root, monkeypatch,
                                                           capsys):
    monkeypatch.chdir(kit_root)
    for key in ("GH_TOKEN", "GITHUB_TOKEN", github.REPLAY_ENV):
        monkeypatch.delenv(key, raising=False)
    args = ["class-plan", "--org", "course", "--prefix", "lab-05-", "--lab", "lab05",
            "--out", str(tmp_path / "p")]
    assert dispatch.main(args) == 2
    assert "no token" in capsys.readouterr().err
    monkeypatch.setenv("GH_TOKEN", "t")
    fake, _ = thousand_students()
    monkeypatch.setattr(github, "urllib_transport", fake.transport)
    assert dispatch.main(args) == 2  # the kit's classroom.yml gives lab05 no due date
    assert "no due date" in capsys.readouterr().err
    assert fake.requests == []


def _bare_repo(root: Path, name: str) -> tuple[Path, list[str]]:
    work = root / "work" / name
    work.mkdir(parents=True)
    shas = []
    for i, text in enumerate(["first\n", "second\n"]):
        (work / "lab05.py").write_text(text)
        subprocess.run([*GIT, "init", "-q"], cwd=work, check=True)
        subprocess.run([*GIT, "add", "-A"], cwd=work, check=True)
        subprocess.run([*GIT, "commit", "-q", "-m", f"c{i}"], cwd=work, check=True)
        shas.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True,
                                   capture_output=True, text=True).stdout.strip())
    bare = root / "course" / f"{name}.git"
    subprocess.run([*GIT, "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare, shas


def test_fetch_checks_out_each_commit_of_record_alone(tmp_path, monkeypatch):
    _, shas = _bare_repo(tmp_path / "github", "lab-05-ada")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")  # https://github.com/ served from the folder
    monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.file://{tmp_path / 'github'}/.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://github.com/")
    text = f"course/lab-05-ada@{shas[0]}\ncourse/lab-05-nobody@{'e' * 40}"
    fetched, failed = dispatch.fetch_submissions(text, tmp_path / "subs", token="secret")
    assert [s.folder for s in fetched] == ["course--lab-05-ada"]
    folder = tmp_path / "subs" / "course--lab-05-ada"
    assert (folder / "lab05.py").read_text() == "first\n"  # the older commit, not the tip
    assert subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip() == shas[0]
    assert len(failed) == 1 and "course/lab-05-nobody" in failed[0] and "git fetch" in failed[0]
    assert not (tmp_path / "subs" / "course--lab-05-nobody").exists()
    config = (folder / ".git" / "config").read_text()
    assert "secret" not in config and "extraheader" not in config  # the token left no trace


def _result(score: int) -> GradeResult:
    result = GradeResult(lab="lab05", title="The forward kernel", stages=["interpret"],
                         submission="lab05.py", integrity={"checked": True, "modified": []})
    result.exercises = [ExerciseResult("5.1", "msda_fwd", [
        Verdict("test_all", "passed" if score == 40 else "failed", score, 40, "",
                   "interpret", 0.5)])]
    return result


def test_the_gradebook_job_applies_the_late_policy(tmp_path, kit_root, monkeypatch, capsys):
    """The class workflow's gradebook step, its exact command, on recorded reports: a batch's
    regrade.json, the plan's records.json and unresolved.csv."""
    course = _course(tmp_path, kit_root, {"kind": "penalty", "penalty_per_day": 10})
    monkeypatch.chdir(course)
    reports = tmp_path / "reports"
    ada, grace, linus = "a" * 40, "b" * 40, "c" * 40
    (reports / "class-plan").mkdir(parents=True)
    (reports / "class-plan" / "records.json").write_text(json.dumps([
        {"student": f"course--lab-05-{who}", "lab": "lab05", "repository": f"course/lab-05-{who}",
         "record": {"sha": sha, "late_days": late, "server_time": True, "warning": "",
                    "received_at": "2026-11-22T10:00:00+00:00" if late else
                    "2026-11-19T10:00:00+00:00"}}
        for who, sha, late in (("ada", ada, 0), ("grace", grace, 2), ("linus", linus, 1))]))
    (reports / "class-plan" / "unresolved.csv").write_text(
        "repository,student,why\ncourse/lab-05-zed,zed,nothing received by 2026-11-23 22:59:00Z"
        "\n")
    batch = reports / "regrade-batch-01"
    batch.mkdir()
    batch.joinpath("regrade.json").write_text(json.dumps([
        {"student": f"course--lab-05-{who}", "lab": "lab05", "commit": sha, "note": "",
         "result": _result(score).to_dict()}
        for who, sha, score in (("ada", ada, 40), ("grace", grace, 30))]))
    (reports / "regrade-batch-02").mkdir()  # linus's batch never finished: no report
    roster = course / "roster.csv"
    roster.write_text("github,name,email,id,sis_user_id,username,idnumber\n"
                      "ada,\"Lovelace, Ada\",ada@uni.example,101,S101,alovelace,9001\n"
                      "grace,Grace Hopper,grace@uni.example,102,S102,ghopper,9002\n")
    out = tmp_path / "gradebook"
    assert dispatch.main(["gradebook", "--lab", "lab05", "--reports", str(reports),
                          "--plan", str(reports / "class-plan"),
                          "--out", str(out / "gradebook.csv"),
                          "--final", str(out / "final-grades.csv"), "--roster", str(roster),
                          "--prefix", "lab-05-", "--summary", str(tmp_path / "s.md")]) == 0
    with open(out / "gradebook.csv", newline="") as fh:
        raw = {r["student"]: r for r in csv.DictReader(fh)}
    assert set(raw) == {f"course--lab-05-{w}" for w in ("ada", "grace", "linus", "zed")}
    assert raw["course--lab-05-zed"]["score"] == "" and "nothing received" in \
        raw["course--lab-05-zed"]["note"]
    assert raw["course--lab-05-linus"]["score"] == "" and "no CPU report" in \
        raw["course--lab-05-linus"]["note"]
    with open(out / "final-grades.csv", newline="") as fh:
        reader = csv.reader(fh)
        assert next(reader) == [*CSV_COLUMNS, "in_roster"]
    with open(out / "final-grades.csv", newline="") as fh:
        final = {r["student"]: r for r in csv.DictReader(fh)}
    assert (final["course--lab-05-ada"]["late_days"], final["course--lab-05-ada"]["score"]) == \
        ("0", "40")
    grace_row = final["course--lab-05-grace"]
    assert (grace_row["raw_score"], grace_row["late_days"], grace_row["penalty_percent"],
            grace_row["score"]) == ("30", "2", "20", "24")
    assert "2 late day(s), 2 charged x 10% = 20% off; 24/40" in grace_row["calculation"]
    assert final["course--lab-05-linus"]["score"] == ""
    with open(out / "canvas.csv", newline="") as fh:
        canvas = list(csv.reader(fh))
    assert canvas[0][:5] == list(CANVAS_COLUMNS)
    assert {r[0]: r[5] for r in canvas[1:]} == {"Lovelace, Ada": "40", "Grace Hopper": "24"}
    with open(out / "moodle.csv", newline="") as fh:
        moodle = list(csv.reader(fh))
    assert moodle[0][:5] == list(MOODLE_COLUMNS)
    assert {r[3]: r[5] for r in moodle[1:]} == {"ada@uni.example": "40",
                                                "grace@uni.example": "24"}
    assert "final-grades.csv" in (tmp_path / "s.md").read_text()


def test_batched_reports_merge_their_gpu_stage_and_a_doubled_report_is_refused(tmp_path):
    """The class workflow's artifacts: regrade-batch-NN/regrade.json holds a batch's entries,
    gpu-batch-NN/<folder>/gpu.json each GPU report; a folder named by two reports gets no
    score rather than either."""
    subs = dispatch.parse_submissions(f"course/lab-05-ada@{'a' * 40}\n"
                                      f"course/lab-05-bob@{'b' * 40}")
    cpu = _result(30)
    gpu = GradeResult(lab="lab05", title="The forward kernel", stages=["gpu"],
                      submission="lab05.py", integrity={"checked": True, "modified": []})
    gpu.exercises = [ExerciseResult("5.2", "msda_fwd_gpu", [
        Verdict("test_gpu", "passed", 10, 10, "", "gpu", 1.0)])]
    batch = tmp_path / "regrade-batch-01"
    batch.mkdir()
    entry = {"student": "course--lab-05-ada", "lab": "lab05", "commit": "a" * 40, "note": "",
             "result": cpu.to_dict()}
    batch.joinpath("regrade.json").write_text(json.dumps([entry, {**entry, "student":
                                                                  "course--lab-05-bob"}]))
    other = tmp_path / "regrade-batch-02"
    other.mkdir()
    other.joinpath("regrade.json").write_text(json.dumps([{**entry,
                                                           "student": "course--lab-05-bob"}]))
    (tmp_path / "gpu-batch-01" / "course--lab-05-ada").mkdir(parents=True)
    gpu.write_json(tmp_path / "gpu-batch-01" / "course--lab-05-ada" / "gpu.json")
    rows = {r.student: r for r in dispatch.gradebook_rows("lab05", subs, tmp_path, gpu=True)}
    ada, bob = rows["course--lab-05-ada"], rows["course--lab-05-bob"]
    assert (ada.score, ada.max) == (40, 50)  # 30/40 on the CPU stages, 10/10 on the GPU
    assert bob.score == "" and "2 reports name it" in bob.note


def test_the_per_submission_workflow_writes_final_grades_without_late_days(tmp_path, kit_root,
                                                                           monkeypatch):
    """regrade.yml's gradebook step: given commits, not a deadline, its final grades say that no
    late days are known, and charge none."""
    monkeypatch.chdir(_course(tmp_path, kit_root, {"kind": "penalty", "penalty_per_day": 10}))
    report = tmp_path / "reports" / "regrade-course--lab-05-ada"
    report.mkdir(parents=True)
    report.joinpath("regrade.json").write_text(json.dumps([
        {"student": "course--lab-05-ada", "lab": "lab05", "commit": "a" * 40, "note": "",
         "result": _result(40).to_dict()}]))
    out = tmp_path / "book"
    assert dispatch.main(["gradebook", "--lab", "lab05", "--submissions",
                          f"course/lab-05-ada@{'a' * 40}", "--reports", str(tmp_path / "reports"),
                          "--out", str(out / "gradebook.csv"),
                          "--final", str(out / "final-grades.csv"),
                          "--summary", str(tmp_path / "s.md")]) == 0
    with open(out / "final-grades.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert (row["raw_score"], row["late_days"], row["score"]) == ("40", "unknown", "40")
    assert "not regraded at the deadline: no late days known" in row["note"]
    assert "on time" not in row["calculation"] and "lateness unknown" in row["calculation"]
