"""The insight page, written: SVG charts (matplotlib), the Jinja2 template, and the JSON, CSV and
per-student Markdown files beside the page. What the page says is computed by
:func:`msda_labs.classroom.insight.build_insight`.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from msda_labs.classroom.insight import (
    OUTCOME_COLOUR,
    OUTCOME_LABEL,
    TASK_OUTCOMES,
    Graded,
    InsightError,
    build_insight,
    safe_name,
)
from msda_labs.errors import KitError
from msda_labs.grading.judge.render import render_markdown

__all__ = ["write_insight", "write_beside_gradebook"]


# ------------------------------------------------------------------------------------ charts

def _svg(figure) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _charts(data: dict) -> dict:
    """SVG charts: per lab the score histogram and the task outcomes, and the ladder."""
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "msda-insight", "font.size": 9})
    charts: dict = {"labs": {}}
    for lab in data["labs"]:
        fig, ax = plt.subplots(figsize=(4.2, 2.4))
        top = lab["max_score"]
        bins = range(0, top + 2, max(1, (top + 1) // 12 or 1))
        ax.hist(lab["scores"], bins=list(bins), color="#1565c0", edgecolor="white")
        ax.set_xlabel(f"score (of {top})")
        ax.set_ylabel("students")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_title(f"{lab['lab']}: score distribution")
        score_svg = _svg(fig)

        tasks = lab["tasks"]
        fig, ax = plt.subplots(figsize=(4.6, 0.5 + 0.38 * len(tasks)))
        names = [f"Task {t['id']}" for t in tasks]
        left = [0.0] * len(tasks)
        for outcome in TASK_OUTCOMES:
            shares = [t[outcome] / lab["students"] for t in tasks]
            ax.barh(names, shares, left=left, color=OUTCOME_COLOUR[outcome],
                    label=OUTCOME_LABEL[outcome])
            left = [a + b for a, b in zip(left, shares)]
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of students")
        ax.legend(ncol=3, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35),
                  frameon=False)
        charts["labs"][lab["lab"]] = {"scores": score_svg, "tasks": _svg(fig)}

    fig, ax = plt.subplots(figsize=(5.2, 2.4))
    ladder = data["ladder"]
    ax.plot([p["lab"] for p in ladder], [100 * p["mean_share"] for p in ladder], marker="o",
            color="#1565c0")
    ax.axhline(100 * data["threshold"], color="#c62828", linestyle="--", linewidth=1,
               label="threshold")
    ax.set_ylim(0, 100)
    ax.set_ylabel("class average (% of points)")
    ax.legend(fontsize=7, frameon=False)
    charts["ladder"] = _svg(fig)
    return charts


# ------------------------------------------------------------------------------------ writing

def _template():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(loader=PackageLoader("msda_labs.classroom", "templates"),
                      autoescape=select_autoescape(["html", "j2"]), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["pct"] = lambda value: f"{100 * value:.0f}%"
    return env.get_template("insight.html.j2")


def write_insight(graded: list[Graded], out: Path | str, **options) -> list[Path]:
    """Write the page ``out`` and, beside it, the JSON, the CSVs and the students' reports.

    Returns the paths written (the page first). ``options``: see :func:`build_insight`.
    """
    from markupsafe import Markup

    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise InsightError(f"--out {out}: give the page's file name, ending in .html")
    out.parent.mkdir(parents=True, exist_ok=True)
    data = build_insight(graded, out_dir=out.parent, **options)
    reports = out.parent / f"{out.stem}-reports"
    lookup = {(g.student, g.lab): g for g in graded}
    for (student, lab), item in lookup.items():
        path = reports / lab / f"{safe_name(student)}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_markdown(item.result))
    charts = _charts(data)
    safe_charts = {"ladder": Markup(charts["ladder"]),
                   "labs": {k: {n: Markup(v) for n, v in c.items()}
                            for k, c in charts["labs"].items()}}
    embedded = [{"anchor": f"report-{lab}-{safe_name(student)}", "student": student,
                 "lab": lab, "text": render_markdown(item.result)}
                for (student, lab), item in sorted(lookup.items(), key=lambda kv: (kv[0][1],
                                                                                   kv[0][0]))]
    page = _template().render(data=data, charts=safe_charts, reports=reports.name,
                              outcomes=TASK_OUTCOMES, outcome_label=OUTCOME_LABEL,
                              outcome_colour=OUTCOME_COLOUR, embedded=embedded)
    out.write_text(page)
    written = [out]
    json_path = out.with_suffix(".json")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    written.append(json_path)
    students_csv = out.parent / f"{out.stem}-students.csv"
    with open(students_csv, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", "lab", "score", "max", "task", "outcome", "stuck"])
        for row in data["table"]:
            stuck = "; ".join(row["stuck"])
            for lab_id, cell in row["labs"].items():
                if cell is None:
                    writer.writerow([row["student"], lab_id, "", "", "", "no report", stuck])
                    continue
                for task, outcome in cell["tasks"].items():
                    writer.writerow([row["student"], lab_id, cell["score"], cell["max"], task,
                                     outcome, stuck])
    written.append(students_csv)
    mistakes_csv = out.parent / f"{out.stem}-mistakes.csv"
    with open(mistakes_csv, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["lab", "rank", "mistake", "students", "share", "tasks", "meaning"])
        for lab in data["labs"]:
            for rank, m in enumerate(lab["mistakes"], 1):
                writer.writerow([lab["lab"], rank, m["label"], m["students"],
                                 f"{m['share']:.3f}", " ".join(m["tasks"]), m["meaning"]])
    written.append(mistakes_csv)
    return written


def write_beside_gradebook(rows: list, page: Path | str,
                           records: dict | None = None) -> tuple[Path | None, str]:
    """The batch regrade's page: ``rows`` are :class:`~msda_labs.classroom.regrade.GradebookRow`
    (those without a result are left out), ``records`` each student's commit of record (a
    regrade at the deadline: their lateness). Returns ``(page or None, a line saying what
    happened)``; a missing library or an unreadable result never stops the gradebook."""
    from msda_labs.classroom.insight import lateness

    records = records or {}
    graded = [Graded(row.student, row.lab, row.result, "", lateness(records.get(row.student)))
              for row in rows if row.result is not None]
    if not graded:
        return None, "insight page: not written (no submission was graded)"
    try:
        write_insight(graded, page)
    except ImportError as exc:
        return None, (f"insight page: not written ({exc.name} is not installed: pip install "
                      f"'msda-labs[insight]', or jinja2 and matplotlib)")
    except (KitError, ValueError, OSError) as exc:
        return None, f"insight page: not written ({exc})"
    return Path(page), f"insight page: {page}"
