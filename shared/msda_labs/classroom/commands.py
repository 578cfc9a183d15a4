"""The classroom subcommands of ``python -m msda_labs``: export, regrade, report, insight, progress.

    python -m msda_labs export LAB|all --out DIR [--git] [--force] [--reporter-action A@SHA]
    python -m msda_labs export LAB --gradescope OUT.zip [--gradescope-seed-file F]
                         Gradescope autograder zip (with the secret seed: hidden cases)
    python -m msda_labs export LAB --classroom50 REPO --classroom NAME [--assignment A]
                         Classroom 50 autograder: REPO/NAME/autograders/A/autograder.py
    python -m msda_labs regrade PATH [--lab LAB] [--seed-file F] [--json OUT] [--gpu]
    python -m msda_labs regrade FOLDER --gradebook gradebook.csv [--prefix PREFIX]
                         (and insight.html beside it: `insight` below; --no-insight: not;
                         --similarity: similarity.html too, `similarity` below)
    python -m msda_labs regrade CLONES --at-deadline [--github] --json lab05.json
                         each clone at its commit of record for the lab's due date
    python -m msda_labs class plan|regrade --org ORG --prefix lab-05- --lab lab05 [--out DIR]
                         a whole class: list, resolve to commits of record, dispatch or regrade
    python -m msda_labs gradebook lab*.json --format csv|canvas|moodle --out F [--roster R]
                         [--similarity similarity.json]
                         the course gradebook: late policy across labs, extensions, manual
                         adjustments (classroom.yml), LMS import files
    python -m msda_labs report grade.json --format FORMAT [--out FILE] [--github-output KEY]
    python -m msda_labs report --runners ID[,ID]               the grading reporter, in a workflow
    python -m msda_labs insight PATH... --out report.html [--due labNN=YYYY-MM-DD] [--threshold F]
                         what the class is getting wrong: one self-contained page (+ CSV, JSON)
    python -m msda_labs progress [LAB ...] [--html PATH] [--refresh]
                         one learner's ladder: score, status, next task of every lab (cached)
    python -m msda_labs student LOGIN PATH... [--html OUT]
                         one student across the labs: every lab's row, with the feedback
    python -m msda_labs validate [classroom.yml]
                         check the manifest: schema, dates, extensions, adjustments
    python -m msda_labs similarity FOLDER [--lab LAB] [--out similarity.html] [--threshold F]
                         pairs of submissions sharing too much, and copies of the kit's code
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from msda_labs.classroom.platforms import FORMATS
from msda_labs.classroom.workflows import write_step_outputs
from msda_labs.errors import KitError

__all__ = ["register"]


# ---------------------------------------------------------------------------------------- export

def _cmd_export(ns) -> int:
    from msda_labs.classroom.export import write_exports

    if not (ns.out or ns.gradescope or ns.classroom50):
        raise KitError("export: say where to: --out DIR (template repositories), "
                       "--gradescope PATH and/or --classroom50 DIR")
    try:
        for line in write_exports(ns.labs, out=ns.out, gradescope=ns.gradescope,
                                  classroom50=ns.classroom50, classroom=ns.classroom,
                                  assignment=ns.assignment, reporter_action=ns.reporter_action,
                                  git=ns.git, force=ns.force,
                                  seed_file=ns.gradescope_seed_file):
            print(line)
    except ValueError as exc:  # e.g. a template placeholder left unfilled
        raise KitError(str(exc)) from None
    return 0


# --------------------------------------------------------------------------------------- regrade

def _cmd_regrade(ns) -> int:
    from msda_labs.classroom.regrade import (
        RegradeError,
        is_checkout,
        journal_path,
        regrade_batch,
        regrade_checkout,
        rows_json,
        verify_outputs,
        write_gradebook,
    )
    from msda_labs.grading.judge.render import render_markdown, render_terminal

    path = Path(ns.path)
    if not path.is_dir():
        raise KitError(f"{path} is not a folder (a student's checkout, or a folder of them)")
    options = dict(seed=ns.seed, seed_file=ns.seed_file, gpu=ns.gpu, timeout=ns.timeout)
    pristine = Path(ns.pristine) if ns.pristine else None
    batch = ns.batch or ns.gradebook or not is_checkout(path)
    if ns.gpu:
        _check_gpu_labs(path, ns.lab, batch)
    if ns.at_deadline:
        return _regrade_at_deadline(ns, path, pristine, options)
    if ns.github:
        raise KitError("--github goes with --at-deadline (server times of each push)")
    try:
        if not batch:
            result = regrade_checkout(path, pristine=pristine, lab_id=ns.lab, **options)
            print(render_terminal(result))
            if ns.json:
                result.write_json(ns.json)
            if ns.markdown:
                Path(ns.markdown).write_text(render_markdown(result))
            return 0

        def progress(row):
            score = f"{row.score}/{row.max}" if row.score != "" else "not graded"
            print(f"{row.student:<30} {row.lab:<6} {score:>9}  {row.integrity}"
                  + (f"  ({row.note})" if row.note else ""))

        # A refused seed raises before anything is graded or written (the gradebook stays).
        journal = journal_path(Path(ns.gradebook or "gradebook.csv"))
        rows = regrade_batch(path, lab=ns.lab, prefix=ns.prefix, pristine=pristine,
                             progress=progress, jobs=ns.jobs, student_limit=ns.student_limit,
                             journal=journal, **options)
    except RegradeError as exc:
        raise KitError(str(exc)) from None
    if not rows:
        raise KitError(f"{path} holds no checkouts (sub-folders with a labNN.py)")
    gradebook = write_gradebook(rows, Path(ns.gradebook or "gradebook.csv"))
    ungraded = [row.student for row in rows if row.score == ""]
    print(f"gradebook: {gradebook} ({len(rows)} rows; each kept in {journal} as it was done: "
          f"a run stopped midway resumes from it)")
    if not ns.no_insight:
        from msda_labs.classroom.insight_page import write_beside_gradebook

        print(write_beside_gradebook(rows, gradebook.parent / "insight.html")[1])
    if ns.leaderboard:
        from msda_labs.classroom.leaderboard import write_leaderboard

        print(write_leaderboard(rows, gradebook.parent / "leaderboard.html",
                                hide_names=ns.hide_names)[2])
    if ns.json:
        Path(ns.json).write_text(json.dumps(rows_json(rows), indent=2) + "\n")
    # Every row was sealed when the judge wrote it: the files must still say the same.
    problems = verify_outputs(rows, gradebook, Path(ns.json) if ns.json else None)
    if problems:
        raise KitError("the regrade's outputs were altered after the judge wrote them:\n  "
                       + "\n  ".join(problems))
    if ns.similarity:
        _similarity_beside(path, gradebook, ns, pristine)
    if ungraded:
        print(f"NOT GRADED: {len(ungraded)} of {len(rows)} student(s): "
              f"{', '.join(ungraded[:10])}" + (" ..." if len(ungraded) > 10 else ""),
              file=sys.stderr)
        return 1
    return 0


def _similarity_beside(folder: Path, gradebook: Path, ns, pristine) -> None:
    """``regrade --similarity``: the class's similarity page (and its CSV and JSON, the
    gradebook's similarity column) beside the gradebook."""
    from msda_labs.classroom.similarity import compare_class, write_similarity

    report = compare_class(folder, lab=ns.lab, prefix=ns.prefix, pristine=pristine)
    _print_similarity(report, write_similarity(report, gradebook.parent / "similarity.html"))


def _check_gpu_labs(path: Path, lab: str | None, batch: bool) -> None:
    """``regrade --gpu`` stops before grading anyone when a lab it would grade has no GPU stage
    (classroom.yml): the instructor's words, not a student's nox session."""
    from msda_labs.classroom.regrade import RegradeError, detect_lab

    folders = [p for p in sorted(path.iterdir()) if p.is_dir() and not p.name.startswith(".")] \
        if batch else [path]
    labs = set()
    for folder in folders:
        try:
            labs.add(detect_lab(folder, lab))
        except RegradeError:
            continue  # its row will say why
    manifest = _manifest()
    without = sorted(lab_id for lab_id in labs if not manifest.lab(lab_id).has_gpu)
    if without:
        stages = {lab_id: ", ".join(s.name for s in manifest.lab(lab_id).stages)
                  for lab_id in without}
        raise KitError("regrade --gpu: " + "; ".join(
            f"{lab_id} has no GPU stage in classroom.yml (its stages: {stages[lab_id]})"
            for lab_id in without) + ". Regrade without --gpu: the CPU stages are the whole "
            "grade of such a lab.")


def _progress(row) -> None:
    score = f"{row.score}/{row.max}" if row.score != "" else "not graded"
    print(f"{row.student:<30} {row.lab:<6} {score:>9}  {row.integrity}"
          + (f"  ({row.note})" if row.note else ""))


def _write_rows(pairs, gradebook: Path, json_path: str | None, insight: bool) -> None:
    from msda_labs.classroom.record import rows_json
    from msda_labs.classroom.regrade import verify_outputs, write_gradebook

    rows = [row for row, _ in pairs]
    write_gradebook(rows, gradebook)
    print(f"gradebook: {gradebook} ({len(rows)} rows)")
    if insight:
        from msda_labs.classroom.insight_page import write_beside_gradebook

        print(write_beside_gradebook(rows, gradebook.parent / "insight.html",
                                     {row.student: record for row, record in pairs})[1])
    if json_path:
        Path(json_path).write_text(json.dumps(rows_json(pairs), indent=2) + "\n")
    problems = verify_outputs(rows, gradebook, Path(json_path) if json_path else None)
    if problems:
        raise KitError("the regrade's outputs were altered after the judge wrote them:\n  "
                       + "\n  ".join(problems))
    fallback = [row.student for row, record in pairs
                if record and not record.get("server_time")]
    if fallback:
        print(f"WARNING: {len(fallback)} commit(s) of record chosen by commit dates, which "
              f"students can set (no server time): {', '.join(fallback[:10])}"
              + (" ..." if len(fallback) > 10 else ""), file=sys.stderr)


def _client():
    from msda_labs.classroom.github import GitHub

    client = GitHub()
    if not client.token:
        raise KitError("GitHub's API needs a token that can read the students' repositories "
                       "(Contents, Metadata and Actions: read): export GH_TOKEN=...")
    return client


def _regrade_at_deadline(ns, path: Path, pristine, options) -> int:
    from msda_labs.classroom.record import regrade_folder_at_deadline
    from msda_labs.classroom.regrade import RegradeError, check_secret

    try:  # a refused seed: before any clone is read or any file written
        check_secret(options.get("seed"), options.get("seed_file"))
    except RegradeError as exc:
        raise KitError(str(exc)) from None
    if ns.lab:
        _class_lab(ns.lab)  # no due date: stop before any clone is read
    client = _client() if ns.github else None
    try:
        pairs = regrade_folder_at_deadline(path, lab=ns.lab, prefix=ns.prefix, pristine=pristine,
                                           client=client, progress=_progress, **options)
    except RegradeError as exc:
        raise KitError(str(exc)) from None
    if not pairs:
        raise KitError(f"{path} holds no clones")
    _write_rows(pairs, Path(ns.gradebook or "gradebook.csv"), ns.json, not ns.no_insight)
    return 0


# ----------------------------------------------------------------------------------------- class

def _manifest(path: str | None = None):
    from msda_labs.course.manifest import find_manifest, load_manifest

    return load_manifest(Path(path) if path else find_manifest())


def _class_lab(lab_id: str):
    lab = _manifest().lab(lab_id)
    if lab.due is None:
        raise KitError(f"{lab.id} has no due date in classroom.yml (labs[].due): set one to "
                       f"pick each student's commit of record")
    return lab


def _cmd_class(ns) -> int:
    lab = _class_lab(ns.lab)
    client = _client()
    if ns.action == "plan":
        from msda_labs.classroom.classwide import resolve_class, write_plan

        def progress(item):
            status = item.record.note() if item.record is not None else item.error
            print(f"{item.repo.full_name:<45} {status}")

        manifest = _manifest()

        def deadline_of(student):
            extension = manifest.extension_for(student, lab.id)
            return (extension.due, extension.cutoff) if extension is not None else None

        resolved = resolve_class(client, ns.org, ns.prefix, lab.due, lab.cutoff,
                                 progress=progress, deadline_of=deadline_of)
        summary = write_plan(resolved, lab.id, Path(ns.out), size=ns.size, gpu=ns.gpu)
        print(f"{summary['listed']} repositories listed, {summary['planned']} planned in "
              f"{len(summary['dispatches'])} dispatch(es) of {summary['dispatches']}, "
              f"{summary['unresolved']} unresolved ({ns.out}/unresolved.csv); "
              f"{client.calls} API calls."
              + ("" if ns.dispatch else f" Run: sh {ns.out}/dispatch.sh"))
        if ns.dispatch:
            import subprocess

            proc = subprocess.run(["sh", "dispatch.sh"], cwd=ns.out)
            if proc.returncode != 0:
                raise KitError(f"{ns.out}/dispatch.sh stopped (exit {proc.returncode}): the "
                               f"runs it started are queued; see `gh run list -w regrade.yml`")
            print(f"dispatched {len(summary['dispatches'])} run(s) of the regrade workflow")
        return 0
    from msda_labs.classroom.record import regrade_class

    options = dict(seed=ns.seed, seed_file=ns.seed_file, timeout=ns.timeout)
    pairs = regrade_class(client, ns.org, ns.prefix, lab.id, progress=_progress, lab_info=lab,
                          pristine=Path(ns.pristine) if ns.pristine else None, **options)
    if not pairs:
        raise KitError(f"no repository of {ns.org} starts with {ns.prefix!r}")
    _write_rows(pairs, Path(ns.gradebook), ns.json, not ns.no_insight)
    return 0


# ------------------------------------------------------------------------------------- gradebook

def _assignments(items: list[str] | None) -> dict[str, str]:
    names = {}
    for item in items or []:
        lab, sep, name = item.partition("=")
        if not sep or not lab.strip() or not name.strip():
            raise KitError(f"--assignment {item!r}: write labNN=NAME, e.g. "
                           f"lab05=\"Lab 5 (12345)\"")
        names[lab.strip()] = name.strip()
    return names


def _cmd_gradebook(ns) -> int:
    from msda_labs.classroom.grades import apply_extensions, apply_policy, read_entries
    from msda_labs.classroom.lms import read_roster, write_lms
    from msda_labs.course.manifest import find_manifest, load_manifest

    manifest = load_manifest(Path(ns.manifest) if ns.manifest else find_manifest())
    entries = read_entries([Path(p) for p in ns.inputs])
    if ns.records:
        _merge_records(entries, [Path(p) for p in ns.records])
    apply_extensions(entries, manifest)
    if ns.similarity:
        from msda_labs.classroom.similarity import read_similarity_column

        cells = read_similarity_column([Path(p) for p in ns.similarity])
        for entry in entries:
            entry.similarity = cells.get((entry.student, entry.lab), "")
    order = [lab.id for lab in sorted((lab for lab in manifest.labs if lab.due is not None),
                                      key=lambda lab: (lab.due, lab.id))]
    finals = apply_policy(entries, manifest.late_policy, order)
    roster = read_roster(Path(ns.roster)) if ns.roster else None
    titles = {lab.id: lab.title for lab in manifest.labs}
    written, problems = write_lms(finals, ns.format, Path(ns.out), roster=roster,
                                  prefix=ns.prefix, assignments=_assignments(ns.assignment),
                                  titles=titles)
    print(f"late policy: {manifest.late_policy.describe()}")
    for final in finals:
        print(f"  {final.entry.student:<28} {final.entry.lab:<6} {final.calculation}")
    for kind, login, lab, detail in problems:
        print(f"PROBLEM {kind}: {login}{' ' + lab if lab else ''}: {detail}", file=sys.stderr)
    for path in written:
        print(f"wrote {path}")
    return 1 if problems and ns.strict else 0


def _merge_records(entries, paths: list[Path]) -> None:
    """Commits of record from ``class plan``'s records.json, for the regrade workflow's
    reports (whose entries carry none)."""
    from msda_labs.classroom.grades import GradesError

    known = {}
    for path in paths:
        try:
            for item in json.loads(path.read_text()):
                known[item["student"], item["lab"]] = item["record"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise GradesError(f"{path}: not a records.json of `class plan` ({exc})") from None
    for entry in entries:
        record = known.get((entry.student, entry.lab))
        if record is None or entry.has_record:
            continue
        if entry.commit and record.get("sha") and entry.commit != record["sha"]:
            entry.note = "; ".join(n for n in [entry.note, f"graded {entry.commit[:12]}, not "
                                               f"the commit of record {record['sha'][:12]}: no "
                                               f"late days charged"] if n)
            continue
        entry.late_days = int(record.get("late_days", 0))
        entry.received_at = record.get("received_at", "")
        entry.warning = record.get("warning", "")
        entry.has_record = True


# ---------------------------------------------------------------------------------------- report

def _cmd_report(ns) -> int:
    from msda_labs.classroom.platforms import render, reporter_from_env
    from msda_labs.grading.judge.results import GradeResult

    if ns.runners:
        lines, status = reporter_from_env(ns.runners, os.environ)
        print("\n".join(lines))
        return status
    if not ns.grade_json:
        raise KitError("report: give a grade.json (or --runners in a workflow)")
    try:
        result = GradeResult.read_json(ns.grade_json)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KitError(f"{ns.grade_json} is not a grade.json written by `grade --json` "
                       f"({type(exc).__name__}: {exc})") from None
    text = render(result, ns.format)
    if ns.github_output and not write_step_outputs({ns.github_output: text.strip()}):
        raise KitError("--github-output needs $GITHUB_OUTPUT (it is set inside GitHub Actions)")
    if ns.out:
        Path(ns.out).write_text(text)
    if not ns.github_output and not ns.out:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


# --------------------------------------------------------------------------------------- insight

def _cmd_insight(ns) -> int:
    from datetime import date

    from msda_labs.classroom.insight import collect, parse_due
    from msda_labs.classroom.insight_page import write_insight

    try:
        today = date.fromisoformat(ns.today) if ns.today else None
    except ValueError:
        raise KitError(f"--today {ns.today!r}: give a date YYYY-MM-DD") from None
    graded = collect(ns.paths)
    due = parse_due(ns.due) or None  # None: classroom.yml's dates of the labs graded
    written = write_insight(graded, ns.out, due=due, threshold=ns.threshold,
                            today=today, handouts=ns.handouts)
    print(f"insight: {len(graded)} graded result(s) of "
          f"{len({g.student for g in graded})} student(s)")
    for path in written:
        print(f"wrote {path}")
    return 0


# --------------------------------------------------------------------------------------- student

def _cmd_student(ns) -> int:
    from msda_labs.classroom.one_student import one_student, render_text, write_page

    labs = one_student(ns.login, ns.paths)
    sys.stdout.write(render_text(ns.login, labs))
    if ns.html:
        print(f"wrote {write_page(ns.login, labs, Path(ns.html))}")
    return 0


# -------------------------------------------------------------------------------------- validate

def _cmd_validate(ns) -> int:
    manifest = _manifest(ns.manifest)  # a ManifestError names the file and the key
    dated = [lab for lab in manifest.labs if lab.due is not None]
    print(f"{manifest.path}: valid; {len(manifest.labs)} lab(s), {len(dated)} with a due date; "
          f"late policy: {manifest.late_policy.describe()}; grading {manifest.grading.describe()}")
    for lab in dated:
        print(f"  {lab.id}: due {lab.due.isoformat(sep=' ', timespec='minutes')}"
              + (f", late work until {lab.cutoff.isoformat(sep=' ', timespec='minutes')}"
                 if lab.late_days else ""))
    print(f"{len(manifest.extensions)} extension(s), {len(manifest.adjustments)} manual "
          f"adjustment(s)")
    for extension in manifest.extensions:
        print(f"  {extension.student} {extension.lab}: {extension.describe()}")
    for adjustment in manifest.adjustments:
        print(f"  {adjustment.student} {adjustment.lab}: {adjustment.points:+g} "
              f"({adjustment.reason}) [{adjustment.where}]")
    return 0


# ------------------------------------------------------------------------------------ similarity

def _cmd_similarity(ns) -> int:
    from msda_labs.classroom.similarity import compare_class, write_similarity

    folder = Path(ns.folder)
    if not folder.is_dir():
        raise KitError(f"{folder} is not a folder (a folder of students' checkouts)")
    report = compare_class(folder, lab=ns.lab, prefix=ns.prefix,
                           pristine=Path(ns.pristine) if ns.pristine else None,
                           threshold=ns.threshold, shipped_threshold=ns.shipped_threshold)
    _print_similarity(report, write_similarity(report, Path(ns.out)))
    return 0


def _print_similarity(report, written) -> None:
    print(f"similarity of {len(report.students)} submission(s) of {report.lab}: "
          f"{len(report.pairs)} pair(s) above {report.threshold:g}, {len(report.shipped)} "
          f"match(es) with the kit's code above {report.shipped_threshold:g}; the median pair "
          f"shares {report.typical:.0%}")
    for pair in report.pairs:
        print(f"  PAIR    {pair.first} ({pair.share_first:.0%}) and {pair.second} "
              f"({pair.share_second:.0%})")
    for match in report.shipped:
        print(f"  SHIPPED {match.student}: {match.share_student:.0%} of it in {match.source}")
    for student, why in report.not_compared.items():
        print(f"  not compared: {student} ({why})")
    for path in written:
        print(f"wrote {path}")


# -------------------------------------------------------------------------------------- progress

def _cmd_progress(ns) -> int:
    from msda_labs.classroom.progress import ladder_progress, render_table, write_html
    from msda_labs.course.manifest import find_manifest, load_manifest

    manifest = load_manifest(find_manifest())

    def report(row):
        print(f"  {row.lab}: {row.status} ({row.how})", file=sys.stderr, flush=True)

    rows = ladder_progress(manifest, ns.labs, refresh=ns.refresh, report=report)
    print(render_table(rows, how=False))  # each row's line was printed as it came
    if ns.html:
        print(f"wrote {write_html(rows, ns.html, title=manifest.title)}")
    return 0


# -------------------------------------------------------------------------------------- register

def register(subparsers) -> None:
    """Add ``export``, ``regrade``, ``report``, ``insight`` and ``progress`` to
    ``python -m msda_labs``."""
    raw = argparse.RawDescriptionHelpFormatter
    _add_export(subparsers, raw)
    _add_regrade(subparsers, raw)
    _add_report(subparsers, raw)
    _add_insight(subparsers, raw)
    _add_progress(subparsers, raw)
    _add_class(subparsers, raw)
    _add_gradebook(subparsers, raw)
    _add_similarity(subparsers, raw)
    _add_validate(subparsers, raw)
    _add_student(subparsers, raw)


def _add_export(subparsers, raw) -> None:
    e = subparsers.add_parser("export", help="write template repositories (and teacher graders)",
                              description=__doc__, formatter_class=raw)
    e.add_argument("labs", nargs="+", metavar="LAB", help="lab ids, or 'all' (every ready lab)")
    e.add_argument("--out", metavar="DIR", help="write one template repository per lab in DIR")
    e.add_argument("--force", action="store_true", help="replace existing exports in DIR")
    e.add_argument("--git", action="store_true",
                   help="git init each export with a single commit holding only the export")
    e.add_argument("--reporter-action", metavar="OWNER/REPO@SHA",
                   help="use this reporter action (pinned by full SHA) instead of the kit's own "
                        "reporter step")
    e.add_argument("--gradescope", metavar="PATH",
                   help="write the Gradescope autograder zip (PATH.zip for one lab, else a folder)")
    e.add_argument("--gradescope-seed-file", metavar="PATH",
                   help="put the secret seed read from PATH into the Gradescope zip (as "
                        "msda_grade_seed, readable by root only): the graded cases are hidden")
    e.add_argument("--classroom50", metavar="REPO",
                   help="the root of your classroom50 repository checkout: writes "
                        "REPO/<classroom>/autograders/<assignment>/autograder.py")
    e.add_argument("--classroom", metavar="NAME",
                   help="Classroom 50 classroom short name (its folder in the classroom50 "
                        "repository); required with --classroom50")
    e.add_argument("--assignment", metavar="NAME",
                   help="Classroom 50 assignment name (default: the lab's folder name)")
    e.set_defaults(func=_cmd_export)


def _add_regrade(subparsers, raw) -> None:
    r = subparsers.add_parser("regrade", help="regrade checkouts with pristine grading files",
                              description=__doc__, formatter_class=raw)
    r.add_argument("path", help="a student's checkout, or a folder of checkouts (batch)")
    r.add_argument("--lab", help="the lab (default: the checkout's labNN.py)")
    r.add_argument("--seed", type=int,
                   help="secret seed mixed into every random case (visible to every user of "
                        "this machine in the process list: prefer --seed-file or "
                        "$MSDA_GRADE_SEED)")
    r.add_argument("--seed-file", metavar="PATH",
                   help="read the secret seed from PATH (keep it readable by you only)")
    r.add_argument("--json", metavar="OUT", help="write the result (batch: all results) as JSON")
    r.add_argument("--markdown", metavar="OUT", help="write the Markdown report (one checkout)")
    r.add_argument("--gpu", action="store_true",
                   help="also run the GPU stage (msda_labs.gpu: local CUDA or Modal)")
    r.add_argument("--pristine", metavar="DIR",
                   help="restore grading files from this export instead of the kit")
    r.add_argument("--timeout", type=float, help="seconds one test's code may run")
    r.add_argument("--batch", action="store_true",
                   help="PATH is a folder of checkouts (also assumed when PATH has no labNN.py)")
    r.add_argument("--gradebook", metavar="CSV",
                   help="batch: gradebook to write (default gradebook.csv)")
    r.add_argument("--prefix", help="batch: strip this prefix from folder names (e.g. lab-05-)")
    r.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="batch: grade N students at once, each in a worker process of its own")
    r.add_argument("--student-limit", type=float, metavar="SECONDS",
                   help="batch: wall-clock limit for everything done for one student "
                        "(default 1200); past it the student's row says not graded")
    r.add_argument("--no-insight", action="store_true",
                   help="batch: do not write the class insight page (insight.html) beside the "
                        "gradebook")
    r.add_argument("--leaderboard", action="store_true",
                   help="batch: also write the speed leaderboard (leaderboard.html and .csv "
                        "beside the gradebook) from the judge-clock times of the GPU stage")
    r.add_argument("--hide-names", action="store_true",
                   help="with --leaderboard: the page shows 'student N', not the names (the "
                        "CSV keeps them)")
    r.add_argument("--similarity", action="store_true",
                   help="batch: also compare the submissions (similarity.html, .csv and .json "
                        "beside the gradebook): copied pairs, copies of the kit's code")
    r.add_argument("--at-deadline", action="store_true",
                   help="grade each clone's commit of record for the lab's due date "
                        "(classroom.yml), not its HEAD")
    r.add_argument("--github", action="store_true",
                   help="with --at-deadline: when GitHub received each push (its API, token in "
                        "$GH_TOKEN); without it the commit dates are used, with a warning")
    r.set_defaults(func=_cmd_regrade)


def _add_class(subparsers, raw) -> None:
    c = subparsers.add_parser("class", help="a whole class: list its repositories, resolve "
                              "commits of record, plan dispatches or regrade",
                              description=__doc__, formatter_class=raw)
    c.add_argument("action", choices=("plan", "regrade"))
    c.add_argument("--org", required=True, help="the GitHub organisation of the class")
    c.add_argument("--prefix", required=True,
                   help="the assignment's repository prefix (e.g. lab-05-)")
    c.add_argument("--lab", required=True, help="the lab (its due date is in classroom.yml)")
    c.add_argument("--out", default="regrade-plan", metavar="DIR",
                   help="plan: where the dispatch lists, records.json and dispatch.sh go")
    c.add_argument("--size", type=int, default=256,
                   help="plan: submissions per dispatch (at most 256, one matrix)")
    c.add_argument("--gpu", action="store_true", help="plan: dispatch with the GPU stage")
    c.add_argument("--dispatch", action="store_true",
                   help="plan: then run dispatch.sh (gh workflow run, one per dispatch list)")
    c.add_argument("--gradebook", default="gradebook.csv", metavar="CSV", help="regrade")
    c.add_argument("--json", metavar="OUT", help="regrade: every result and record")
    c.add_argument("--no-insight", action="store_true", help="regrade: no insight page")
    c.add_argument("--pristine", metavar="DIR", help="regrade: the published export")
    c.add_argument("--seed-file", metavar="PATH", help="regrade: the secret seed")
    c.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    c.add_argument("--timeout", type=float, help="regrade: seconds one test's code may run")
    c.set_defaults(func=_cmd_class)


def _add_gradebook(subparsers, raw) -> None:
    from msda_labs.classroom.lms import FORMATS as LMS_FORMATS

    g = subparsers.add_parser("gradebook", help="the course gradebook: late policy across "
                              "labs; CSV, Canvas or Moodle import files",
                              description=__doc__, formatter_class=raw)
    g.add_argument("inputs", nargs="+", metavar="JSON",
                   help="regrade --json lists (regrade --at-deadline, class regrade, or the "
                        "regrade workflow's regrade-*/regrade.json)")
    g.add_argument("--format", choices=LMS_FORMATS, default="csv")
    g.add_argument("--out", required=True, metavar="FILE")
    g.add_argument("--roster", metavar="CSV",
                   help="github login -> LMS identity (columns: github, name, email, id, "
                        "sis_user_id, sis_login_id, section, username, idnumber)")
    g.add_argument("--records", action="append", metavar="JSON",
                   help="records.json of `class plan` (commits of record of workflow regrades)")
    g.add_argument("--prefix", help="the assignment prefix to strip from repository names")
    g.add_argument("--assignment", action="append", metavar="LAB=NAME",
                   help="the LMS column of a lab (default 'labNN: title'), repeatable")
    g.add_argument("--manifest", metavar="YML", help="classroom.yml (default: found from here)")
    g.add_argument("--similarity", action="append", metavar="JSON",
                   help="similarity.json of `similarity` (or regrade --similarity): its cell in "
                        "the similarity column, repeatable")
    g.add_argument("--strict", action="store_true",
                   help="exit 1 when a student is missing from the roster or has no repository")
    g.set_defaults(func=_cmd_gradebook)


def _add_report(subparsers, raw) -> None:
    p = subparsers.add_parser("report", help="render a grade.json for a platform",
                              description=__doc__, formatter_class=raw)
    p.add_argument("grade_json", nargs="?", help="a grade.json written by `grade --json`")
    p.add_argument("--format", choices=FORMATS, default="terminal")
    p.add_argument("--out", metavar="FILE", help="write there instead of standard output")
    p.add_argument("--github-output", metavar="KEY",
                   help="append KEY=<rendering> to $GITHUB_OUTPUT (a step output)")
    p.add_argument("--runners", metavar="IDS",
                   help="act as autograding-grading-reporter: read $<ID>_RESULTS of each runner")
    p.set_defaults(func=_cmd_report)


def _add_insight(subparsers, raw) -> None:
    i = subparsers.add_parser("insight", help="a class report from graded results (HTML page)",
                              description=__doc__, formatter_class=raw)
    i.add_argument("paths", nargs="+", metavar="PATH",
                   help="grade.json files, regrade --batch --json lists, or folders of them")
    i.add_argument("--out", default="insight.html", metavar="HTML",
                   help="the page to write (default insight.html); JSON and CSV go beside it")
    i.add_argument("--due", action="append", metavar="LAB=DATE",
                   help="a lab due by a date (labNN=YYYY-MM-DD), repeatable: a student without "
                        "an attempt at it is stuck (default: the due dates classroom.yml gives "
                        "the labs graded)")
    i.add_argument("--threshold", type=float, default=0.5, metavar="F",
                   help="a student below this share of a lab's points is stuck (default 0.5)")
    i.add_argument("--today", metavar="DATE", help="the day to judge due dates by (default today)")
    i.add_argument("--handouts", metavar="URL",
                   help="base URL of the lab folders for the hint links (default: a path to the "
                        "kit's handouts)")
    i.set_defaults(func=_cmd_insight)


def _add_student(subparsers, raw) -> None:
    t = subparsers.add_parser("student", help="one student across the labs: every lab's row, "
                              "with the feedback", description=__doc__, formatter_class=raw)
    t.add_argument("login", help="the student's GitHub login")
    t.add_argument("paths", nargs="+", metavar="PATH",
                   help="regrade --json lists, grade.json files, or folders of them")
    t.add_argument("--html", metavar="OUT", help="also write one self-contained page")
    t.set_defaults(func=_cmd_student)


def _add_validate(subparsers, raw) -> None:
    v = subparsers.add_parser("validate", help="check classroom.yml (schema, dates, extensions, "
                              "adjustments); exit 2 with the file and key at the first problem",
                              description=__doc__, formatter_class=raw)
    v.add_argument("manifest", nargs="?", metavar="YML",
                   help="the manifest (default: classroom.yml found from here)")
    v.set_defaults(func=_cmd_validate)


def _add_similarity(subparsers, raw) -> None:
    from msda_labs.classroom.similarity import SHIPPED_THRESHOLD, THRESHOLD

    s = subparsers.add_parser("similarity", help="code similarity across a class folder "
                              "(copydetect): copied pairs, copies of the kit's code",
                              description=__doc__, formatter_class=raw)
    s.add_argument("folder", help="a folder of students' checkouts (one sub-folder each)")
    s.add_argument("--lab", help="the lab (default: the checkouts' labNN.py)")
    s.add_argument("--prefix", help="strip this prefix from folder names (e.g. lab-05-)")
    s.add_argument("--pristine", metavar="DIR",
                   help="the published export of the lab (its starter, tests and shared/)")
    s.add_argument("--out", default="similarity.html", metavar="HTML",
                   help="the side-by-side page (default similarity.html); .csv and .json beside")
    s.add_argument("--threshold", type=float, default=THRESHOLD, metavar="F",
                   help=f"flag a pair sharing more than this share of either file (default "
                        f"{THRESHOLD})")
    s.add_argument("--shipped-threshold", type=float, default=SHIPPED_THRESHOLD, metavar="F",
                   help=f"flag a file sharing more than this share of itself with one file of "
                        f"the kit's code (default {SHIPPED_THRESHOLD})")
    s.set_defaults(func=_cmd_similarity)


def _add_progress(subparsers, raw) -> None:
    g = subparsers.add_parser("progress", help="where you stand across the labs of this checkout",
                              description=__doc__, formatter_class=raw)
    g.add_argument("labs", nargs="*", metavar="LAB", help="lab ids (default: every lab)")
    g.add_argument("--html", metavar="PATH", help="also write the table as an HTML page")
    g.add_argument("--refresh", action="store_true",
                   help="grade again even where the cache (.progress/) holds a result")
    g.set_defaults(func=_cmd_progress)
