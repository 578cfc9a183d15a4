"""Results as data: one status type with every surface's label; a test stores its stage and mode."""

import json

import pytest

from msda_labs.classroom import platforms
from msda_labs.grading.judge.render import render_terminal
from msda_labs.grading.judge.results import ExerciseResult, GradeResult, Status, TestResult


def test_each_status_carries_every_label():
    labels = {s.value: (s.terminal, s.github, s.feedback, s.gradescope, s.passed) for s in Status}
    assert labels == {
        "passed": ("ok", "pass", "passed", "passed", True),
        "failed": ("FAILED", "fail", "failed", "failed", False),
        "not_attempted": ("not attempted", "fail", "not attempted", "failed", False),
        "error": ("ERROR", "error", "error", "failed", False),
        "crashed": ("CRASHED", "error", "crashed", "failed", False),
        "timeout": ("TIMEOUT", "error", "timed out", "failed", False),
    }
    assert f"{Status.TIMEOUT}" == str(Status.TIMEOUT) == "timeout"
    assert json.dumps([Status.CRASHED]) == '["crashed"]'


def test_an_unknown_status_is_refused():
    with pytest.raises(ValueError, match="unknown test status 'skipped'; expected one of passed"):
        TestResult("t", "skipped", 0, 1)


def test_stage_and_mode_are_both_stored_and_read_back(tmp_path):
    result = GradeResult("lab06", stages=["cpu", "gpu"], exercises=[ExerciseResult("6.1", "f", [
        TestResult("test_interp", "passed", 2, 2, stage="cpu", mode="interpret"),
        TestResult("test_speed", "timeout", 0, 3, "slow", stage="gpu", mode="gpu")])])
    result.write_json(tmp_path / "g.json")
    tests = json.loads((tmp_path / "g.json").read_text())["exercises"][0]["tests"]
    assert [(t["status"], t["stage"], t["mode"]) for t in tests] == \
        [("passed", "cpu", "interpret"), ("timeout", "gpu", "gpu")]
    again = GradeResult.read_json(tmp_path / "g.json")
    assert again.to_dict() == result.to_dict()
    assert "TIMEOUT: test_speed: slow" in render_terminal(again)
    gradescope = platforms.gradescope_results(again)["tests"]
    assert gradescope[1]["tags"] == ["task 6.1", "stage gpu", "mode gpu"]
    assert platforms.github_classroom_result(again)["tests"][1]["status"] == "error"


def test_grade_json_from_before_modes_reads_its_stage_as_the_mode():
    old = {"name": "t", "status": "failed", "score": 0, "max_score": 1, "message": "",
           "stage": "interpret", "duration": 0.1}
    test = TestResult(**old)
    assert (test.stage, test.mode) == ("cpu", "interpret")
    assert TestResult(**{**old, "stage": "gpu"}).stage == "gpu"
    with pytest.raises(ValueError, match="unknown mode 'tpu'"):
        TestResult(**{**old, "stage": "tpu"})
