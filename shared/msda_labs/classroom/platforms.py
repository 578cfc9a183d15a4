"""Platform writers of one :class:`~msda_labs.grading.results.GradeResult`.

* GitHub Classroom's autograding actions: the ``result`` a command grader hands to
  ``autograding-grading-reporter`` (base64 of JSON, version 1, one entry per test, integer points),
  and the reporter's own output (a table and the ``Points X/Y`` notices).
* Classroom 50: the ``result.json`` of a custom autograder (schema ``classroom50/result/v1``).
* Gradescope: ``/autograder/results/results.json``.

Each writer reads the result and nothing else, so the same grading run shows the same points on
every platform. Points are integers everywhere (fractional totals broke the Classroom exports).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from datetime import datetime, timezone

from msda_labs.grading.render import render_markdown
from msda_labs.grading.results import GradeResult

__all__ = ["label_of", "github_classroom_result", "encode_github_classroom",
           "decode_github_classroom", "reporter_output", "classroom50_result",
           "gradescope_results", "CLASSROOM50_SCHEMA"]

CLASSROOM50_SCHEMA = "classroom50/result/v1"
# autograding-command-grader statuses: pass | fail | error.
_GH_STATUS = {"passed": "pass", "failed": "fail", "not_attempted": "fail", "error": "error",
              "crashed": "error", "timeout": "error"}
_WORDS = {"passed": "passed", "failed": "failed", "not_attempted": "not attempted",
          "error": "error", "crashed": "crashed", "timeout": "timed out"}


def label_of(ex, test) -> str:
    """One test's name on every platform: ``Task 1.1 bilinear_sample: test_x``."""
    return f"Task {ex.id} {ex.name}: {test.name}"


def _feedback(test) -> str:
    if test.status == "passed":
        return "passed"
    return f"{_WORDS[test.status]}: {test.message}" if test.message else _WORDS[test.status]


def github_classroom_result(result: GradeResult, test_command: str = "") -> dict:
    """The JSON that a classroom-resources command grader writes (before base64)."""
    tests = []
    for ex, test in result.tests():
        tests.append({
            "name": f"{label_of(ex, test)} ({test.max_score} pt{'s' * (test.max_score != 1)})",
            "status": _GH_STATUS[test.status],
            "score": int(test.score),
            "message": _feedback(test),
            "test_code": test_command or f"python -m msda_labs grade . --task {ex.id}",
            "filename": "",
            "line_no": 0,
            "duration": int(round(test.duration * 1000)),  # milliseconds, as the action reports
        })
    everything_passed = all(t.status == "passed" for _, t in result.tests())
    return {"version": 1, "status": "pass" if everything_passed else "fail",
            "max_score": int(result.max_score), "tests": tests}


def encode_github_classroom(result: GradeResult, test_command: str = "") -> str:
    """base64 of :func:`github_classroom_result`: the value of a runner's ``result`` output."""
    payload = json.dumps(github_classroom_result(result, test_command), separators=(",", ":"))
    return base64.b64encode(payload.encode()).decode()


def decode_github_classroom(value: str) -> dict:
    return json.loads(base64.b64decode(value.strip()).decode())


def reporter_output(runners: Mapping[str, dict]) -> tuple[list[str], bool]:
    """What autograding-grading-reporter prints for decoded runner results.

    Returns the lines (a per-test table, the total, and the two ``::notice`` workflow commands
    that GitHub Classroom read: ``Points X/Y`` and ``{"totalPoints":X,"maxPoints":Y}``) and
    whether the job should fail (a runner whose status is fail or error).
    """
    lines: list[str] = []
    total = maximum = 0
    failed = False
    for runner_id, data in runners.items():
        lines.append(f"Runner {runner_id}")
        for test in data.get("tests", []):
            mark = "pass" if test["status"] == "pass" else test["status"].upper()
            lines.append(f"  [{mark:>5}] {test['name']}: {test['score']} pts")
            if test["status"] != "pass" and test.get("message"):
                lines.append(f"          {test['message']}")
        score = sum(int(t["score"]) for t in data.get("tests", []))
        lines.append(f"  runner total: {score}/{data['max_score']}")
        total += score
        maximum += int(data["max_score"])
        failed = failed or data.get("status") in ("fail", "error")
    lines.append(f"Grand total: {total}/{maximum}")
    if maximum > 0:  # like the action: nothing is reported when no runner has points
        lines.append(f"::notice title=Autograding complete::Points {total}/{maximum}")
        report = json.dumps({"totalPoints": total, "maxPoints": maximum}, separators=(",", ":"))
        lines.append(f"::notice title=Autograding report::{report}")
    return lines, failed


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def classroom50_result(result: GradeResult, env: Mapping[str, str] | None = None) -> dict:
    """A Classroom 50 custom autograder's ``result.json``.

    The identifying fields come from the environment Classroom 50 gives the autograder
    (CLASSROOM, ASSIGNMENT, USERNAME or OWNER, SUBMISSION_TAG, COMMIT_URL, RELEASE_URL,
    REVIEW_URL); missing ones are empty strings. When integrity was checked, a 0-point test
    says whether the grading files were as published (it fails, naming them, when not).
    """
    env = os.environ if env is None else env
    tests = [{"test-name": label_of(ex, t), "passed": t.status == "passed",
              "score": int(t.score), "max-score": int(t.max_score)} for ex, t in result.tests()]
    info = result.integrity
    # After a regrade, `tampered` lists what the student changed (restored before grading).
    changed = info.get("modified") or info.get("tampered", info.get("restored")) or []
    if info.get("checked"):
        tests.append({"test-name": "integrity: grading files as published"
                      + (f" (changed: {', '.join(changed)})" if changed else ""),
                      "passed": not changed, "score": 0, "max-score": 0})
    return {
        "schema": CLASSROOM50_SCHEMA,
        "classroom": env.get("CLASSROOM", ""),
        "assignment": env.get("ASSIGNMENT", ""),
        "owner": env.get("OWNER") or env.get("USERNAME", ""),
        "submission": env.get("SUBMISSION_TAG", ""),
        "commit": env.get("COMMIT_URL", ""),
        "release": env.get("RELEASE_URL", ""),
        "review": env.get("REVIEW_URL", ""),
        "datetime": _now(),
        "score": int(result.score),
        "max-score": int(result.max_score),
        "tests": tests,
    }


def gradescope_results(result: GradeResult, *, execution_time: float | None = None,
                       visibility: str = "visible") -> dict:
    """Gradescope's ``results.json``: one test per graded test, numbered by task."""
    tests = []
    counters: dict[str, int] = {}
    for ex, t in result.tests():
        counters[ex.id] = counters.get(ex.id, 0) + 1
        entry = {
            "name": label_of(ex, t),
            "number": f"{ex.id}.{counters[ex.id]}",
            "score": int(t.score),
            "max_score": int(t.max_score),
            "status": "passed" if t.status == "passed" else "failed",
            "output": _feedback(t),
            "output_format": "text",
            "tags": [f"task {ex.id}", f"stage {t.stage}"],
        }
        tests.append(entry)
    out = {
        "score": int(result.score),
        "output": render_markdown(result),
        "output_format": "md",
        "visibility": visibility,
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"lab": result.lab, "integrity": result.integrity,
                       "stages": list(result.stages)},
    }
    if execution_time is not None:
        out["execution_time"] = int(round(execution_time))
    return out
