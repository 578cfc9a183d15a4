"""Inputs and gradebook of the instructor's regrade workflow (``.github/workflows/regrade.yml``).

    python -m msda_labs.classroom.dispatch plan [--lab LAB] [--submissions TEXT] [--gpu]
    python -m msda_labs.classroom.dispatch gradebook --reports DIR [--out CSV] [--merged DIR]
                                                    [--insight HTML]

The workflow passes its ``workflow_dispatch`` inputs through the environment (``LAB``,
``SUBMISSIONS``, ``GPU``), never through ``${{ }}`` inside a shell command, and this module is
the only thing that reads them. ``plan`` validates them (a lab id ``labNN`` of a ready lab, and
a list of ``owner/repo@commit`` entries separated by spaces, commas or newlines, each commit a
40-hex SHA or a plain branch or tag name) and writes the job matrix to ``$GITHUB_OUTPUT``; a bad
entry stops the run before any student repository is touched, with a message that names it.

``gradebook`` runs after the per-submission jobs: it reads the artifacts they uploaded
(``regrade-<folder>/regrade.json`` from ``regrade --batch``, and ``gpu-<folder>/gpu.json`` from
``grade --stage gpu`` when the GPU stage was asked for), merges them per submission, writes the
gradebook CSV (the columns of ``regrade --gradebook``) and a Markdown summary for
``$GITHUB_STEP_SUMMARY``; with ``--insight``, the class insight page too, and a line in the
summary that points at it. A submission without a report gets a row with an empty score and the
reason, never a score computed from part of its stages.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from msda_labs.classroom.workflows import write_step_outputs
from msda_labs.errors import KitError
from msda_labs.grading.integrity import summary

__all__ = ["DispatchError", "DispatchEntry", "MAX_SUBMISSIONS", "parse_lab", "parse_submissions",
           "plan", "gradebook_rows", "render_summary", "main"]

# GitHub runs at most 256 jobs from one matrix ("Actions limits",
# https://docs.github.com/en/actions/reference/limits); a larger class is split over several
# runs by msda_labs.classroom.classwide.
MAX_SUBMISSIONS = 256

_LAB = re.compile(r"^lab[0-9]{2}$")
# GitHub owner names: letters, digits and single hyphens, not at either end, 39 characters at most.
_OWNER = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")
_REPO = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_SHA = re.compile(r"^[0-9a-fA-F]{40}$")
_SHORT_SHA = re.compile(r"^[0-9a-fA-F]{7,39}$")
# A branch or tag name, stricter than git's rules: it starts with a letter or digit (never "-",
# so it cannot read as an option), then letters, digits and . _ / -.
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


class DispatchError(KitError, ValueError):
    """The workflow's inputs are not valid; the message says which entry and why."""


@dataclass(frozen=True)
class DispatchEntry:
    """One ``owner/repo@ref`` entry of the dispatch."""

    owner: str
    repo: str
    ref: str
    folder: str  # where the workflow checks it out (submissions/<folder>); the gradebook's student

    @property
    def repository(self) -> str:
        return f"{self.owner}/{self.repo}"

    @property
    def label(self) -> str:
        return f"{self.owner}/{self.repo}@{self.ref}"

    def matrix_entry(self) -> dict:
        return {"repository": self.repository, "ref": self.ref, "folder": self.folder,
                "label": self.label}


def parse_lab(text: str) -> str:
    """The lab id (``lab05``); anything else is refused."""
    lab = (text or "").strip()
    if not _LAB.match(lab):
        raise DispatchError(f"lab {lab!r}: give a lab id such as lab05 (the letters 'lab' and two "
                            f"digits)")
    return lab


def _check_ref(entry: str, ref: str) -> str:
    if _SHA.match(ref):
        return ref.lower()
    if _SHORT_SHA.match(ref) and any(c.isdigit() for c in ref):
        raise DispatchError(f"{entry!r}: {ref!r} looks like a shortened commit SHA; give all 40 "
                            f"hex characters (`git rev-parse HEAD`)")
    bad = (not _REF.match(ref) or ".." in ref or "//" in ref or ref.endswith(("/", ".", ".lock"))
           or "/." in ref)
    if bad:
        raise DispatchError(f"{entry!r}: {ref!r} is neither a 40-hex commit SHA nor a plain branch "
                            f"or tag name (letters, digits and . _ / -, starting with a letter or "
                            f"digit)")
    return ref


def _parse_entry(entry: str) -> tuple[str, str, str]:
    if entry.count("@") != 1 or entry.count("/") < 1:
        raise DispatchError(f"{entry!r}: write each submission as owner/repo@commit, e.g. "
                            f"course-org/lab-05-ada@{'0' * 40}")
    repository, ref = entry.split("@")
    owner, _, repo = repository.partition("/")
    if not _OWNER.match(owner):
        raise DispatchError(f"{entry!r}: {owner!r} is not a GitHub owner name (letters, digits and "
                            f"single hyphens, at most 39 characters)")
    if not _REPO.match(repo) or repo in (".", ".."):
        raise DispatchError(f"{entry!r}: {repo!r} is not a repository name (letters, digits and "
                            f". _ -, at most 100 characters)")
    if not ref:
        raise DispatchError(f"{entry!r}: the commit after '@' is missing")
    return owner, repo, _check_ref(entry, ref)


def _folder_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)


def parse_submissions(text: str) -> list[DispatchEntry]:
    """Parse the ``submissions`` input: ``owner/repo@ref`` entries separated by spaces, commas
    or newlines; lines starting with ``#`` are comments. Raises :class:`DispatchError` naming the
    first bad entry, a duplicate, an empty list or one longer than :data:`MAX_SUBMISSIONS`."""
    entries = []
    for line in (text or "").splitlines():
        if line.strip().startswith("#"):
            continue
        entries += [e for e in re.split(r"[\s,]+", line) if e]
    if not entries:
        raise DispatchError("no submissions given: list owner/repo@commit entries, separated by "
                            "spaces or newlines")
    if len(entries) > MAX_SUBMISSIONS:
        raise DispatchError(f"{len(entries)} submissions: at most {MAX_SUBMISSIONS} per run (one "
                            f"job each, and a matrix runs at most 256 jobs); split the list over "
                            f"several runs (`python -m msda_labs class plan` lists a class and "
                            f"splits it for you)")
    parsed = [_parse_entry(e) for e in entries]
    seen: dict[tuple[str, str, str], str] = {}
    for entry, (owner, repo, ref) in zip(entries, parsed):
        key = (owner.lower(), repo.lower(), ref.lower() if _SHA.match(ref) else ref)
        if key in seen:
            raise DispatchError(f"{entry!r} is listed twice (also as {seen[key]!r})")
        seen[key] = entry
    per_repo: dict[tuple[str, str], int] = {}
    for owner, repo, _ in parsed:
        per_repo[owner.lower(), repo.lower()] = per_repo.get((owner.lower(), repo.lower()), 0) + 1
    result = []
    for owner, repo, ref in parsed:
        folder = f"{owner}--{repo}"
        if per_repo[owner.lower(), repo.lower()] > 1:  # two commits of one repository
            folder += f"--{_folder_part(ref[:12] if _SHA.match(ref) else ref)}"
        result.append(DispatchEntry(owner, repo, ref, folder))
    folders = [s.folder.lower() for s in result]
    clash = sorted({f for f in folders if folders.count(f) > 1})
    if clash:
        raise DispatchError(f"two entries would share the folder {clash[0]!r}; regrade them in "
                            f"separate runs")
    return result


def _manifest_lab(lab_id: str, gpu: bool):
    from msda_labs.course.manifest import ManifestError, find_manifest, load_manifest

    try:
        manifest = load_manifest(find_manifest())
        lab = manifest.lab(lab_id)
    except ManifestError as exc:
        raise DispatchError(str(exc)) from None
    if not lab.built:
        raise DispatchError(f"{lab_id} is not ready in classroom.yml (status: {lab.status}); "
                            f"there is nothing to grade it with yet")
    if gpu and not lab.has_gpu:
        raise DispatchError(f"{lab_id} has no GPU stage (its stages: "
                            f"{', '.join(s.name for s in lab.stages)}); dispatch with gpu off")
    return lab


def plan(lab: str, submissions: str, gpu: bool = False, *, check_manifest: bool = True) -> dict:
    """Validate the inputs; the matrix the workflow's per-submission jobs run over."""
    lab_id = parse_lab(lab)
    entries = parse_submissions(submissions)
    if check_manifest:
        _manifest_lab(lab_id, gpu)
    return {"lab": lab_id, "gpu": bool(gpu), "include": [s.matrix_entry() for s in entries]}


def _truthy(text: str | None) -> bool:
    return (text or "").strip().lower() in ("true", "1", "yes")


# ------------------------------------------------------------------------------------- gradebook

def _regrade_entry(path: Path) -> dict | None:
    """The one entry of a ``regrade --batch --json`` file (a list), or None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict):
        return data[0]
    return None


def gradebook_rows(lab: str, entries: list[DispatchEntry], reports: Path, *, gpu: bool,
                   merged: Path | None = None) -> list:
    """One :class:`~msda_labs.classroom.regrade.GradebookRow` per submission, from the artifacts
    in ``reports``; with ``merged``, also write each merged result there as ``<folder>.json``."""
    from msda_labs.classroom.regrade import GradebookRow
    from msda_labs.grading.results import GradeResult

    reports = Path(reports)
    rows = []
    for sub in entries:
        entry = _regrade_entry(reports / f"regrade-{sub.folder}" / "regrade.json")
        if entry is None:
            rows.append(GradebookRow(sub.folder, lab, "", "", "not graded", "",
                                     f"no CPU report for {sub.label}: see its regrade job (the "
                                     f"checkout failed, or the job did not finish)"))
            continue
        commit = entry.get("commit") or ""
        if entry.get("result") is None:
            rows.append(GradebookRow(sub.folder, lab, "", "", "not graded", commit,
                                     entry.get("note") or "regrade could not grade it"))
            continue
        try:
            result = GradeResult.from_dict(entry["result"])
        except (KeyError, TypeError, ValueError) as exc:
            rows.append(GradebookRow(sub.folder, lab, "", "", "not graded", commit,
                                     f"unreadable CPU report ({type(exc).__name__})"))
            continue
        integrity = summary(result.integrity)
        notes = [entry["note"]] if entry.get("note") else []
        if gpu:
            gpu_path = reports / f"gpu-{sub.folder}" / "gpu.json"
            try:
                result.merge(GradeResult.read_json(gpu_path))
            except (OSError, KeyError, TypeError, ValueError) as exc:
                reason = "no GPU report" if isinstance(exc, FileNotFoundError) else \
                    f"unreadable GPU report ({type(exc).__name__})"
                rows.append(GradebookRow(
                    sub.folder, lab, "", "", integrity, commit,
                    f"CPU stages {result.score}/{result.max_score}; GPU stage not graded ({reason}"
                    f": see its gpu job), so no total", result=result))
                continue
        if merged is not None:
            Path(merged).mkdir(parents=True, exist_ok=True)
            result.write_json(Path(merged) / f"{sub.folder}.json")
        rows.append(GradebookRow(sub.folder, lab, result.score, result.max_score, integrity,
                                 commit, "; ".join(notes), result=result))
    return rows


def _cell(text) -> str:
    text = " ".join(str(text).split())
    for char in "\\|<>`*_[]":
        text = text.replace(char, "\\" + char)
    return text


def render_summary(lab: str, rows: list, *, gpu: bool) -> str:
    """The Markdown table for ``$GITHUB_STEP_SUMMARY``."""
    stages = "CPU stages + GPU stage on Modal" if gpu else "CPU stages"
    graded = [r for r in rows if r.score != ""]
    lines = [f"## Regrade of {lab} ({stages})", "",
             f"{len(graded)} of {len(rows)} submission(s) graded with pristine grading files. "
             f"The gradebook CSV and every JSON report are in the artifact "
             f"`gradebook-{lab}`.", "",
             "| student | commit | score | integrity | note |", "|---|---|---|---|---|"]
    for r in rows:
        score = f"{r.score}/{r.max}" if r.score != "" else "**not graded**"
        lines.append(f"| {_cell(r.student)} | {_cell(str(r.commit)[:12])} | {score} | "
                     f"{_cell(r.integrity)} | {_cell(r.note)} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- CLI

def _cmd_plan(ns) -> int:
    lab = ns.lab if ns.lab is not None else os.environ.get("LAB", "")
    text = ns.submissions if ns.submissions is not None else os.environ.get("SUBMISSIONS", "")
    gpu = ns.gpu or _truthy(os.environ.get("GPU"))
    result = plan(lab, text, gpu)
    for item in result["include"]:
        print(f"  {item['label']}  ->  submissions/{item['folder']}")
    print(f"{len(result['include'])} submission(s) of {result['lab']}"
          + (" (with the GPU stage on Modal)" if gpu else ""))
    outputs = {"lab": result["lab"], "gpu": json.dumps(result["gpu"]),
               "matrix": json.dumps({"include": result["include"]})}
    if not write_step_outputs(outputs, blocks=True):  # outside Actions: show what it would write
        for key, value in outputs.items():
            print(f"{key}={value}")
    return 0


def _insight_line(lab: str, name: str) -> str:
    """The job summary's line pointing at the class insight page in the run's artifacts."""
    server, repository, run = (os.environ.get(k, "") for k in
                               ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    where = f"the artifact `gradebook-{lab}`"
    if server and repository and run:
        where = f"[the artifact `gradebook-{lab}`]({server}/{repository}/actions/runs/{run}" \
                f"#artifacts)"
    return (f"**What the class is getting wrong:** `{name}` (named mistakes, task outcomes, "
            f"stuck students) is in {where}; download it and open it in a browser.\n")


def _cmd_gradebook(ns) -> int:
    from msda_labs.classroom.regrade import write_gradebook

    lab = parse_lab(ns.lab if ns.lab is not None else os.environ.get("LAB", ""))
    text = ns.submissions if ns.submissions is not None else os.environ.get("SUBMISSIONS", "")
    gpu = ns.gpu or _truthy(os.environ.get("GPU"))
    entries = parse_submissions(text)
    rows = gradebook_rows(lab, entries, Path(ns.reports), gpu=gpu,
                          merged=Path(ns.merged) if ns.merged else None)
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    write_gradebook(rows, Path(ns.out))
    summary = render_summary(lab, rows, gpu=gpu)
    if ns.insight:
        from msda_labs.classroom.insight_page import write_beside_gradebook

        page, line = write_beside_gradebook(rows, Path(ns.insight))
        print(line)
        if page is not None:
            summary += "\n" + _insight_line(lab, page.name)
    if getattr(ns, "leaderboard", None):
        from msda_labs.classroom.leaderboard import write_leaderboard

        line = write_leaderboard(rows, Path(ns.leaderboard), hide_names=ns.hide_names)[2]
        print(line)
        summary += f"\n\nThe speed leaderboard ({Path(ns.leaderboard).name} and its CSV) is in " \
                   f"this run's gradebook artifact.\n"
    target = ns.summary or os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a") as fh:
            fh.write(summary)
    print(summary)
    missing = [r for r in rows if r.score == ""]
    print(f"gradebook: {ns.out} ({len(rows)} rows, {len(missing)} not graded)")
    return 1 if missing and ns.strict else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m msda_labs.classroom.dispatch",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("plan", "gradebook"):
        p = sub.add_parser(name)
        p.add_argument("--lab", help="lab id (default: $LAB)")
        p.add_argument("--submissions", help="owner/repo@ref entries (default: $SUBMISSIONS)")
        p.add_argument("--gpu", action="store_true", help="with the GPU stage (default: $GPU)")
        if name == "plan":
            p.set_defaults(func=_cmd_plan)
        else:
            p.add_argument("--reports", required=True, metavar="DIR",
                           help="the downloaded artifacts (regrade-<folder>/, gpu-<folder>/)")
            p.add_argument("--out", default="gradebook.csv", metavar="CSV")
            p.add_argument("--merged", metavar="DIR", help="write each merged result here")
            p.add_argument("--insight", metavar="HTML",
                           help="also write the class insight page here (msda_labs insight)")
            p.add_argument("--leaderboard", metavar="HTML",
                           help="also write the speed leaderboard here (and its CSV beside it)")
            p.add_argument("--hide-names", action="store_true",
                           help="the leaderboard page shows 'student N', not the names")
            p.add_argument("--summary", metavar="FILE",
                           help="append the Markdown here (default: $GITHUB_STEP_SUMMARY)")
            p.add_argument("--strict", action="store_true",
                           help="exit 1 when a submission could not be graded")
            p.set_defaults(func=_cmd_gradebook)
    ns = parser.parse_args(argv)
    try:
        return ns.func(ns)
    except DispatchError as exc:
        if os.environ.get("GITHUB_ACTIONS") == "true":
            print(f"::error title=Regrade inputs::{exc}")
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
