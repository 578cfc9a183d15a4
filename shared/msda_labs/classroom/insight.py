"""What the class is getting wrong: one page built from a class's graded results.

    python -m msda_labs insight PATH... --out report.html [--due labNN=YYYY-MM-DD ...]
                                [--threshold F] [--today YYYY-MM-DD] [--handouts URL]

PATH is a grade.json written by ``grade --json``, the JSON list written by ``regrade --batch
--json``, or a folder holding any of these (a batch regrade's output, the downloaded artifacts of
the regrade workflow, grade.json files in one folder per student). The page is self-contained:
its styles, its sorting script and its charts (SVG drawn by matplotlib) are inside the file, and
it loads nothing from the network. Beside it: ``<name>.json`` (every number on the page),
``<name>-students.csv`` (one row per student, lab and task), ``<name>-mistakes.csv`` and one
Markdown report per student and lab (``<name>-reports/<lab>/<student>.md``). Each report is
also inside the page, where the student table links to it: a page mailed on its own keeps them.
The table shows each submission's integrity (grading files the checkout changed, files beyond
the template) and its lateness (from a regrade at the deadline; "unknown" from any other). The
page itself is written by :mod:`.insight_page`.

A *named mistake* is a failure whose message says which known mistake the output matched: a sentence
of the mistake catalogues (:mod:`msda_labs.mistakes`), or the grader's "this is exactly the output
of ..." and "this is a/an ...: ..." phrases (:mod:`msda_labs.grading.judge.diagnosis`, which the
reports use too). A crash or a timeout counts for the mistake its message names: the grader names
one only with evidence (the int64-offset tests, for one, run the same samples on a small level, and
a crash that only the size causes is an overflow of int32 offsets). A failing test that names none
is a *feedback gap*, the student learns that it failed, not why; unless a mistake named upstream in
the same submission may be behind it (:func:`diagnose`): such side effects are counted apart, not
listed as gaps.

Hint links are absolute: the ``--handouts`` URL, else the handout's ``file://`` address on this
machine (a page mailed to others needs ``--handouts``).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from msda_labs.errors import KitError
from msda_labs.grading.judge.dependencies import lab_dependencies
from msda_labs.grading.judge.diagnosis import diagnose
from msda_labs.grading.judge.prose import catalogue_sentences, named_mistakes, read_old_messages
from msda_labs.grading.judge.results import GradeResult, Status

__all__ = ["InsightError", "Graded", "collect", "parse_due", "named_mistakes", "build_insight",
           "safe_name", "TASK_OUTCOMES", "OUTCOME_LABEL", "OUTCOME_COLOUR"]

# A task's outcome for one student, in the order the page shows them.
TASK_OUTCOMES = ("passed", "failed", "not_attempted", "crashed", "timeout")
OUTCOME_LABEL = {"passed": "passed", "failed": "failed", "not_attempted": "not attempted",
                  "crashed": "crashed", "timeout": "timed out"}
OUTCOME_COLOUR = {"passed": "#2e7d32", "failed": "#c62828", "not_attempted": "#9e9e9e",
                   "crashed": "#6a1b9a", "timeout": "#ef6c00"}
_REPORT_FILES = ("grade.json", "regrade.json", "gpu.json")


class InsightError(KitError, ValueError):
    """The reports cannot be read, or an option is malformed; the message says which."""


@dataclass
class Graded:
    """One student's graded result of one lab, and the file it came from."""

    student: str
    lab: str
    result: GradeResult
    source: str
    late: str = ""      # "on time", "N day(s) late", "nothing received..."; "" when unknown


# ---------------------------------------------------------------------------------- reading

def _student_of(path: Path) -> str:
    """A report's student: its folder for grade.json (and the regrade workflow's artifacts
    ``regrade-<student>/``, ``gpu-<student>/``), else the file's name."""
    if path.name not in _REPORT_FILES:
        return path.stem
    folder = path.parent.name
    for prefix in ("regrade-", "gpu-"):
        if folder.startswith(prefix) and len(folder) > len(prefix):
            return folder[len(prefix):]
    return folder


def _from_json(path: Path) -> list[Graded]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InsightError(f"{path}: not readable JSON ({exc})") from None
    try:
        if isinstance(data, list):  # regrade --batch --json: [{student, lab, result}, ...]
            return [Graded(str(entry["student"]), str(entry.get("lab") or entry["result"]["lab"]),
                           GradeResult.from_dict(entry["result"]), str(path),
                           lateness(entry.get("record")))
                    for entry in data if isinstance(entry, dict) and entry.get("result")]
        if isinstance(data, dict) and "exercises" in data and "lab" in data:
            result = GradeResult.from_dict(data)
            return [Graded(_student_of(path), result.lab, result, str(path))]
    except (KeyError, TypeError, ValueError) as exc:
        raise InsightError(f"{path}: a grade report with a bad entry ({type(exc).__name__}: "
                           f"{exc})") from None
    return []


def lateness(record: dict | None) -> str:
    """A commit of record (a regrade at the deadline) in words; "" without one (unknown)."""
    if not isinstance(record, dict) or not record.get("sha"):
        return ""
    days = int(record.get("late_days") or 0)
    text = f"{days} day(s) late" if days else "on time"
    if record.get("extension"):
        text += " (with an extension)"
    if record.get("server_time") is False:
        text += " (by commit dates)"
    return text


def collect(paths: list[Path | str]) -> list[Graded]:
    """Every graded result under ``paths`` (files, or folders searched recursively).

    A folder's hidden entries (``.cache``, ``.git``) are skipped, and so are its JSON files
    that are not grade reports (a schema, a ``planted.json``); a file named on the command line
    must be one. When a student's lab is
    found twice, reports of different stages (the workflow's ``regrade-<student>/regrade.json``
    and ``gpu-<student>/gpu.json``) are merged; otherwise (a regrade.json and the merged report
    of the same submission) the report with more tests wins.
    """
    found: dict[tuple[str, str], Graded] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            graded = _from_json(path)
            if not graded:
                raise InsightError(f"{path} is not a grade report: expected a grade.json from "
                                   f"`grade --json` or the list from `regrade --batch --json`")
        elif path.is_dir():
            graded = []
            for file in sorted(path.rglob("*.json")):
                if any(part.startswith(".") for part in file.relative_to(path).parts):
                    continue  # hidden folders: caches, .git
                try:
                    graded += _from_json(file)
                except InsightError:
                    continue
        else:
            raise InsightError(f"{path} does not exist (give grade reports or folders of them)")
        for item in graded:
            key = (item.student, item.lab)
            known = found.get(key)
            if known is None:
                found[key] = item
            elif not set(item.result.stages) & set(known.result.stages) and \
                    item.result.stages and known.result.stages:
                known.result.merge(item.result)  # the CPU stages and the GPU stage, apart
            elif len(list(item.result.tests())) > len(list(known.result.tests())):
                found[key] = item
    if not found:
        raise InsightError(f"no grade reports found in {', '.join(map(str, paths))}")
    return sorted(found.values(), key=lambda g: (g.lab, g.student))


def manifest_due() -> dict[str, date]:
    """Each lab's due day from classroom.yml (``labs[].due``, in its own timezone); {} when there
    is no manifest here."""
    from msda_labs.course.manifest import find_manifest, load_manifest

    try:
        manifest = load_manifest(find_manifest())
    except KitError:
        return {}
    return {lab.id: lab.due.date() for lab in manifest.labs if lab.due is not None}


def parse_due(items: list[str] | None) -> dict[str, date]:
    """``["lab05=2026-11-20", ...]`` as ``{"lab05": date(2026, 11, 20)}``."""
    due = {}
    for item in items or ():
        lab, sep, day = item.partition("=")
        if not sep or not re.fullmatch(r"lab[0-9]{2}", lab.strip()):
            raise InsightError(f"--due {item!r}: write labNN=YYYY-MM-DD, e.g. lab05=2026-11-20")
        try:
            due[lab.strip()] = date.fromisoformat(day.strip())
        except ValueError:
            raise InsightError(f"--due {item!r}: {day!r} is not a date YYYY-MM-DD") from None
    return due


# ------------------------------------------------------------------------------ named mistakes

def _catalogue_sentences() -> list[tuple[str, str, str]]:
    """``(key, label, sentence)`` of every mistake catalogue (empty without torch)."""
    return list(catalogue_sentences())


# -------------------------------------------------------------------------------- the numbers

def _task_outcome(statuses: set[Status]) -> str:
    if statuses == {Status.PASSED}:
        return "passed"
    if statuses == {Status.NOT_ATTEMPTED}:
        return "not_attempted"
    if Status.TIMEOUT in statuses:
        return "timeout"
    if statuses & {Status.CRASHED, Status.ERROR}:
        return "crashed"
    return "failed"


def _lab_meta(lab_id: str) -> tuple[str, str]:
    """(title, handout folder) from the course manifest, when one is found."""
    try:
        from msda_labs.course.manifest import find_manifest, load_manifest

        lab = load_manifest(find_manifest()).lab(lab_id)
        return lab.title, lab.folder
    except (KitError, OSError):
        return "", ""


def _hint_link(handouts: str | None, folder: str, out_dir: Path) -> str:
    """An absolute link to a lab's hints: under ``handouts`` (a URL), else the kit's handout on
    this machine as a ``file://`` address; a page that travels needs ``--handouts``."""
    if not folder:
        return ""
    if handouts:
        return f"{handouts.rstrip('/')}/{folder}/README.md#hints"
    try:
        from msda_labs.course.manifest import find_manifest

        readme = find_manifest().parent / folder / "README.md"
    except (KitError, OSError):
        return ""
    return readme.resolve().as_uri() + "#hints"


def build_insight(graded: list[Graded], *, due: dict[str, date] | None = None,
                  threshold: float = 0.5, today: date | None = None,
                  handouts: str | None = None, out_dir: Path = Path(".")) -> dict:
    """Everything the page shows, as plain data (also written as the JSON beside it).

    Args:
        graded: the class's results (:func:`collect`).
        due: labs due by a date; a student with no attempt at a lab due on or before ``today``
            is stuck. None: the due dates classroom.yml gives the labs graded here
            (:func:`manifest_due`; a regrade of one lab never calls a student stuck on another).
        threshold: a student below this share of a lab's points is stuck too (0..1).
        today: the day the report is about (default: today).
        handouts: a base URL of the lab folders, for the hint links (default: the kit's
            handouts on this machine, as ``file://`` addresses).
        out_dir: the page's folder.
    """
    if not 0 <= threshold <= 1:
        raise InsightError(f"--threshold {threshold}: give a share of the points between 0 and 1")
    today = today or date.today()
    catalogue = _catalogue_sentences()
    by_lab: dict[str, list[Graded]] = {}
    for item in graded:
        by_lab.setdefault(item.lab, []).append(item)
    if due is None:
        due = {lab: day for lab, day in manifest_due().items() if lab in by_lab}
    labs = [_lab_summary(lab_id, by_lab[lab_id], catalogue,
                         _hint_link(handouts, _lab_meta(lab_id)[1], out_dir), due.get(lab_id))
            for lab_id in sorted(by_lab)]
    lookup = {(g.student, g.lab): g for g in graded}
    table = [_student_row(student, labs, lookup, due, today, threshold)
             for student in sorted({g.student for g in graded})]
    stuck = [{"student": row["student"], "reasons": row["stuck"]} for row in table if row["stuck"]]
    flags = [{"student": row["student"], "lab": lab_id, "integrity": cell["integrity"],
              "anchor": cell["anchor"]}
             for row in table for lab_id, cell in row["labs"].items()
             if cell and cell["integrity"] not in ("", "clean")]
    return {"today": today.isoformat(), "threshold": threshold, "students": len(table),
            "integrity_flags": flags,
            "labs": labs, "ladder": [{"lab": lab["lab"], "mean_share": lab["mean_share"]}
                                     for lab in labs],
            "stuck": stuck, "table": table}


def _tally_submission(item: Graded, catalogue, hint: str, tasks: dict, mistakes: dict,
                      gaps: dict, side: dict) -> None:
    """Add one student's result to a lab's task outcomes, named mistakes (crashes and timeouts
    included, where their message names one), feedback gaps, and the failures that name nothing
    behind a mistake named upstream (``side``: not gaps)."""
    result = read_old_messages(item.result, catalogue)
    if not result.depends:  # grade.json of an earlier kit: the order read from the lab's chip
        result.depends = lab_dependencies(result.lab, {ex.id: ex.name for ex in result.exercises})
    diagnosis = diagnose(result)
    named_tasks = {c.task for c in diagnosis.causes}
    for ex in result.exercises:
        task = tasks.setdefault(ex.id, {"id": ex.id, "name": ex.name,
                                        **{o: 0 for o in TASK_OUTCOMES}})
        task[_task_outcome({t.status for t in ex.tests})] += 1
        for test in ex.tests:
            if test.status.passed or test.status is Status.NOT_ATTEMPTED:
                continue
            finding = diagnosis.of(ex, test)
            raised = bool(test.evidence.error and test.evidence.line)  # an exception, no mistake
            names = finding.names if finding is not None and not raised else []
            for label, meaning in names:
                entry = mistakes.setdefault(label, {
                    "label": label, "meaning": meaning, "students": set(), "tasks": set(),
                    "hint": hint})
                entry["students"].add(item.student)
                entry["tasks"].add(ex.id)
            if names or test.status is not Status.FAILED:
                continue
            if finding is not None and (finding.after or finding.upstream
                                        or ex.id in named_tasks):  # a named mistake explains it
                side.setdefault(test.name, set()).add(item.student)
                continue
            gap = gaps.setdefault(test.name, {"test": test.name, "task": ex.id,
                                              "students": set(), "example": test.message[:300]})
            gap["students"].add(item.student)


def _lab_summary(lab_id: str, items: list[Graded], catalogue, hint: str,
                 due_day: date | None) -> dict:
    """One lab's part of the page: scores, task outcomes, ranked mistakes, gaps, timing."""
    title = _lab_meta(lab_id)[0] or items[0].result.title
    max_score = max(g.result.max_score for g in items)
    tasks: dict[str, dict] = {}
    mistakes: dict[str, dict] = {}
    gaps: dict[str, dict] = {}
    side: dict[str, set] = {}
    for item in items:
        _tally_submission(item, catalogue, hint, tasks, mistakes, gaps, side)
    durations = [sum(t.duration for _, t in item.result.tests()) for item in items]
    n = len(items)
    ranked = sorted(mistakes.values(), key=lambda m: (-len(m["students"]), m["label"]))
    gap_list = sorted(gaps.values(), key=lambda g: (-len(g["students"]), g["test"]))
    scores = [g.result.score for g in items]
    return {
        "lab": lab_id, "title": title, "students": n, "max_score": max_score,
        "mean_share": statistics.fmean(s / max_score for s in scores) if max_score else 0.0,
        "median_score": statistics.median(scores), "scores": scores,
        "tasks": [tasks[k] for k in sorted(tasks, key=_task_key)],
        "mistakes": [{"label": m["label"], "meaning": m["meaning"],
                      "students": len(m["students"]), "share": len(m["students"]) / n,
                      "tasks": sorted(m["tasks"], key=_task_key), "hint": m["hint"],
                      "who": sorted(m["students"])}
                     for m in ranked],
        "gaps": [{"test": g["test"], "task": g["task"], "students": len(g["students"]),
                  "share": len(g["students"]) / n, "example": g["example"],
                  "who": sorted(g["students"])}
                 for g in gap_list[:10]],
        # failures that name nothing, of students with a mistake named upstream: not gaps
        "side_effects": {"tests": len(side), "failures": sum(len(w) for w in side.values())},
        "grading_seconds": {"total": sum(durations), "median": statistics.median(durations),
                            "max": max(durations)},
        "due": due_day.isoformat() if due_day else "",
    }


def _student_row(student: str, labs: list[dict], lookup: dict, due: dict[str, date],
                 today: date, threshold: float) -> dict:
    """One row of the students' table, with the reasons the student counts as stuck."""
    row = {"student": student, "labs": {}, "stuck": []}
    for lab in labs:
        item = lookup.get((student, lab["lab"]))
        if item is None:
            row["labs"][lab["lab"]] = None
            continue
        share = item.result.score / item.result.max_score if item.result.max_score else 0.0
        attempted = any(t.status is not Status.NOT_ATTEMPTED for _, t in item.result.tests())
        row["labs"][lab["lab"]] = {
            "score": item.result.score, "max": item.result.max_score, "share": share,
            "attempted": attempted,
            "tasks": {ex.id: _task_outcome({t.status for t in ex.tests})
                      for ex in item.result.exercises},
            "report": f"{lab['lab']}/{safe_name(student)}.md",
            "anchor": f"report-{lab['lab']}-{safe_name(student)}",
            "integrity": _integrity(item.result), "late": item.late or "unknown"}
    for lab_id, day in sorted(due.items()):
        cell = row["labs"].get(lab_id)
        if day <= today and (cell is None or not cell["attempted"]):
            row["stuck"].append(f"{lab_id} not attempted (due {day.isoformat()})")
    for lab in labs:
        cell = row["labs"][lab["lab"]]
        if cell and cell["attempted"] and cell["share"] < threshold:
            row["stuck"].append(f"{lab['lab']} at {cell['share']:.0%} (below {threshold:.0%})")
    return row


def _integrity(result: GradeResult) -> str:
    """The integrity of a regrade in words ("clean", "modified: ...", "added: ..."); "" for a
    result graded in place (no regrade: nothing was compared)."""
    from msda_labs.grading.judge import integrity

    info = result.integrity or {}
    if not info.get("checked"):
        return ""
    if info.get("modified") and not info.get("tampered"):
        info = {**info, "tampered": info["modified"]}
    return integrity.summary(info)


def _task_key(task_id: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"[.\s]", task_id)]


def safe_name(name: str) -> str:
    """A student's name as a file name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "student"
