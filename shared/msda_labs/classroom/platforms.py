"""Platform writers of one :class:`~msda_labs.grading.judge.results.GradeResult`.

* GitHub Classroom's autograding actions: the ``result`` a command grader hands to
  ``autograding-grading-reporter`` (base64 of JSON, version 1, one entry per test, integer points),
  and the reporter's own output (a table and the ``Points X/Y`` notices).
* Classroom 50: the ``result.json`` of a custom autograder (schema ``classroom50/result/v1``).
* Gradescope: ``/autograder/results/results.json``.

Each writer reads the result and nothing else, so the same grading run shows the same points on
every platform. Points are integers everywhere (fractional totals broke the Classroom exports).

The writers are registered once, by name (:data:`WRITERS`, :func:`writer`): ``report --format``,
:func:`render` and the docs' list of formats all read the registry, so a platform is added by
registering one function here.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from msda_labs.grading.judge.diagnosis import clip, settle, student_words
from msda_labs.grading.judge.render import render_markdown
from msda_labs.grading.judge.results import GradeResult

__all__ = ["label_of", "github_classroom_result", "encode_github_classroom",
           "decode_github_classroom", "reporter_output", "classroom50_result", "commit_datetime",
           "gradescope_results", "CLASSROOM50_SCHEMA", "FORMATS", "WRITERS", "Writer", "writer",
           "render", "reporter_from_env"]

CLASSROOM50_SCHEMA = "classroom50/result/v1"


@dataclass(frozen=True)
class Writer:
    """One output format of a grade result: its name (``report --format NAME``), what it is for,
    and the function that writes it (text ending in a newline)."""

    name: str
    what: str
    write: Callable[[GradeResult], str]


WRITERS: dict[str, Writer] = {}


def writer(name: str, what: str):
    """Register the decorated ``result -> text`` function as the writer of format ``name``."""
    def register(fn: Callable[[GradeResult], str]) -> Callable[[GradeResult], str]:
        if name in WRITERS:
            raise ValueError(f"two writers of format {name!r}")
        WRITERS[name] = Writer(name, what, fn)
        return fn
    return register


def _json_text(data) -> str:
    return json.dumps(data, indent=2) + "\n"


def label_of(ex, test) -> str:
    """One test's name on every platform: ``Task 1.1 bilinear_sample: test_x``."""
    return f"Task {ex.id} {ex.name}: {test.name}"


def _feedback(test) -> str:
    """The word of a test's status (:attr:`Status.feedback`), then its message in the student's
    words, then where its cause lies when that is upstream ("follows from Task X")."""
    if test.status.passed:
        return test.status.feedback
    text = f"{test.status.feedback}: {student_words(test.message)}" if test.message \
        else test.status.feedback
    if (test.cause or {}).get("kind") == "follows":
        text += f"; {test.cause['text']}"
    return text


def _start_here(result: GradeResult) -> dict:
    """The result's start-here record (:func:`~msda_labs.grading.judge.diagnosis.settle`)."""
    settle(result)
    return result.start_here


def _starts_here(result: GradeResult, ex, test) -> bool:
    where = result.start_here
    return bool(where) and where.get("task") == ex.id and where.get("test") == test.name


def github_classroom_result(result: GradeResult, test_command: str = "") -> dict:
    """The JSON that a classroom-resources command grader writes (before base64). The reporter
    prints a failing test's name only, so the test where the report starts says so in its name
    ("start here: <cause>") and its message begins with the start-here line."""
    tests = []
    start = _start_here(result)
    for ex, test in result.tests():
        name = f"{label_of(ex, test)} ({test.max_score} pt{'s' * (test.max_score != 1)})"
        message = _feedback(test)
        if _starts_here(result, ex, test):
            name += f" - start here: {clip(start.get('cause') or 'no known mistake matches', 80)}"
            message = f"{start['text']}; {message}"
        tests.append({
            "name": name,
            "status": test.status.github,  # autograding-command-grader: pass | fail | error
            "score": int(test.score),
            "message": message,
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


_RESET, _GREEN, _RED, _MAGENTA, _CYAN = "\x1b[0m", "\x1b[32m", "\x1b[31m", "\x1b[35m", "\x1b[36m"
_GREY, _FG_OFF = "\x1b[90m", "\x1b[39m"
_TABLE_WIDTHS = (20, 13, 13)
_ROCKETS, _CYCLE, _TROPHY = "\U0001F680" * 24, "\U0001F504", "\U0001F3C6"
_CHECK, _CROSS, _LINE, _BAR, _ELLIPSIS = "\u2705", "\u274c", "\u2500", "\u2502", "\u2026"


def _js_number(value: float) -> str:
    """A number as JavaScript's String(n) writes it (for the values a reporter can see)."""
    if value != value:
        return "NaN"
    if float(value).is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(float(value))


def _js_fixed(value: float, digits: int) -> str:
    """JavaScript's Number.prototype.toFixed: the exact binary value, ties rounded up."""
    from decimal import ROUND_HALF_UP, Decimal

    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def _table_colours(env: Mapping[str, str]) -> bool:
    """Whether the reporter's table library colours its borders here: the environment test of
    the colour library it bundles (so a CI runner, which sets CI, gets a plain table)."""
    import re

    forced = None
    if "FORCE_COLOR" in env:
        value = env["FORCE_COLOR"]
        forced = len(value) == 0 or not value.strip().lstrip("-").isdigit() or int(value) != 0
        if not forced:
            return False
    if "CI" in env:
        return any(k in env for k in ("TRAVIS", "CIRCLECI", "APPVEYOR", "GITLAB_CI")) or \
            env.get("CI_NAME") == "codeship" or bool(forced)
    if "TEAMCITY_VERSION" in env:
        return bool(re.match(r"^(9\.(0*[1-9]\d*)\.|\d{2,}\.)", env["TEAMCITY_VERSION"]))
    if env.get("TERM_PROGRAM") in ("iTerm.app", "Hyper", "Apple_Terminal"):
        return True
    term = env.get("TERM", "")
    if re.search(r"-256(color)?$", term, re.I) or \
            re.search(r"^screen|^xterm|^vt100|^rxvt|color|ansi|cygwin|linux", term, re.I) or \
            "COLORTERM" in env:
        return True
    return bool(forced)


def _table(rows: list[list[str]], colours: bool) -> list[str]:
    """The reporter's summary table (cli-table3: grey borders and a red header when colours are
    on, padding 1, cells cut with an ellipsis to fit)."""
    grey, off, red = (_GREY, _FG_OFF, _RED) if colours else ("", "", "")

    def cell(text: str, width: int) -> str:
        room = width - 2
        text = text if len(text) <= room else text[:room - 1] + _ELLIPSIS
        return f" {text:<{room}} "

    def rule(left: str, mid: str, right: str) -> str:
        parts = [grey + (left if i == 0 else mid) + _LINE * w + (right if i == 2 else "")
                 + off for i, w in enumerate(_TABLE_WIDTHS)]
        return "".join(parts)

    def row(cells: list[str], head: bool = False) -> str:
        bar = grey + _BAR + off
        out = ""
        for text, width in zip(cells, _TABLE_WIDTHS):
            body = cell(text, width)
            out += bar + (f"{red}{body}{off}" if head else body)
        return out + bar

    lines = [rule("\u250c", "\u252c", "\u2510"), row(rows[0], head=True)]
    for data in rows[1:]:
        lines += [rule("\u251c", "\u253c", "\u2524"), row(data)]
    lines.append(rule("\u2514", "\u2534", "\u2518"))
    return lines


def reporter_output(runners: Mapping[str, dict],
                    env: Mapping[str, str] | None = None) -> tuple[list[str], bool]:
    """What autograding-grading-reporter v1 (commit d13b5912) prints for decoded runner results,
    line for line, colours included; and whether it fails the job.

    Its arithmetic, read from its dist/main.js: per runner it prints "Total points" and a table
    row of (tests passed / tests) x max_score, with two decimals in the line; the ``Points X/Y``
    notice that GitHub Classroom read (and ``{"totalPoints":X,"maxPoints":Y}``) sums each test's
    ``score`` over the runners that have a max_score. The two agree only when every test weighs
    the same; the notice is the grade. The job fails when a runner's status is fail (or error).
    """
    lines: list[str] = []
    rows = [["Test Runner Name", "Test Score", "Max Score"]]
    passed_all = tests_all = 0
    for index, (runner_id, data) in enumerate(runners.items()):
        tests = data.get("tests", [])
        maximum = data.get("max_score") or 0
        passed = sum(1 for t in tests if t.get("status") == "pass")
        fraction_score = passed / len(tests) * maximum if tests else float("nan")
        if index > 0:
            lines += [f"{_MAGENTA}{_ROCKETS}{_RESET}", ""]
        lines.append(f"{_CYCLE} Processing: {runner_id}")
        for test in tests:
            where = f" - line {test['line_no']}" if test.get("line_no") else ""
            if test.get("status") == "pass":
                lines.append(f"{_GREEN}{_CHECK} {test['name']}{where}{_RESET}")
            elif test.get("status") == "error":
                fallback = "Failed to run test '" + test["name"] + "'"
                lines += [f"Error: {test.get('message') or fallback}", _RESET]
            else:
                lines.append(f"{_RED}{_CROSS} {test['name']}{where}{_RESET}")
            if test.get("test_code"):
                lines += ["Test code:", test["test_code"], ""]
        passed_all += passed
        tests_all += len(tests)
        if maximum != 0:
            lines += [f"Total points for {runner_id}: {_js_fixed(fraction_score, 2)}/{maximum}",
                      ""]
        rows.append([runner_id.strip(), _js_number(fraction_score), _js_number(maximum)])
    lines.append(f"{_MAGENTA}Test runner summary{_MAGENTA}")
    total_score = sum(float(r[1]) for r in rows[1:])
    total_max = sum(float(r[2]) for r in rows[1:])
    lines += _table(rows + [["Total: ", _js_number(total_score), _js_number(total_max)]],
                    _table_colours(os.environ if env is None else env))
    lines += [f"{_CYAN}{_TROPHY} Grand total tests passed: {passed_all}/{tests_all}{_RESET}", ""]
    points = maximum_points = 0
    for data in runners.values():
        if data.get("max_score"):
            maximum_points += data["max_score"]
            points += sum(t.get("score", 0) for t in data.get("tests", []))
    if maximum_points:  # like the action: nothing is reported when no runner has points
        lines.append(f"::notice title=Autograding complete::Points {points}/{maximum_points}")
        report = json.dumps({"totalPoints": points, "maxPoints": maximum_points},
                            separators=(",", ":"))
        lines.append(f"::notice title=Autograding report::{report}")
    statuses = [data.get("status") for data in runners.values()]
    if "fail" in statuses:
        lines.append("::error::Some tests failed.")
    elif "error" in statuses:
        lines.append("::error::Some tests errored.")
    return lines, "fail" in statuses or "error" in statuses


def _utc(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def commit_datetime(checkout, commit: str = "") -> datetime | None:
    """The committer date of ``commit`` (default HEAD) in the git checkout ``checkout``, or None
    when there is no such history."""
    import subprocess

    # The checkout's own configuration must not run a program (an fsmonitor, a signature check).
    proc = subprocess.run(["git", "-c", "safe.directory=*", "-c", "core.fsmonitor=false",
                           "-c", "log.showSignature=false", "-c", "core.hooksPath=/dev/null",
                           "-C", str(checkout), "log", "-1", "--no-show-signature",
                           "--format=%ct", commit or "HEAD", "--"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    stamp = proc.stdout.strip()
    if proc.returncode != 0 or not stamp.isdigit():
        return None
    return datetime.fromtimestamp(int(stamp), tz=timezone.utc)


def classroom50_result(result: GradeResult, env: Mapping[str, str] | None = None, *,
                       committed: datetime | None = None,
                       graded: datetime | None = None) -> dict:
    """A Classroom 50 custom autograder's ``result.json``.

    The identifying fields come from the environment Classroom 50 gives the autograder
    (CLASSROOM, ASSIGNMENT, USERNAME or OWNER, SUBMISSION_TAG, COMMIT_URL, RELEASE_URL,
    REVIEW_URL, ASSIGNMENT_TYPE, GITHUB_ACTOR and GITHUB_ACTOR_ID); missing ones are empty
    strings. ``datetime`` is the submission instant, the graded commit's committer date
    (``committed``; the grading time only when no commit is known), and ``graded_at`` the grading
    time, as Classroom 50's runner writes them (it stamps both, with ``owner``,
    ``assignment_type`` and ``submitted_by``, over what an autograder wrote). When integrity was
    checked, a 0-point test says whether the grading files were as published (it fails, naming
    them, when not).
    """
    env = os.environ if env is None else env
    now = graded or datetime.now(timezone.utc)
    tests = [{"test-name": label_of(ex, t), "passed": t.status.passed,
              "score": int(t.score), "max-score": int(t.max_score)} for ex, t in result.tests()]
    start = _start_here(result)
    if start:  # a 0-point line first: where to start reading (Classroom 50 shows test names)
        tests.insert(0, {"test-name": clip(start["text"], 300), "passed": False, "score": 0,
                         "max-score": 0})
    info = result.integrity
    # After a regrade, `tampered` lists what the student changed (restored before grading).
    changed = info.get("modified") or info.get("tampered", info.get("restored")) or []
    if info.get("checked"):
        tests.append({"test-name": "integrity: grading files as published"
                      + (f" (changed: {', '.join(changed)})" if changed else ""),
                      "passed": not changed, "score": 0, "max-score": 0})
    data = {
        "schema": CLASSROOM50_SCHEMA,
        "classroom": env.get("CLASSROOM", ""),
        "assignment": env.get("ASSIGNMENT", ""),
        "assignment_type": env.get("ASSIGNMENT_TYPE") or "individual",
        "owner": env.get("OWNER") or env.get("USERNAME", ""),
        "submission": env.get("SUBMISSION_TAG", ""),
        "commit": env.get("COMMIT_URL", ""),
        "release": env.get("RELEASE_URL", ""),
        "review": env.get("REVIEW_URL", ""),
        "datetime": _utc(committed or now),
        "graded_at": _utc(now),
        "score": int(result.score),
        "max-score": int(result.max_score),
        "tests": tests,
    }
    actor = (env.get("GITHUB_ACTOR") or "").strip()
    if actor:
        actor_id = (env.get("GITHUB_ACTOR_ID") or "").strip()
        data["submitted_by"] = {"username": actor,
                                "id": int(actor_id) if actor_id.isdigit() else None}
    return data


def gradescope_results(result: GradeResult, *, execution_time: float | None = None,
                       visibility: str = "visible") -> dict:
    """Gradescope's ``results.json``: one test per graded test, numbered by task; the overall
    output (Markdown) opens with the start-here line, and so does the test where it starts."""
    _start_here(result)
    tests = []
    counters: dict[str, int] = {}
    for ex, t in result.tests():
        counters[ex.id] = counters.get(ex.id, 0) + 1
        entry = {
            "name": label_of(ex, t),
            "number": f"{ex.id}.{counters[ex.id]}",
            "score": int(t.score),
            "max_score": int(t.max_score),
            "status": t.status.gradescope,
            "output": (f"{result.start_here['text']}\n\n" if _starts_here(result, ex, t)
                       else "") + _feedback(t),
            "output_format": "text",
            "tags": [f"task {ex.id}", f"stage {t.stage}", f"mode {t.mode}"],
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
                       "stages": list(result.stages), "start_here": _start_here(result)},
    }
    if execution_time is not None:
        out["execution_time"] = int(round(execution_time))
    return out


@writer("terminal", "the table a student reads in a terminal")
def _terminal(result: GradeResult) -> str:
    from msda_labs.grading.judge.render import render_terminal

    return render_terminal(result) + "\n"


writer("markdown", "the job summary and Feedback pull request")(render_markdown)
writer("json", "grade.json, the result as data")(lambda result: _json_text(result.to_dict()))
writer("github-classroom", "the result autograding-grading-reporter reads (base64 JSON)")(
    encode_github_classroom)
writer("classroom50", "Classroom 50's result.json")(
    lambda result: _json_text(classroom50_result(result)))
writer("gradescope", "Gradescope's results.json")(
    lambda result: _json_text(gradescope_results(result)))

# What `python -m msda_labs report --format` writes: every registered writer.
FORMATS = tuple(WRITERS)


def render(result: GradeResult, fmt: str) -> str:
    """``result`` in one of :data:`FORMATS`, as text ending in a newline (base64 for
    github-classroom)."""
    if fmt not in WRITERS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(WRITERS)}")
    return WRITERS[fmt].write(result)


def reporter_from_env(runners: str, env: Mapping[str, str]) -> tuple[list[str], int]:
    """``report --runners A,B``: what autograding-grading-reporter prints for the results that
    the grading steps left in ``$<ID>_RESULTS``, and the exit status (1 when a runner failed or
    left no readable result)."""
    from msda_labs.classroom.workflows import reporter_env

    decoded = {}
    for runner in [r.strip() for r in runners.split(",") if r.strip()]:
        value = env.get(reporter_env(runner), "")
        if not value:
            return [f"::error title=Autograding::no result from step '{runner}' "
                    f"(${reporter_env(runner)} is empty): the grading step did not finish"], 1
        try:
            decoded[runner] = decode_github_classroom(value)
        except ValueError as exc:
            return [f"::error title=Autograding::the result of '{runner}' is not base64 JSON: "
                    f"{exc}"], 1
    lines, failed = reporter_output(decoded, env)
    return lines, 1 if failed else 0
