"""One student across the labs: their row of every lab's regrade, with the feedback they got.

    python -m msda_labs student LOGIN PATH... [--html OUT]

PATH: what ``insight`` reads (``regrade --json`` lists, grade.json files, or folders of them,
e.g. every lab's regrade output of the term). The student is found by GitHub login, whatever
prefix the regrade gave the name (``lab-05-ada``, ``course--lab-05-ada``). Printed: one line per
lab (score, integrity, lateness), then each lab's report as the student saw it; ``--html``: the
same as one self-contained page, to keep or to send.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from msda_labs.classroom.insight import Graded, _integrity, collect
from msda_labs.course.manifest import student_key
from msda_labs.errors import KitError

__all__ = ["StudentLab", "one_student", "render_text", "write_page"]


@dataclass
class StudentLab:
    lab: str
    name: str               # the name the regrade gave them
    score: float
    max: float
    integrity: str
    late: str
    report: str             # the Markdown report


def one_student(login: str, paths: list[Path | str]) -> list[StudentLab]:
    """Every lab of ``login`` found under ``paths``, by lab id."""
    key = student_key(login)
    if not key:
        raise KitError("give a student's GitHub login")
    found: list[Graded] = [g for g in collect(paths) if student_key(g.student) == key]
    if not found:
        raise KitError(f"no report of {login} under {', '.join(map(str, paths))}")
    from msda_labs.grading.judge.render import render_markdown

    return [StudentLab(g.lab, g.student, g.result.score, g.result.max_score,
                       _integrity(g.result) or "not checked (graded in place)",
                       g.late or "unknown", render_markdown(g.result))
            for g in sorted(found, key=lambda g: g.lab)]


def render_text(login: str, labs: list[StudentLab]) -> str:
    total = sum(x.score for x in labs)
    top = sum(x.max for x in labs)
    lines = [f"{login}: {len(labs)} lab(s), {total:g}/{top:g} points before late policy",
             f"{'lab':<6} {'score':>9}  {'lateness':<28} integrity"]
    for x in labs:
        lines.append(f"{x.lab:<6} {f'{x.score:g}/{x.max:g}':>9}  {x.late:<28} {x.integrity}")
    for x in labs:
        lines += ["", "=" * 100, f"{x.lab} ({x.name})", "=" * 100, x.report.rstrip()]
    return "\n".join(lines) + "\n"


def write_page(login: str, labs: list[StudentLab], out: Path) -> Path:
    """One self-contained page: the table, then each lab's report (nothing loaded from
    elsewhere)."""
    e = html.escape
    rows = "".join(f"<tr><td><a href='#{e(x.lab)}'>{e(x.lab)}</a></td><td>{x.score:g}/"
                   f"{x.max:g}</td><td>{e(x.late)}</td><td>{e(x.integrity)}</td></tr>"
                   for x in labs)
    reports = "".join(f"<h2 id='{e(x.lab)}'>{e(x.lab)} <small>({e(x.name)})</small></h2>"
                      f"<pre>{e(x.report)}</pre>" for x in labs)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{e(login)}: every lab"
            f"</title><style>body{{font-family:system-ui,sans-serif;margin:1.5em}}"
            f"table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.2em .5em}}"
            f"pre{{background:#f7f7f7;padding:.5em;white-space:pre-wrap}}</style></head><body>"
            f"<h1>{e(login)}: every lab</h1><table><tr><th>lab</th><th>score</th>"
            f"<th>lateness</th><th>integrity</th></tr>{rows}</table>{reports}</body></html>\n")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
