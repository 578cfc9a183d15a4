"""The course gradebook: every lab's regrade, with the late policy applied per student.

    python -m msda_labs gradebook REGRADE.json... --format csv|canvas|moodle --out FILE
                                  [--roster roster.csv] [--prefix PREFIX]

The inputs are the ``--json`` lists of ``regrade`` (one per lab, or several labs in one); an
entry regraded at the deadline carries its commit of record with its late days (``record``).
The policy (``course.late_policy`` in classroom.yml) is applied per student across all labs,
in the order of their due dates:

* ``penalty``: each late day costs ``penalty_per_day`` percent of the lab's points;
* ``free_days``: the first ``free_days`` late days of the course cost nothing, whichever labs
  they fall on; every late day after them costs ``penalty_per_day`` percent;
* ``none``: no late work; the commit of record is the last one received by the due date, so
  no entry is late (an entry that says otherwise scores 0, with the reason).

Every row shows its calculation (``calculation``), e.g. ``32/40; 3 late day(s): 2 free (0
left), 1 charged x 10% = 10% off; 28.8/40``. An entry without a commit of record (an ordinary
regrade, not one at the deadline) has no known lateness: its calculation says so, never "on
time".

classroom.yml's per-student extensions (``extensions``, ``extensions_file``) move a student's
due date: their late days are counted again from when GitHub received the commit, against their
own date, and the ``extension`` column says which extension applied and where it is written.
The manual adjustments (``adjustments_file``: student, lab, points, reason) are added after the
late policy, in the ``adjustment`` column; they live in their own file, so every regrade keeps
them. ``similarity`` holds the similarity check's cell of the student's lab (``--similarity``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from msda_labs.course.manifest import LatePolicy
from msda_labs.errors import KitError

__all__ = ["GradesError", "LabEntry", "FinalGrade", "read_entries", "apply_policy",
           "entry_from_row", "apply_extensions", "CSV_COLUMNS"]

CSV_COLUMNS = ("student", "lab", "raw_score", "max", "late_days", "free_days_used",
               "free_days_left", "penalty_percent", "score", "commit", "received_at",
               "calculation", "note", "extension", "adjustment", "similarity")


class GradesError(KitError, ValueError):
    """The regrade lists cannot be read or merged."""


@dataclass
class LabEntry:
    """One student's regrade of one lab, as the ``--json`` list holds it."""

    student: str
    lab: str
    score: float | None         # None: not graded
    max: float | None
    late_days: int = 0
    commit: str = ""
    received_at: str = ""
    note: str = ""
    has_record: bool = False    # regraded at the deadline (else: no late days known)
    warning: str = ""
    extension: str = ""         # the extension applied (audit), "" when none
    adjustment: float | None = None   # points added by hand after the late policy
    adjustment_reason: str = ""
    similarity: str = ""


@dataclass
class FinalGrade:
    entry: LabEntry
    score: float | None
    free_days_used: int = 0
    free_days_left: int | None = None
    penalty_percent: float = 0.0
    calculation: str = ""
    notes: list[str] = field(default_factory=list)

    def cells(self) -> list:
        e = self.entry
        adjustment = "" if e.adjustment is None else (f"{e.adjustment:+g} "
                                                      f"({e.adjustment_reason})")
        return [e.student, e.lab, _num(e.score), _num(e.max),
                e.late_days if e.has_record else "unknown", self.free_days_used,
                "" if self.free_days_left is None else self.free_days_left,
                _num(self.penalty_percent), _num(self.score), e.commit, e.received_at,
                self.calculation, "; ".join(n for n in [e.note, *self.notes] if n),
                e.extension, adjustment, e.similarity]


def _num(value) -> str:
    if value is None or value == "":
        return ""
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def _files(paths: list[Path]) -> list[Path]:
    """The paths, with a folder (the regrade workflow's downloaded artifacts) standing for every
    ``regrade.json`` under it."""
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(path.rglob("regrade.json"))
            if not found:
                raise GradesError(f"{path}: a folder without any regrade.json (the regrade "
                                  f"workflow's regrade-*/regrade.json artifacts)")
            files += found
        else:
            files.append(path)
    return files


def read_entries(paths: list[Path]) -> list[LabEntry]:
    """The entries of ``regrade --json`` lists (or folders of the regrade workflow's
    ``regrade.json`` artifacts); one student and lab may appear once."""
    entries: dict[tuple[str, str], LabEntry] = {}
    for path in _files(paths):
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise GradesError(f"{path}: not a regrade --json list ({exc})") from None
        if not isinstance(data, list) or not all(isinstance(i, dict) for i in data):
            raise GradesError(f"{path}: not a regrade --json list (a JSON list of entries)")
        # A checkout that failed before its lab was known has none: the file's one lab.
        labs = {i.get("lab") or (i.get("result") or {}).get("lab") for i in data} - {None, ""}
        for item in data:
            result = item.get("result") or {}
            record = item.get("record") or {}
            lab = item.get("lab") or result.get("lab") or (next(iter(labs)) if len(labs) == 1
                                                             else "")
            student = item.get("student", "")
            if not student or not lab:
                raise GradesError(f"{path}: an entry without a student or a lab: {item!r:.200}")
            key = (student, lab)
            if key in entries:
                raise GradesError(f"{student} has two regrades of {lab} ({path} and an earlier "
                                  f"file): keep one")
            graded = bool(result) and result.get("score") is not None
            entries[key] = LabEntry(
                student, lab, float(result["score"]) if graded else None,
                float(result["max_score"]) if graded else None,
                late_days=int(record.get("late_days", 0)), commit=item.get("commit", ""),
                received_at=record.get("received_at", ""), note=item.get("note", ""),
                has_record=bool(record), warning=record.get("warning", ""),
                extension=record.get("extension", ""))
    return list(entries.values())


def apply_extensions(entries: list[LabEntry], manifest) -> None:
    """Each entry of a student with an extension (classroom.yml): late days counted again from
    when the commit of record was received, against the student's own due date, and the
    ``extension`` column filled; the manual adjustments of ``adjustments_file`` copied in."""
    from msda_labs.classroom.deadline import late_days, parse_time

    for e in entries:
        adjustment = manifest.adjustment_for(e.student, e.lab)
        if adjustment is not None:
            e.adjustment, e.adjustment_reason = adjustment.points, adjustment.reason
        extension = manifest.extension_for(e.student, e.lab)
        if extension is None:
            continue
        e.extension = extension.describe()
        if e.has_record and e.received_at:
            try:
                received = parse_time(e.received_at)
            except ValueError:
                e.note = "; ".join(n for n in [e.note, f"received_at {e.received_at!r} "
                                               f"unreadable: the extension changed nothing"]
                                   if n)
                continue
            e.late_days = late_days(received, extension.due)
            if received > extension.cutoff:
                e.note = "; ".join(n for n in [e.note, "received after the end of the "
                                               "student's late window"] if n)


def entry_from_row(row, record: dict | None) -> LabEntry:
    """A gradebook row of the regrade workflow (:class:`~msda_labs.classroom.regrade.GradebookRow`)
    with its commit of record from the class plan (``records.json``): its late days count only
    when the commit graded is the commit of record."""
    graded = row.score != "" and row.score is not None
    entry = LabEntry(row.student, row.lab, float(row.score) if graded else None,
                     float(row.max) if graded else None, commit=row.commit or "", note=row.note)
    if not record:
        return entry
    if entry.commit and record.get("sha") and entry.commit != record["sha"]:
        entry.note = "; ".join(n for n in [entry.note, f"graded {entry.commit[:12]}, not the "
                                           f"commit of record {record['sha'][:12]}: no late "
                                           f"days charged"] if n)
        return entry
    entry.late_days = int(record.get("late_days", 0))
    entry.received_at = record.get("received_at", "")
    entry.warning = record.get("warning", "")
    entry.has_record = True
    return entry


def apply_policy(entries: list[LabEntry], policy: LatePolicy,
                 order: list[str]) -> list[FinalGrade]:
    """Each entry's final score under ``policy``; free late days are spent per student in the
    order of ``order`` (lab ids by due date; other labs after them, by id)."""
    rank = {lab: i for i, lab in enumerate(order)}
    by_student: dict[str, list[LabEntry]] = {}
    for e in entries:
        by_student.setdefault(e.student, []).append(e)
    finals = []
    for student in sorted(by_student):
        left = policy.free_days if policy.kind == "free_days" else None
        for e in sorted(by_student[student], key=lambda e: (rank.get(e.lab, len(rank)), e.lab)):
            final = _one(e, policy, left)
            if policy.kind == "free_days":
                left -= final.free_days_used
                final.free_days_left = left
            finals.append(final)
    return finals


def _one(e: LabEntry, policy: LatePolicy, free_left: int | None) -> FinalGrade:
    final = _late(e, policy, free_left)
    if e.adjustment is None:
        return final
    if final.score is None:
        final.notes.append(f"adjustment {e.adjustment:+g} not applied: not graded")
        return final
    final.score = round(max(0.0, final.score + e.adjustment), 2)
    final.calculation += (f"; {e.adjustment:+g} by hand ({e.adjustment_reason}) = "
                          f"{_num(final.score)}/{_num(e.max)}")
    return final


def _late(e: LabEntry, policy: LatePolicy, free_left: int | None) -> FinalGrade:
    if e.score is None:
        return FinalGrade(e, None, calculation="not graded: no score, no late days spent")
    base = f"{_num(e.score)}/{_num(e.max)}"
    notes = [] if e.has_record else ["not regraded at the deadline: no late days known"]
    if e.warning:
        notes.append(e.warning)
    if not e.has_record:
        # an ordinary regrade grades the last commit, whenever it came: never call it on time
        return FinalGrade(e, e.score, notes=notes,
                          calculation=f"{base}; lateness unknown (not regraded at the "
                                      f"deadline), no late policy applied")
    if e.late_days == 0:
        return FinalGrade(e, e.score, calculation=f"{base}; on time", notes=notes)
    days = f"{e.late_days} late day(s)"
    if policy.kind == "none":
        return FinalGrade(e, 0.0, penalty_percent=100.0, notes=notes,
                          calculation=f"{base}; {days}, and the course takes no late work; 0/"
                                      f"{_num(e.max)}")
    free = min(e.late_days, free_left) if policy.kind == "free_days" else 0
    charged = e.late_days - free
    percent = min(100.0, charged * policy.penalty_per_day)
    score = round(e.score * (1 - percent / 100), 2)
    parts = [f"{base}; {days}"]
    if policy.kind == "free_days":
        parts.append(f": {free} free ({free_left - free} left)")
        parts.append(f", {charged} charged" if charged else ", none charged")
    else:
        parts.append(f", {charged} charged")
    if charged:
        parts.append(f" x {policy.penalty_per_day:g}% = {percent:g}% off")
    parts.append(f"; {_num(score)}/{_num(e.max)}")
    return FinalGrade(e, score, free_days_used=free, penalty_percent=percent,
                      calculation="".join(parts), notes=notes)
