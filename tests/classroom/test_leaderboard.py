"""The class speed leaderboard (msda_labs.classroom.leaderboard): ranking, reference lines,
unranked trials, hidden names, the CSV, the regrade and workflow options, and the page in
headless Chromium."""

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from msda_labs.classroom import leaderboard
from msda_labs.grading.judge.results import GradeResult

ROOT = Path(__file__).resolve().parents[2]
KEY = "msda_forward on decoder in float16"


def _record(yours, reference=70.0, chip=13.0, status="timed", why="", spread=0.4, **extra):
    times = {"yours": yours, "reference": reference, "chip": chip, **extra}
    return {"key": KEY, "fn": "msda_forward", "case": "decoder", "dtype": "float16",
            "primary": "yours", "status": status, "why": why,
            **({"times_us": times, "spread_us": {"yours": spread}, "device": "NVIDIA H200",
                "method": "judge-clock", "n": 16, "rounds": 9, "verified": 160}
               if status == "timed" else {})}


def _row(student, *records, lab="lab05"):
    result = GradeResult(lab=lab)
    result.speed = list(records)
    return SimpleNamespace(student=student, lab=lab, result=result)


CLASS = [
    _row("ada", _record(20.0, reference=72.0, chip=13.5)),
    _row("bob", _record(14.0, reference=68.0, chip=12.5)),
    _row("cy", _record(55.0, reference=70.0, chip=13.0)),
    _row("dee", _record(None, status="failed",
                        why="SpeedTrialFailed: timed call 2 of round 1: 80 of 80 elements differ")),
    _row("eve"),  # no GPU stage graded: not on the board
    SimpleNamespace(student="fay", lab="lab05", result=None),
]


def test_boards_rank_by_the_judges_time_with_reference_lines():
    (board,) = leaderboard.boards_of(leaderboard.entries_of(CLASS))
    assert (board.lab, board.key, board.device) == ("lab05", KEY, "NVIDIA H200")
    assert [e.student for e in board.ranked] == ["bob", "ada", "cy"]
    assert [e.student for e in board.unranked] == ["dee"]
    assert board.speedup(board.ranked[0]) == pytest.approx(68.0 / 14.0)
    assert board.vs_chip(board.ranked[-1]) == pytest.approx(55.0 / 13.0)
    assert board.lines["reference"] == (70.0, 3) and board.lines["chip"] == (13.0, 3)
    assert "peer" not in board.lines


def test_a_backward_reference_is_its_forward_and_backward_less_its_forward():
    row = _row("gus", _record(30.0, reference=260.0, reference_forward=60.0))
    (board,) = leaderboard.boards_of(leaderboard.entries_of([row]))
    assert board.lines["reference"] == (200.0, 1)
    assert board.speedup(board.ranked[0]) == pytest.approx(200.0 / 30.0)


def test_the_page_orders_students_and_lines_by_time_and_lists_the_unranked():
    boards = leaderboard.boards_of(leaderboard.entries_of(CLASS))
    page = leaderboard.render_html(boards)
    order = [page.index(s) for s in ("the course&#x27;s chip", ">bob<", ">ada<", ">cy<",
                                     "PyTorch reference")]
    assert order == sorted(order)
    assert "Not ranked" in page and "dee: SpeedTrialFailed" in page
    assert "public peer was not timed" in page
    assert "<script" not in page and "http" not in page  # self-contained


def test_hidden_names_never_reach_the_page_but_stay_in_the_csv(tmp_path):
    page, table, line = leaderboard.write_leaderboard(CLASS, tmp_path / "lb.html",
                                                      hide_names=True)
    text = page.read_text()
    for name in ("ada", "bob", "cy", "dee"):
        assert f">{name}<" not in text and f"{name}:" not in text
    assert sorted(text.count(f"student {i}") for i in range(1, 5)) == [1, 1, 1, 1]
    assert "names hidden" in line and "4 timed" not in line and "3 timed" in line
    rows = list(csv.DictReader(table.open()))
    assert [(r["rank"], r["student"], r["status"]) for r in rows] == [
        ("1", "bob", "timed"), ("2", "ada", "timed"), ("3", "cy", "timed"),
        ("", "dee", "failed")]
    assert rows[0]["speedup_over_reference"] == "4.8571" and rows[0]["chip_us"] == "12.500"
    assert set(rows[0]) == set(leaderboard.CSV_COLUMNS)


def test_a_class_without_timed_trials_gets_a_page_that_says_so(tmp_path):
    page, table, _ = leaderboard.write_leaderboard([_row("eve")], tmp_path / "lb.html")
    assert "No speed trial was timed" in page.read_text()
    assert table.read_text().splitlines() == [",".join(leaderboard.CSV_COLUMNS)]


def test_the_speed_records_survive_the_grade_json():
    result = GradeResult(lab="lab05")
    result.speed = [_record(14.0)]
    again = GradeResult.from_dict(result.to_dict())
    assert again.speed == result.speed
    assert "speed" not in GradeResult(lab="lab05").to_dict()  # absent where nothing was timed


def test_the_regrade_options_and_the_workflow_input():
    from msda_labs.classroom import commands, dispatch

    text = (ROOT / ".github" / "workflows" / "regrade.yml").read_text()
    assert "leaderboard:" in text and "--leaderboard gradebook/leaderboard.html" in text
    assert "--hide-names" in text
    for module in (commands, dispatch):
        source = Path(module.__file__).read_text()
        assert '"--leaderboard"' in source and '"--hide-names"' in source


def test_dispatch_gradebook_writes_the_leaderboard(tmp_path, monkeypatch):
    """`dispatch gradebook --leaderboard` (the regrade workflow's last job) writes the page and
    its CSV from the merged results, and says so in the job summary."""
    from msda_labs.classroom import dispatch, regrade

    monkeypatch.setattr(dispatch, "gradebook_rows", lambda *a, **k: [
        SimpleNamespace(student=r.student, lab=r.lab, result=r.result, score=1, max=2,
                        integrity="ok", commit="c", note="", as_csv=lambda: [])
        for r in CLASS[:4]])
    monkeypatch.setattr(regrade, "write_gradebook", lambda rows, path: path)
    monkeypatch.setattr(dispatch, "render_summary", lambda lab, rows, gpu: "summary")
    summary = tmp_path / "summary.md"
    code = dispatch.main(["gradebook", "--lab", "lab05", "--submissions", "octo/lab05-ada@main",
                          "--reports", str(tmp_path), "--out", str(tmp_path / "gb.csv"),
                          "--leaderboard", str(tmp_path / "lb.html"), "--hide-names",
                          "--summary", str(summary)])
    assert code == 0
    assert (tmp_path / "lb.html").is_file() and (tmp_path / "lb.csv").is_file()
    assert "speed leaderboard" in summary.read_text()


def _chromium() -> str | None:
    return os.environ.get("MSDA_CHROMIUM") or shutil.which("chromium") or \
        shutil.which("chromium-browser")


def test_the_page_renders_in_headless_chromium(tmp_path):
    """No console error, no request outside the file, every board drawn with its bars; a
    screenshot is taken (MSDA_LEADERBOARD_SCREENSHOT names where)."""
    executable = _chromium()
    if executable is None:
        pytest.skip("Chromium is not installed: the leaderboard page was NOT checked in a "
                    "browser (Debian: apt-get install -y chromium; .ci/run installs it as root)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright (requirements-dev.txt) is not installed")
    page_path = leaderboard.write_leaderboard(
        CLASS + [_row("hal", _record(11.0), lab="lab06")], tmp_path / "lb.html")[0]
    problems = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable,
                                     args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 800})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("request", lambda r: problems.append(f"request {r.url}")
                    if not r.url.startswith(("file:", "data:")) else None)
            page.goto(page_path.as_uri())
            boards = page.eval_on_selector_all("section", """sections => sections.map(s => ({
                board: s.dataset.board,
                ranks: [...s.querySelectorAll('tr.entry td:first-child')].map(c => c.textContent),
                lines: s.querySelectorAll('tr.line').length,
                bars: [...s.querySelectorAll('td.bar span')].map(b =>
                    b.getBoundingClientRect().width)}))""")
            assert [b["board"] for b in boards] == [f"lab05: {KEY}", f"lab06: {KEY}"]
            assert boards[0]["ranks"] == ["1", "2", "3"] and boards[0]["lines"] == 2
            assert all(width > 0 for b in boards for width in b["bars"])
            widths = boards[0]["bars"]
            assert widths[-1] == max(widths)  # the slowest row (the reference) is the longest
            shot = Path(os.environ.get("MSDA_LEADERBOARD_SCREENSHOT") or tmp_path / "lb.png")
            page.screenshot(path=str(shot), full_page=True)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        finally:
            browser.close()
    assert problems == []


def test_regrade_help_names_the_leaderboard():
    out = subprocess.run([sys.executable, "-m", "msda_labs", "regrade", "--help"],
                         capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "shared")})
    assert out.returncode == 0 and "--leaderboard" in out.stdout and "--hide-names" in out.stdout
