"""Grades into the LMS: the course gradebook written as Canvas or Moodle import files, or a CSV.

GitHub logins become LMS identities through a roster CSV the instructor provides: a header row
with ``github`` (the login) and any of ``name``, ``email``, ``id`` (Canvas's user ID),
``sis_user_id``, ``sis_login_id``, ``section``, ``username``, ``idnumber`` (Moodle's ID number).
A graded student missing from the roster, and a roster entry without any regrade (no
repository), are both reported (in ``<out>-problems.csv`` and on the terminal), never dropped:
the plain CSV holds every graded student, and the LMS files hold every roster entry (blank
cells where there is no grade, which both LMSs leave unchanged).

The formats, as the LMSs document them:

* **Canvas** (Gradebook → Import, a CSV): the columns ``Student, ID, SIS User ID, SIS Login ID,
  Section``, then one column per assignment holding the score; a student is found by name, ID
  or SIS User ID, and an assignment column whose name matches no assignment creates one
  (Canvas Instructor Guide, *How do I import grades in the Gradebook?*, summarised with these
  columns in https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/import-csv-file-carmen-grades).
  Name each column like the assignment it fills (``--assignment lab05="Lab 5 (12345)"``: the
  name and ID as Canvas's own export writes them).
  No "Points Possible" row is written under the header: the import requirements listed on the
  page above (a student identity, SIS Login ID, Section, then the assignment columns) name no
  such row, and Canvas's own guide (https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807)
  could not be read from here to say otherwise; the points possible stay those of the
  assignment in Canvas.
* **Moodle** (Grade administration → Import → CSV file): any header row; at the preview the
  instructor maps one identity column to a user field ("Map from" *Email address* to
  ``useremail``, or *ID number* to ``useridnumber``, or a username column to ``username``) and
  each grade column to a grade item (https://docs.moodle.org/311/en/Grade_import; the importer's
  own code maps a user by ``userid``, ``useridnumber``, ``useremail`` or ``username``:
  grade/import/csv/classes/load_data.php, map_user_data_with_value). The file has
  ``First name``, ``Last name``, ``ID number``, ``Email address`` and ``Username`` columns, then
  one score column per lab.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from msda_labs.classroom.grades import CSV_COLUMNS, FinalGrade, _num
from msda_labs.errors import KitError

__all__ = ["LmsError", "RosterEntry", "read_roster", "login_of", "write_lms", "FORMATS",
           "CANVAS_COLUMNS", "MOODLE_COLUMNS"]

FORMATS = ("csv", "canvas", "moodle")
CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_COLUMNS = ("First name", "Last name", "ID number", "Email address", "Username")
_ROSTER_FIELDS = ("github", "name", "email", "id", "sis_user_id", "sis_login_id", "section",
                  "username", "idnumber")


class LmsError(KitError, ValueError):
    """The roster cannot be read, or the format cannot be written from it."""


@dataclass(frozen=True)
class RosterEntry:
    github: str
    name: str = ""
    email: str = ""
    id: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""
    username: str = ""
    idnumber: str = ""

    def names(self) -> tuple[str, str]:
        """(first, last) from ``name`` ("Last, First" or "First Last")."""
        if "," in self.name:
            last, _, first = self.name.partition(",")
            return first.strip(), last.strip()
        first, _, last = self.name.strip().rpartition(" ")
        return (first, last) if first else (last, "")


def read_roster(path: Path) -> list[RosterEntry]:
    """The instructor's roster: one row per student, a ``github`` column and LMS identities."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.DictReader(fh))
            header = [h.strip().lower() for h in (rows[0].keys() if rows else [])]
    except OSError as exc:
        raise LmsError(f"cannot read the roster {path}: {exc.strerror or exc}") from None
    if not rows:
        raise LmsError(f"the roster {path} is empty (a header row, then one row per student)")
    if "github" not in header:
        raise LmsError(f"the roster {path} has no 'github' column (the students' GitHub logins);"
                       f" its columns: {', '.join(header)}")
    unknown = [h for h in header if h not in _ROSTER_FIELDS]
    if unknown:
        raise LmsError(f"the roster {path} has columns this kit does not know: "
                       f"{', '.join(unknown)} (known: {', '.join(_ROSTER_FIELDS)})")
    entries, seen = [], {}
    for number, row in enumerate(rows, start=2):
        cells = {k.strip().lower(): (v or "").strip() for k, v in row.items() if k}
        login = cells.get("github", "")
        if not login:
            raise LmsError(f"{path}, line {number}: no GitHub login in the 'github' column")
        if login.lower() in seen:
            raise LmsError(f"{path}, line {number}: {login} is listed twice (also line "
                           f"{seen[login.lower()]})")
        seen[login.lower()] = number
        entries.append(RosterEntry(**{k: cells.get(k, "") for k in _ROSTER_FIELDS}))
    return entries


def login_of(student: str, prefix: str | None = None) -> str:
    """The GitHub login in a gradebook's student name: ``ada``, ``lab-05-ada`` (with the
    prefix), or the regrade workflow's ``owner--lab-05-ada``."""
    name = student.split("--")[1] if student.count("--") >= 1 else student
    if prefix and name.startswith(prefix):
        name = name[len(prefix):].lstrip("-_") or name
    return name


def _problems(finals: list[FinalGrade], roster: list[RosterEntry] | None,
              prefix: str | None) -> tuple[dict, list[list[str]]]:
    """(login -> roster entry for graded students, problem rows)."""
    problems = []
    matched: dict[str, RosterEntry] = {}
    if roster is None:
        return matched, problems
    by_login = {r.github.lower(): r for r in roster}
    graded_logins = set()
    for final in finals:
        login = login_of(final.entry.student, prefix)
        graded_logins.add(login.lower())
        entry = by_login.get(login.lower())
        if entry is None:
            problems.append(["not in the roster", login, final.entry.lab,
                             f"graded {_num(final.score) or 'not graded'} (regrade name "
                             f"{final.entry.student}): add them to the roster to export"])
        else:
            matched[final.entry.student] = entry
        if final.score is None:
            problems.append(["not graded", login, final.entry.lab,
                             final.entry.note or "the regrade could not grade it: no score "
                                                 "exported (the LMS keeps what it has)"])
    for r in roster:
        if r.github.lower() not in graded_logins:
            problems.append(["no repository", r.github, "",
                             "in the roster, but no regrade of theirs was given: no repository "
                             "for this assignment, or its regrade is missing"])
    return matched, problems


def _columns(labs: list[str], assignments: dict[str, str], titles: dict[str, str]) -> list[str]:
    return [assignments.get(lab) or (f"{lab}: {titles[lab]}" if titles.get(lab) else lab)
            for lab in labs]


def write_lms(finals: list[FinalGrade], fmt: str, out: Path, *,
              roster: list[RosterEntry] | None = None, prefix: str | None = None,
              assignments: dict[str, str] | None = None,
              titles: dict[str, str] | None = None) -> tuple[list[Path], list[list[str]]]:
    """Write ``out`` in ``fmt`` (and ``<out>-problems.csv`` when there are problems). Returns
    the paths written and the problem rows (kind, login, lab, detail)."""
    if fmt not in FORMATS:
        raise LmsError(f"--format {fmt}: one of {', '.join(FORMATS)}")
    if fmt != "csv" and roster is None:
        raise LmsError(f"--format {fmt} needs --roster (a CSV mapping GitHub logins to "
                       f"{'Canvas' if fmt == 'canvas' else 'Moodle'} identities)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    matched, problems = _problems(finals, roster, prefix)
    assignments, titles = assignments or {}, titles or {}
    labs = sorted({f.entry.lab for f in finals})
    with open(out, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        if fmt == "csv":
            writer.writerow([*CSV_COLUMNS, "in_roster"])
            for final in finals:
                known = "" if roster is None else ("yes" if final.entry.student in matched
                                                   else "no")
                writer.writerow([*final.cells(), known])
        else:
            scores: dict[str, dict[str, FinalGrade]] = {}
            for final in finals:
                entry = matched.get(final.entry.student)
                if entry is not None:
                    scores.setdefault(entry.github.lower(), {})[final.entry.lab] = final
            header = CANVAS_COLUMNS if fmt == "canvas" else MOODLE_COLUMNS
            writer.writerow([*header, *_columns(labs, assignments, titles)])
            for r in roster:
                if fmt == "canvas" and not (r.name or r.id or r.sis_user_id):
                    problems.append(["no LMS identity", r.github, "", "Canvas finds a student "
                                     "by name, ID or SIS User ID: the roster gives none"])
                if fmt == "moodle" and not (r.email or r.idnumber or r.username):
                    problems.append(["no LMS identity", r.github, "", "Moodle maps a user by "
                                     "email, ID number or username: the roster gives none"])
                mine = scores.get(r.github.lower(), {})
                cells = [_num(mine[lab].score) if lab in mine else "" for lab in labs]
                if fmt == "canvas":
                    ident = [r.name, r.id, r.sis_user_id, r.sis_login_id, r.section]
                else:
                    ident = [*r.names(), r.idnumber, r.email, r.username]
                writer.writerow([*ident, *cells])
    written = [out]
    if problems:
        report = out.with_name(f"{out.stem}-problems.csv")
        with open(report, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["problem", "github", "lab", "detail"])
            writer.writerows(problems)
        written.append(report)
    return written, problems
