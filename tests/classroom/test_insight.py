"""The class insight page (msda_labs.classroom.insight) and the sample class it is tested on
(msda_labs.classroom.sample_class): the numbers, the ranking of planted mistakes, and the page in
a real browser (headless Chromium through Playwright)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from kit import ROOT

from msda_labs.classroom.insight import (
    Graded,
    InsightError,
    build_insight,
    collect,
    named_mistakes,
    parse_due,
)
from msda_labs.classroom.insight_page import write_insight
from msda_labs.classroom.sample_class import make_class
from msda_labs.grading.judge.results import ExerciseResult, GradeResult, TestResult
from msda_labs.mistakes.forward import FORWARD

# Graded results of the 60-student class of labs 01, 05 and 08 (seed 14), one file per distinct
# submission, keyed by the hash of the lab and the file's text. Regenerate (about 15 minutes of
# CPU) with: python -m msda_labs.classroom.sample_class --students 60 --labs lab01 lab05 lab08
#            --seed 14 --out /tmp/class60 --cache tests/classroom/data/sample-class-cache
CLASS60_CACHE = Path(__file__).parent / "data" / "sample-class-cache"


def _result(lab: str, tests: dict[str, list[tuple[str, str, int, int, str]]],
            depends: dict | None = None) -> GradeResult:
    result = GradeResult(lab=lab, title="t", depends=depends or {})
    for task, rows in tests.items():
        result.exercises.append(ExerciseResult(task, f"fn{task}", [
            TestResult(name, status, score, top, message, "cpu", 0.5)
            for name, status, score, top, message in rows]))
    return result


def test_named_mistakes_reads_catalogue_and_grader_phrases():
    why = FORWARD["truncate"].why
    assert named_mistakes(f"3 of 8 elements differ; this is exactly the output of {why}") == \
        [(why.split(":")[0], why)]
    assert named_mistakes("wrong; this is an unmasked tail: the store needs a mask; more") == \
        [("unmasked tail", "the store needs a mask")]
    assert named_mistakes("this is exactly the output of a made-up slip: it differs") == \
        [("a made-up slip", "a made-up slip: it differs")]
    assert named_mistakes("3 of 8 elements differ (rtol=1e-05)") == []


def test_insight_counts_outcomes_gaps_and_stuck_students():
    why = FORWARD["truncate"].why
    named = f"differ; this is exactly the output of {why}"
    graded = [
        Graded("ann", "lab01", _result("lab01", {
            "1.1": [("test_a", "passed", 2, 2, ""), ("test_b", "passed", 3, 3, "")],
            "1.2": [("test_c", "passed", 5, 5, "")]}), "x"),
        Graded("bob", "lab01", _result("lab01", {
            "1.1": [("test_a", "failed", 0, 2, named), ("test_b", "passed", 3, 3, "")],
            "1.2": [("test_c", "timeout", 0, 5, "ran past 60 s")]}), "x"),
        Graded("cy", "lab01", _result("lab01", {
            "1.1": [("test_a", "failed", 0, 2, named), ("test_b", "failed", 0, 3, "differ")],
            "1.2": [("test_c", "crashed", 0, 5, "segfault")]}), "x"),
        Graded("dee", "lab01", _result("lab01", {
            "1.1": [("test_a", "not_attempted", 0, 2, ""), ("test_b", "not_attempted", 0, 3, "")],
            "1.2": [("test_c", "not_attempted", 0, 5, "")]}), "x"),
        Graded("ann", "lab02", _result("lab02", {
            "2.1": [("test_d", "failed", 0, 4, "differ")]}), "x"),
    ]
    data = build_insight(graded, due={"lab01": date(2026, 1, 1), "lab02": date(2026, 1, 1),
                                      "lab03": date(2027, 1, 1)},
                         threshold=0.5, today=date(2026, 6, 1))
    lab01 = data["labs"][0]
    assert [(t["id"], t["passed"], t["failed"], t["not_attempted"], t["crashed"], t["timeout"])
            for t in lab01["tasks"]] == [("1.1", 1, 2, 1, 0, 0), ("1.2", 1, 0, 1, 1, 1)]
    assert [(m["label"], m["students"]) for m in lab01["mistakes"]] == \
        [(why.split(":")[0], 2)]
    # Only plain failures without a name are gaps (crashes and timeouts say why already), and
    # not cy's test_b: test_a of its task names her mistake, which may be behind it.
    assert lab01["gaps"] == [] and lab01["side_effects"] == {"tests": 1, "failures": 1}
    assert [(g["test"], g["students"]) for g in data["labs"][1]["gaps"]] == [("test_d", 1)]
    stuck = {s["student"]: s["reasons"] for s in data["stuck"]}
    assert stuck["ann"] == ["lab02 at 0% (below 50%)"]
    assert stuck["bob"] == ["lab02 not attempted (due 2026-01-01)", "lab01 at 30% (below 50%)"]
    assert stuck["dee"][0] == "lab01 not attempted (due 2026-01-01)"
    assert not any("lab03" in r for reasons in stuck.values() for r in reasons)  # not due yet
    assert [round(p["mean_share"], 3) for p in data["ladder"]] == [round(1.3 / 4, 3), 0.0]


def test_insight_refuses_bad_input(tmp_path):
    with pytest.raises(InsightError, match="labNN=YYYY-MM-DD"):
        parse_due(["lab5=2026-01-01"])
    with pytest.raises(InsightError, match="not a date"):
        parse_due(["lab05=next week"])
    (tmp_path / "other.json").write_text('{"name": "not a report"}')
    with pytest.raises(InsightError, match="is not a grade report"):
        collect([tmp_path / "other.json"])
    with pytest.raises(InsightError, match="no grade reports found"):
        collect([tmp_path])
    with pytest.raises(InsightError, match="does not exist"):
        collect([tmp_path / "missing"])
    with pytest.raises(InsightError, match="between 0 and 1"):
        build_insight([], threshold=50)


def _ranking_matches_planted(page_data: dict, planted: dict) -> None:
    """Every planted mistake is in the named-mistakes table (a crash or a timeout included: the
    grader names its cause where it has the evidence), for exactly the students it was planted
    in, in planted order."""
    for lab in page_data["labs"]:
        truth = planted["labs"][lab["lab"]]["mistakes"]
        given = planted["labs"][lab["lab"]]["given"]
        ranked = []  # (rank on the page, planted count, mutant)
        for entry in truth:
            phrase = entry["expect"].lower()
            who = sorted(s for s, mutants in given.items() if entry["mutant"] in mutants)
            assert len(who) == entry["students"]
            hits = [i for i, m in enumerate(lab["mistakes"])
                    if phrase in (m["label"] + " " + m["meaning"]).lower()]
            assert hits, (f"{lab['lab']}: planted {entry['mutant']} ({phrase!r}) is not in the "
                          f"named-mistakes table: {[m['label'] for m in lab['mistakes']]}")
            # Named for each student who has it, and for nobody else.
            assert lab["mistakes"][hits[0]]["who"] == who, (lab["lab"], entry["mutant"])
            ranked.append((hits[0], entry["students"], entry["mutant"]))
        assert len(ranked) >= 2, f"{lab['lab']}: fewer than two planted mistakes are named"
        for (rank_a, count_a, a), (rank_b, count_b, b) in zip(ranked, ranked[1:]):
            if count_a > count_b:
                assert rank_a < rank_b, (f"{lab['lab']}: {a} planted in {count_a} students "
                                         f"ranks below {b} ({count_b})")


@pytest.fixture(scope="module")
def small_class(tmp_path_factory) -> tuple[Path, dict, Path]:
    """A 20-student class of lab 01 (three planted mistakes, seed 1), graded live, and its page."""
    folder = tmp_path_factory.mktemp("class")
    planted = make_class(20, folder / "class", ["lab01"], seed=1, planted=3, jobs=2)
    page = folder / "page" / "insight.html"
    subprocess.run([sys.executable, "-m", "msda_labs", "insight", str(folder / "class"),
                    "--out", str(page), "--due", "lab01=2026-01-01", "--today", "2026-06-01"],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    return page, planted, folder / "class"


def test_sample_class_grades_each_student_by_their_own_file(small_class):
    _, planted, folder = small_class
    given = planted["labs"]["lab01"]["given"]
    entries = {e["student"]: e["result"] for e in
               json.loads((folder / "lab01" / "regrade.json").read_text())}
    assert len(entries) == 20
    assert planted["labs"]["lab01"]["distinct_submissions"] < 20
    chips = [s for s, g in given.items() if g == []]
    starters = [s for s, g in given.items() if g == ["starter"]]
    assert chips and starters
    assert all(entries[s]["score"] == entries[s]["max_score"] for s in chips)
    assert all(entries[s]["score"] == 0 for s in starters)
    assert all(entries[s]["score"] < entries[s]["max_score"]
               for s, g in given.items() if g and g != ["starter"])
    assert (folder / "lab01" / "gradebook.csv").read_text().count("\n") == 21


def test_page_ranks_planted_mistakes_of_a_small_class(small_class):
    page, planted, _ = small_class
    data = json.loads(page.with_suffix(".json").read_text())
    _ranking_matches_planted(data, planted)
    assert data["stuck"], "the starters of a due lab are stuck"
    html = page.read_text()
    # Self-contained: nothing fetched (the browser test also watches the requests).
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<script src" not in html and "<link" not in html and "@import" not in html
    for name in ("insight-students.csv", "insight-mistakes.csv"):
        assert (page.parent / name).is_file()
    report = page.parent / "insight-reports" / "lab01" / "student-01.md"
    assert report.read_text().startswith("## lab01")


def test_page_ranks_planted_mistakes_of_the_60_student_class(tmp_path):
    """The 60-student class of labs 01, 05 and 08 from its committed graded files: no grading
    runs unless a chip or a mutant changed since (then the changed files are graded again)."""
    cache = tmp_path / "cache"
    if CLASS60_CACHE.is_dir():
        shutil.copytree(CLASS60_CACHE, cache)
    planted = make_class(60, tmp_path / "class", ["lab01", "lab05", "lab08"], seed=14,
                         cache=cache, jobs=2)
    graded = collect([tmp_path / "class"])
    assert len(graded) == 180
    write_insight(graded, tmp_path / "page" / "insight.html")
    data = json.loads((tmp_path / "page" / "insight.json").read_text())
    assert [lab["lab"] for lab in data["labs"]] == ["lab01", "lab05", "lab08"]
    _ranking_matches_planted(data, planted)


def _chromium() -> str | None:
    return os.environ.get("MSDA_CHROMIUM") or shutil.which("chromium") or \
        shutil.which("chromium-browser")


def test_page_opens_in_headless_chromium(request, tmp_path):
    """No console error, every chart drawn, the student table sorts."""
    executable = _chromium()
    if executable is None:
        pytest.skip("Chromium is not installed: the insight page was NOT checked in a browser "
                    "(Debian: apt-get install -y chromium; .ci/run installs it as root)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright (requirements-dev.txt) is not installed")
    page_path = request.getfixturevalue("small_class")[0]
    problems = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable,
                                     args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("request", lambda r: problems.append(f"request {r.url}")
                    if not r.url.startswith(("file:", "data:")) else None)
            page.goto(page_path.as_uri())
            charts = page.eval_on_selector_all("figure.chart", """figures => figures.map(f => {
                const svg = f.querySelector('svg');
                if (!svg) return {name: f.dataset.chart, drawn: false};
                const box = svg.getBoundingClientRect();
                return {name: f.dataset.chart, drawn: box.width > 50 && box.height > 50
                        && svg.querySelectorAll('path, rect, use').length > 5};
            })""")
            assert [c["name"] for c in charts] == ["ladder", "lab01-scores", "lab01-tasks"]
            assert all(c["drawn"] for c in charts), charts

            def column(index: int) -> list[str]:
                return page.eval_on_selector_all(
                    "#students-table tbody tr",
                    f"rows => rows.map(r => r.cells[{index}].dataset.sort)")

            page.click("#students-table thead th:nth-child(2)")  # lab01 score, ascending
            shares = [float(x) for x in column(1)]
            assert shares == sorted(shares) and shares[0] < shares[-1]
            page.click("#students-table thead th:nth-child(2)")  # again: descending
            assert [float(x) for x in column(1)] == sorted(shares, reverse=True)
            page.click("#students-table thead th:nth-child(1)")  # names
            names = column(0)
            assert names == sorted(names)
            shot = Path(os.environ.get("MSDA_INSIGHT_SCREENSHOT") or tmp_path / "insight.png")
            page.screenshot(path=str(shot), full_page=False)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        finally:
            browser.close()
    assert problems == []


def test_regrade_workflow_gradebook_writes_the_page_and_a_summary_line(tmp_path):
    """`dispatch gradebook --insight` (the regrade workflow's last job): the page beside the
    gradebook, and a line in the job summary pointing at the run's artifacts."""
    why = FORWARD["truncate"].why
    reports = tmp_path / "reports"
    for student, message in (("c--ada", ""), ("c--bob", f"this is exactly the output of {why}")):
        result = _result("lab05", {"5.1": [("test_x", "failed" if message else "passed",
                                            0 if message else 2, 2, message)]})
        (reports / f"regrade-{student}").mkdir(parents=True)
        (reports / f"regrade-{student}" / "regrade.json").write_text(json.dumps(
            [{"student": student, "lab": "lab05", "commit": "", "note": "",
              "result": result.to_dict()}]))
    summary = tmp_path / "summary.md"
    env = {**os.environ, "LAB": "lab05", "SUBMISSIONS": "c/ada@main c/bob@main", "GPU": "false",
           "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_SERVER_URL": "https://github.com",
           "GITHUB_REPOSITORY": "course/kit", "GITHUB_RUN_ID": "42",
           "PYTHONPATH": str(ROOT / "shared")}
    proc = subprocess.run([sys.executable, "-m", "msda_labs.classroom.dispatch", "gradebook",
                           "--reports", str(reports), "--out", str(tmp_path / "g" / "g.csv"),
                           "--insight", str(tmp_path / "g" / "insight.html")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "g" / "insight.json").read_text())
    assert [(m["label"], m["students"]) for m in data["labs"][0]["mistakes"]] == \
        [(why.split(":")[0], 1)]
    assert "https://github.com/course/kit/actions/runs/42#artifacts" in summary.read_text()
    assert "`insight.html`" in summary.read_text()


def test_batch_regrade_page_beside_the_gradebook(tmp_path, monkeypatch):
    """`regrade --batch` writes insight.html beside the gradebook; a missing library says so and
    never stops the gradebook."""
    from msda_labs.classroom import insight_page as insight
    from msda_labs.classroom.regrade import GradebookRow

    result = _result("lab05", {"5.1": [("test_x", "passed", 2, 2, "")]})
    rows = [GradebookRow("ada", "lab05", 2, 2, "clean", "", result=result),
            GradebookRow("bob", "", "", "", "not graded", "", "no lab05.py")]
    page, line = insight.write_beside_gradebook(rows, tmp_path / "insight.html")
    assert page == tmp_path / "insight.html" and page.is_file() and line.endswith(str(page))
    assert insight.write_beside_gradebook(rows[1:], tmp_path / "none.html")[0] is None

    def missing(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")

    monkeypatch.setattr(insight, "write_insight", missing)
    page, line = insight.write_beside_gradebook(rows, tmp_path / "again.html")
    assert page is None and "matplotlib is not installed" in line


def test_collect_merges_the_workflow_artifacts_of_one_submission(tmp_path):
    """Downloaded regrade artifacts: regrade-<student>/regrade.json (CPU stages) and
    gpu-<student>/gpu.json (GPU stage) are one student's one lab."""
    cpu = _result("lab05", {"5.1": [("test_cpu", "passed", 2, 2, "")]})
    cpu.stages = ["interpret"]
    gpu = _result("lab05", {"5.4": [("test_gpu", "failed", 0, 3, "slow")]})
    gpu.stages = ["gpu"]
    (tmp_path / "regrade-c--ada").mkdir()
    (tmp_path / "regrade-c--ada" / "regrade.json").write_text(json.dumps(
        [{"student": "c--ada", "lab": "lab05", "commit": "", "note": "",
          "result": cpu.to_dict()}]))
    (tmp_path / "gpu-c--ada").mkdir()
    gpu.write_json(tmp_path / "gpu-c--ada" / "gpu.json")
    (graded,) = collect([tmp_path])
    assert graded.student == "c--ada"
    assert (graded.result.score, graded.result.max_score) == (2, 5)
    assert sorted(graded.result.stages) == ["gpu", "interpret"]


def test_side_effects_of_a_named_mistake_are_not_gaps_and_crashes_count(tmp_path):
    """A failure that names nothing after a mistake named upstream (the same submission) is a
    side effect, counted apart, not a feedback gap; a crash whose message names its mistake is
    counted for that mistake; hint links are absolute."""
    why = FORWARD["truncate"].why
    named = f"differ; this is exactly the output of {why}"
    overflow = ("the process running your code was killed by signal 11; this is an overflow of "
                "int32 offsets: the same samples on a small level are right")
    graded = [
        Graded("ann", "lab05", _result("lab05", {
            "5.1": [("test_a", "failed", 0, 2, named)],
            "5.4": [("test_k", "failed", 0, 3, "3 of 8 elements differ")]},
            depends={"5.4": ["5.1"]}), "x"),
        Graded("bob", "lab05", _result("lab05", {
            "5.1": [("test_a", "passed", 2, 2, "")],
            "5.4": [("test_k", "failed", 0, 3, "3 of 8 elements differ")],
            "5.7": [("test_big", "crashed", 0, 3, overflow)]}), "x"),
    ]
    lab = build_insight(graded, today=date(2026, 6, 1), out_dir=tmp_path)["labs"][0]
    assert [(m["label"], m["who"]) for m in lab["mistakes"]] == [
        ("overflow of int32 offsets", ["bob"]), (why.split(":")[0], ["ann"])]
    # bob's kernel failure names nothing and nothing fails upstream of it: a gap; ann's is a
    # side effect of her truncation (the kernel of Task 5.4 calls Task 5.1's function)
    assert [(g["test"], g["who"]) for g in lab["gaps"]] == [("test_k", ["bob"])]
    assert lab["side_effects"] == {"tests": 1, "failures": 1}
    assert all(m["hint"].startswith(("file:///", "https://")) for m in lab["mistakes"])
    url = build_insight(graded, handouts="https://example.org/course",
                        today=date(2026, 6, 1))["labs"][0]["mistakes"][0]["hint"]
    assert url == "https://example.org/course/lab-05-forward-correct/README.md#hints"


def test_reading_a_class_leaves_every_result_as_it_was(tmp_path):
    """The page reads old messages into evidence on a copy: a regrade seals each row with a
    digest of its result, and a page written beside the gradebook must not change it."""
    graded = [Graded("ann", "lab05", _result("lab05", {
        "5.1": [("test_a", "failed", 0, 2, "3 of 8 elements differ")],
        "5.4": [("test_k", "error", 0, 3, "IndexError: out of range (lab05.py, line 12)")]},
        depends={"5.4": ["5.1"]}), "x")]
    before = json.dumps(graded[0].result.to_dict(), sort_keys=True)
    write_insight(graded, tmp_path / "insight.html")
    assert json.dumps(graded[0].result.to_dict(), sort_keys=True) == before
