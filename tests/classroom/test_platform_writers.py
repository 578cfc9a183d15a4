"""One result, separate writers: each platform format checked against its documented fields."""

import base64
import json

import pytest
from classroom_kit import validate

from msda_labs.classroom import platforms
from msda_labs.cli import main
from msda_labs.grading.judge.results import ExerciseResult, GradeResult
from msda_labs.grading.judge.results import TestResult as Verdict


def test_github_classroom_payload_decodes_to_documented_json(sample_result):
    encoded = platforms.encode_github_classroom(sample_result)
    assert "\n" not in encoded  # one step-output line
    data = json.loads(base64.b64decode(encoded))
    validate(data, "github-classroom-result")
    assert data["max_score"] == sample_result.max_score == 10
    assert sum(t["score"] for t in data["tests"]) == sample_result.score == 2
    assert len(data["tests"]) == 6  # one entry per test
    assert data["status"] == "fail"
    by_status = [t["status"] for t in data["tests"]]
    assert by_status == ["pass", "fail", "fail", "error", "error", "error"]
    ragged = data["tests"][1]
    assert "Task 5.1" in ragged["name"] and "test_ragged" in ragged["name"]
    assert "element [0, 3]" in ragged["message"]
    assert data["tests"][0]["duration"] == 250  # milliseconds, integer


def test_github_classroom_status_pass_only_when_everything_passed():
    result = GradeResult("lab01", exercises=[ExerciseResult("1.1", "f", [
        Verdict("test_a", "passed", 1, 1), Verdict("test_b", "passed", 2, 2)])])
    data = platforms.github_classroom_result(result)
    assert data["status"] == "pass" and data["max_score"] == 3
    lines, failed = platforms.reporter_output({"lab01": data})
    assert not failed
    assert "::notice title=Autograding complete::Points 3/3" in lines


def test_reporter_notices_and_failure(sample_result):
    data = platforms.github_classroom_result(sample_result)
    lines, failed = platforms.reporter_output({"lab05": data})
    assert failed
    assert "::notice title=Autograding complete::Points 2/10" in lines
    report = [ln for ln in lines if ln.startswith("::notice title=Autograding report::")]
    assert json.loads(report[0].split("::", 2)[2]) == {"totalPoints": 2, "maxPoints": 10}
    # nothing is reported when no runner carries points
    empty = {"version": 1, "status": "pass", "max_score": 0, "tests": []}
    assert not any(ln.startswith("::notice") for ln in platforms.reporter_output({"x": empty})[0])


def test_reporter_command_reads_the_runner_variable(sample_result, monkeypatch, capsys):
    monkeypatch.setenv("LAB05_RESULTS", platforms.encode_github_classroom(sample_result))
    assert main(["report", "--runners", "lab05"]) == 1  # a failing test fails the job
    out = capsys.readouterr().out
    assert "Points 2/10" in out and "test_ragged" in out
    monkeypatch.setenv("LAB05_RESULTS", "")
    assert main(["report", "--runners", "lab05"]) == 1
    assert "no result from step 'lab05'" in capsys.readouterr().out


def test_report_writes_the_step_output(sample_result, tmp_path, monkeypatch):
    grade = tmp_path / "grade.json"
    sample_result.write_json(grade)
    output = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    assert main(["report", str(grade), "--format", "github-classroom",
                 "--github-output", "result"]) == 0
    key, _, value = output.read_text().strip().partition("=")
    assert key == "result"
    assert platforms.decode_github_classroom(value) == \
        platforms.github_classroom_result(GradeResult.read_json(grade))


def test_classroom50_result_matches_documented_fields(sample_result):
    env = {"CLASSROOM": "msda-2027", "ASSIGNMENT": "lab-05", "USERNAME": "ada",
           "SUBMISSION_TAG": "submit/20270101T000000Z-abc1234",
           "COMMIT_URL": "https://github.com/o/r/commit/abc", "RELEASE_URL": "https://r",
           "REVIEW_URL": "https://p"}
    data = platforms.classroom50_result(sample_result, env)
    validate(data, "classroom50-result")
    assert data["schema"] == "classroom50/result/v1"
    assert (data["classroom"], data["assignment"], data["owner"]) == ("msda-2027", "lab-05", "ada")
    assert data["submission"] == env["SUBMISSION_TAG"] and data["commit"] == env["COMMIT_URL"]
    assert data["score"] == 2 and data["max-score"] == 10
    assert data["tests"][0] == {"test-name": sample_result.start_here["text"], "passed": False,
                                "score": 0, "max-score": 0}  # where to start reading, first
    graded = [t for t in data["tests"][1:] if not t["test-name"].startswith("integrity")]
    assert sum(t["score"] for t in graded) == 2 and sum(t["max-score"] for t in graded) == 10
    assert [t["passed"] for t in graded] == [True, False, False, False, False, False]
    integrity = [t for t in data["tests"] if t["test-name"].startswith("integrity")]
    assert integrity == [{"test-name": "integrity: grading files as published (changed: "
                                       "tests/test_lab05.py)", "passed": False,
                          "score": 0, "max-score": 0}]


def test_classroom50_owner_falls_back_and_missing_fields_are_empty(sample_result):
    data = platforms.classroom50_result(sample_result, {"OWNER": "grace"})
    validate(data, "classroom50-result")
    assert data["owner"] == "grace" and data["release"] == ""


def test_gradescope_results_match_documented_fields(sample_result):
    data = platforms.gradescope_results(sample_result, execution_time=12.6)
    validate(data, "gradescope-results")
    assert data["score"] == sum(t["score"] for t in data["tests"]) == 2
    assert sum(t["max_score"] for t in data["tests"]) == 10
    assert [t["number"] for t in data["tests"]] == ["5.1.1", "5.1.2", "5.2.1", "5.2.2", "5.2.3",
                                                   "5.2.4"]
    assert [t["status"] for t in data["tests"]] == ["passed"] + ["failed"] * 5
    assert "element [0, 3]" in data["tests"][1]["output"]
    assert "Grading files were modified" in data["output"]
    assert data["extra_data"]["integrity"]["modified"] == ["tests/test_lab05.py"]
    assert data["execution_time"] == 13


@pytest.mark.parametrize("fmt,schema_name", [("classroom50", "classroom50-result"),
                                             ("gradescope", "gradescope-results")])
def test_report_command_renders_platform_files(sample_result, tmp_path, fmt, schema_name):
    grade = tmp_path / "grade.json"
    sample_result.write_json(grade)
    out = tmp_path / "out.json"
    assert main(["report", str(grade), "--format", fmt, "--out", str(out)]) == 0
    validate(json.loads(out.read_text()), schema_name)


def test_report_refuses_what_is_not_a_grade_json(tmp_path, capsys):
    bad = tmp_path / "grade.json"
    bad.write_text('{"hello": 1}')
    assert main(["report", str(bad), "--format", "gradescope"]) == 2
    assert "not a grade.json" in capsys.readouterr().err


def test_every_platform_shows_where_to_start(sample_result):
    """The start-here line (and the cause, a field of the JSON report) on every surface."""
    from msda_labs.grading.judge.diagnosis import settle

    settle(sample_result)
    text = sample_result.start_here["text"]
    assert text.startswith("start here: Task 5.1 (msda_fwd): ")
    data = json.loads(platforms.render(sample_result, "json"))
    assert data["start_here"]["text"] == text and data["start_here"]["task"] == "5.1"
    assert all("cause" in t for ex in data["exercises"] for t in ex["tests"])
    assert text in platforms.render(sample_result, "terminal").splitlines()[1]
    assert f"**{text}**" in platforms.render(sample_result, "markdown")
    github = platforms.github_classroom_result(sample_result)
    starting = [t for t in github["tests"] if "start here" in t["name"]]
    assert len(starting) == 1 and starting[0]["message"].startswith(text)
    lines, _ = platforms.reporter_output({"lab05": github})
    assert any("start here" in line for line in lines)  # the reporter prints failing names
    assert platforms.classroom50_result(sample_result, {})["tests"][0]["test-name"] == text
    gradescope = platforms.gradescope_results(sample_result)
    assert gradescope["extra_data"]["start_here"]["text"] == text
    assert text in gradescope["output"]
    assert sum(t["output"].startswith(text) for t in gradescope["tests"]) == 1
