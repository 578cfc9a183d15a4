"""The platform contracts, each checked against what the platform itself does:

* the pinned actions are the node24 releases (and the reporter its only runnable commit);
* Classroom 50 bundles an autograder only from ``<classroom>/autograders/<assignment>/``;
* a Gradescope upload of ``labNN.py`` alone names no grading file as changed;
* the builtin reporter step prints the reporter action's arithmetic (tests passed / tests x max
  score per runner, the sum of points in the notice);
* Classroom 50's ``result.json``: ``datetime`` is the graded commit's date and the fields the
  runner stamps (assignment_type, graded_at, submitted_by) pass the schema.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from classroom_kit import cheapest_lab, clean_env, validate
from kit import MANIFEST, ROOT, chip_path

from msda_labs.classroom import platforms, workflows
from msda_labs.classroom.export import ExportError, classroom50_target
from msda_labs.classroom.regrade import regrade_checkout
from msda_labs.cli import main
from msda_labs.grading.judge.results import ExerciseResult, GradeResult
from msda_labs.grading.judge.results import TestResult as Verdict

CHEAP = cheapest_lab().id
NODE24_PINS = {
    "actions/checkout": ("3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1"),
    "actions/setup-python": ("5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0"),
    "actions/upload-artifact": ("bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "v7.0.0"),
    "actions/download-artifact": ("3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "v8.0.1"),
    "actions/cache/restore": ("27d5ce7f107fe9357f9df03efb73ab90386fccae", "v5.0.5"),
    "actions/cache/save": ("27d5ce7f107fe9357f9df03efb73ab90386fccae", "v5.0.5"),
}
REPORTER = ("classroom-resources/autograding-grading-reporter@"
            "d13b5912daf5042ac1b71bc38bdb4a6bcd61d8ca")
_USES = re.compile(r"^\s*(?:-\s+)?uses:\s*([^\s#]+)\s*(?:#\s*(\S+))?", re.M)


def _uses(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2) or "") for m in _USES.finditer(text)]


# ---------------------------------------------------------------------------- defect 2: pins

def test_every_workflow_pins_the_node24_releases():
    texts = {path.name: path.read_text() for path in (ROOT / ".github" / "workflows").glob("*.yml")}
    lab = MANIFEST.lab(CHEAP)
    texts["exported"] = workflows.render_workflow(MANIFEST, lab)
    texts["exported+reporter"] = workflows.render_workflow(MANIFEST, lab, REPORTER)
    seen = set()
    for name, text in texts.items():
        for ref, comment in _uses(text):
            action, _, sha = ref.partition("@")
            if action == REPORTER.split("@")[0]:
                assert ref == REPORTER and comment == "v1", (name, ref, comment)
                continue
            assert action in NODE24_PINS, (name, ref)
            assert (sha, comment) == NODE24_PINS[action], (name, ref, comment)
            seen.add(action)
    assert seen == set(NODE24_PINS)
    assert {k: v.split("@")[0] for k, v in workflows.ACTIONS.items()} == {
        "CHECKOUT": "actions/checkout", "SETUP_PYTHON": "actions/setup-python",
        "UPLOAD_ARTIFACT": "actions/upload-artifact",
        "DOWNLOAD_ARTIFACT": "actions/download-artifact", "CACHE_RESTORE": "actions/cache/restore",
        "CACHE_SAVE": "actions/cache/save"}
    assert workflows.REPORTER_ACTION == REPORTER


def test_pinned_copies_in_shared_actions_run_on_node24():
    """Where the released copies are at hand, their action.yml says what they run on."""
    actions = ROOT.parent / "shared" / "actions"
    if not actions.is_dir():
        pytest.skip(f"{actions} is absent: nothing to read the runtimes from")
    for action, (sha, _) in NODE24_PINS.items():
        folder = actions / f"{action.split('/')[1]}@{sha}"
        if folder.is_dir():  # upload/download are composite stand-ins here
            assert yaml.safe_load((folder / "action.yml").read_text())["runs"]["using"] == "node24"
    reporter = actions / f"autograding-grading-reporter@{REPORTER.split('@')[1]}"
    assert yaml.safe_load((reporter / "action.yml").read_text())["runs"]["using"] == "node20"


# ------------------------------------------------------------------- defect 1: Classroom 50 path

def test_classroom50_autograder_goes_where_the_runner_fetches_it(tmp_path, capsys):
    repo = tmp_path / "classroom50"
    assert main(["export", CHEAP, "--classroom50", str(repo), "--classroom", "msda-2027",
                 "--assignment", "lab-01"]) == 0
    files = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file())
    assert files == ["msda-2027/autograders/lab-01/autograder.py"]
    # without the classroom name there is no right place: refuse, saying what is needed
    assert main(["export", CHEAP, "--classroom50", str(repo)]) == 2
    assert "--classroom NAME" in capsys.readouterr().err
    with pytest.raises(ExportError, match="short name"):
        classroom50_target(repo, "MSDA 2027", "lab-01")


# ------------------------------------------------- defect 3: Gradescope upload of labNN.py alone

def test_module_alone_is_not_reported_as_changed_grading_files(exports, tmp_path):
    upload = tmp_path / "submission"
    upload.mkdir()
    shutil.copy2(chip_path(CHEAP), upload / f"{CHEAP}.py")
    result = regrade_checkout(upload, pristine=exports[CHEAP], lab_id=CHEAP)
    assert result.integrity["tampered"] == []
    assert result.integrity["missing"]  # they were absent, and supplied from the pristine copy
    assert not any("changed grading files" in n or "differ from" in n for n in result.notes)
    assert result.score == result.max_score > 0
    data = platforms.gradescope_results(result)
    assert "changed" not in data["output"] and "modified" not in data["output"]
    # a file that is there and differs is still named
    test_file = sorted((exports[CHEAP] / "tests").glob("test_*.py"))[0]
    (upload / "tests").mkdir()
    (upload / "tests" / test_file.name).write_text(test_file.read_text() + "\n# edited\n")
    edited = regrade_checkout(upload, pristine=exports[CHEAP], lab_id=CHEAP)
    assert edited.integrity["tampered"] == [f"tests/{test_file.name}"]
    assert any(f"restored before grading: tests/{test_file.name}" in n for n in edited.notes)


# ----------------------------------------------------------- defect 4: the reporter's arithmetic

def test_builtin_reporter_uses_the_actions_arithmetic(sample_result):
    """Per runner the action prints (tests passed / tests) x max score with two decimals; the
    notice sums the tests' points. sample_result: 1 of 6 tests passed, 2 of 10 points."""
    data = platforms.github_classroom_result(sample_result)
    lines, failed = platforms.reporter_output({"lab05": data}, env={})
    assert failed
    assert "Total points for lab05: 1.67/10" in lines
    assert "::notice title=Autograding complete::Points 2/10" in lines
    assert lines[-1] == "::error::Some tests failed."
    table = [ln for ln in lines if ln.startswith("\u2502 lab05")]
    assert table == ["\u2502 lab05              \u2502 1.66666666\u2026 \u2502 10          \u2502"]


def test_js_number_formatting_matches_javascript():
    assert platforms._js_fixed(0.125, 2) == "0.13"  # ties go up, as Number.toFixed does
    assert platforms._js_fixed(10 / 3, 2) == "3.33"
    assert platforms._js_number(4.0) == "4" and platforms._js_number(0.1 + 0.2) == \
        "0.30000000000000004"
    assert platforms._js_number(float("nan")) == "NaN"


# ------------------------------------------------------- defect 5: Classroom 50 result.json

def _commit(folder: Path, when: str) -> None:
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@invalid"]
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    (folder / "f.txt").write_text("x")
    subprocess.run([*git, "add", "-A"], cwd=folder, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=folder, check=True,
                   env=clean_env(GIT_COMMITTER_DATE=when, GIT_AUTHOR_DATE="2020-01-01T00:00:00Z"))


def test_classroom50_datetime_is_the_graded_commits_date(tmp_path):
    _commit(tmp_path, "2027-03-04T05:06:07+02:00")
    committed = platforms.commit_datetime(tmp_path)
    assert committed == datetime(2027, 3, 4, 3, 6, 7, tzinfo=timezone.utc)
    result = GradeResult("lab01", exercises=[ExerciseResult("1.1", "f", [
        Verdict("test_a", "passed", 1, 1)])])
    graded = datetime(2027, 3, 9, 12, 0, 0, tzinfo=timezone.utc)
    env = {"CLASSROOM": "msda", "ASSIGNMENT": "lab-01", "OWNER": "ada",
           "SUBMISSION_TAG": "submit/20270304T030607Z-abc1234", "ASSIGNMENT_TYPE": "individual",
           "GITHUB_ACTOR": "ada", "GITHUB_ACTOR_ID": "42"}
    data = platforms.classroom50_result(result, env, committed=committed, graded=graded)
    validate(data, "classroom50-result")
    assert data["datetime"] == "2027-03-04T03:06:07Z"  # the commit, in UTC
    assert data["graded_at"] == "2027-03-09T12:00:00Z"
    assert data["submitted_by"] == {"username": "ada", "id": 42}
    assert platforms.commit_datetime(tmp_path / "nowhere") is None


def test_classroom50_schema_accepts_what_the_runner_stamps(sample_result):
    """Classroom 50's runner overwrites owner, assignment_type, datetime, graded_at and
    submitted_by in the autograder's result.json before it validates and publishes it."""
    data = platforms.classroom50_result(sample_result, {"OWNER": "ada"})
    stamped = {**data, "owner": "ada", "assignment_type": "group",
               "datetime": "2027-01-01T00:00:00Z", "graded_at": "2027-01-02T00:00:00Z",
               "submitted_by": {"username": "grace", "id": None}}
    validate(stamped, "classroom50-result")
    with pytest.raises(Exception, match="not valid|is not one of|Additional properties"):
        validate({**stamped, "assignment_type": "solo"}, "classroom50-result")
    json.dumps(stamped)
