"""Inputs and gradebook of the instructor's regrade workflows (``.github/workflows/regrade.yml``,
one job per given submission, and ``regrade-class.yml``, a whole class in one dispatch).

    python -m msda_labs.classroom.dispatch plan [--lab LAB] [--submissions TEXT] [--gpu]
    python -m msda_labs.classroom.dispatch class-plan [--org ORG] [--prefix P] [--lab LAB]
                                                     [--latest] [--max-jobs N] [--out DIR]
    python -m msda_labs.classroom.dispatch fetch [--submissions TEXT] --into DIR
    python -m msda_labs.classroom.dispatch gradebook --reports DIR [--out CSV] [--merged DIR]
                                                    [--insight HTML] [--plan DIR]
                                                    [--final CSV [--roster CSV --prefix P]]

``class-plan`` (the class workflow's first job) lists the organisation's repositories of the
assignment through GitHub's API (``GH_TOKEN``; ``MSDA_GITHUB_REPLAY`` answers from recorded
responses, see :mod:`msda_labs.classroom.github`), resolves each to its commit of record from
GitHub's server times (the lab's due date and late window in classroom.yml; ``--latest``: the
last commit received) and splits the class into at most 256 batches of equal size, one matrix
job each (a matrix runs at most 256 jobs). ``fetch`` (each batch job) fetches the batch's
``owner/repo@sha`` entries, each at its one commit, with ``STUDENT_REPOS_TOKEN``. ``gradebook
--plan`` takes the submissions from the plan's artifact and adds a row for every unresolved
repository; ``--final`` applies classroom.yml's late policy (the columns of ``msda_labs
gradebook``), with the late days of the plan's records.

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

from msda_labs.classroom.classwide import MATRIX_LIMIT
from msda_labs.classroom.workflows import write_step_outputs
from msda_labs.errors import KitError
from msda_labs.grading.judge.integrity import summary

__all__ = ["DispatchError", "DispatchEntry", "MAX_SUBMISSIONS", "parse_lab", "parse_submissions",
           "plan", "gradebook_rows", "render_summary", "main"]

# GitHub runs at most 256 jobs from one matrix ("Actions limits",
# https://docs.github.com/en/actions/reference/limits); a larger class is split over several
# runs by msda_labs.classroom.classwide, or over batches of one run by class_plan below.
MAX_SUBMISSIONS = MATRIX_LIMIT

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


def _report_index(reports: Path) -> dict[str, list[dict]]:
    """Every entry of the ``regrade-*/regrade.json`` artifacts under ``reports``, by student
    (the submission's folder): one file per submission (a job each) or per batch of them."""
    index: dict[str, list[dict]] = {}
    for path in sorted(Path(reports).glob("regrade-*/regrade.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for item in data if isinstance(data, list) else []:
            if isinstance(item, dict) and isinstance(item.get("student"), str):
                index.setdefault(item["student"], []).append(item)
    return index


def _cpu_entry(reports: Path, folder: str, index: dict[str, list[dict]]) -> tuple[dict | None,
                                                                                  str]:
    """The CPU report of ``folder``: its own artifact's one entry, else its entry in a batch's
    artifact; (None, why) when there is none or more than one."""
    own = reports / f"regrade-{folder}" / "regrade.json"
    if own.is_file():
        entry = _regrade_entry(own)
        return (entry, "") if entry is not None else (None, "its report is unreadable")
    found = index.get(folder, [])
    if len(found) > 1:
        return None, f"{len(found)} reports name it"
    return (found[0], "") if found else (None, "")


def _gpu_report(reports: Path, folder: str) -> Path:
    """``gpu-<folder>/gpu.json`` (a job each), else ``gpu-<batch>/<folder>/gpu.json``."""
    own = reports / f"gpu-{folder}" / "gpu.json"
    if own.is_file():
        return own
    batched = sorted(reports.glob(f"gpu-*/{folder}/gpu.json"))
    return batched[0] if len(batched) == 1 else own


def gradebook_rows(lab: str, entries: list[DispatchEntry], reports: Path, *, gpu: bool,
                   merged: Path | None = None) -> list:
    """One :class:`~msda_labs.classroom.regrade.GradebookRow` per submission, from the artifacts
    in ``reports``; with ``merged``, also write each merged result there as ``<folder>.json``."""
    from msda_labs.classroom.regrade import GradebookRow
    from msda_labs.grading.judge.results import GradeResult

    reports = Path(reports)
    index = _report_index(reports)
    rows = []
    for sub in entries:
        entry, why = _cpu_entry(reports, sub.folder, index)
        if entry is None:
            rows.append(GradebookRow(sub.folder, lab, "", "", "not graded", "",
                                     f"no CPU report for {sub.label}"
                                     + (f" ({why})" if why else "") + ": see its regrade job "
                                     "(the checkout failed, or the job did not finish)"))
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
            gpu_path = _gpu_report(reports, sub.folder)
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


# ------------------------------------------------------------------------------- a whole class

# A job's outputs hold at most 1 MB, "approximated based on UTF-16 encoding" (Passing information
# between jobs, https://docs.github.com/en/actions/writing-workflows/choosing-what-your-workflow-does/passing-information-between-jobs);
# the class plan's matrix is one output: about 75 bytes a student, 150 as GitHub counts them.
OUTPUT_LIMIT = 1_000_000

# A prefix of the assignment's repositories: what a GitHub Classroom assignment puts before each
# login (``lab-05-``); never empty, so that a dispatch cannot regrade the whole organisation.
_PREFIX = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


def batches(items: list, limit: int = MAX_SUBMISSIONS) -> list[list]:
    """``items`` in at most ``limit`` consecutive batches of equal size (the last one smaller):
    one matrix job each, so that a class of any size stays within one matrix's 256 jobs. Up to
    ``limit`` items, every item has a job of its own."""
    if not items:
        return []
    size = -(-len(items) // limit)
    return [items[i:i + size] for i in range(0, len(items), size)]


def parse_class(org: str, prefix: str) -> tuple[str, str]:
    org, prefix = (org or "").strip(), (prefix or "").strip()
    if not _OWNER.match(org):
        raise DispatchError(f"org {org!r}: give the GitHub organisation of the class (letters, "
                            f"digits and single hyphens, at most 39 characters)")
    if not _PREFIX.match(prefix):
        raise DispatchError(f"prefix {prefix!r}: give the assignment's repository prefix, e.g. "
                            f"lab-05- (letters, digits and . _ -; not empty)")
    return org, prefix


def parse_max_jobs(text: str | int | None) -> int:
    """The ``max_jobs`` input: 1 to 256 regrade jobs (default 256)."""
    value = str(text if text not in (None, "") else MAX_SUBMISSIONS).strip()
    if not value.isdigit() or not 1 <= int(value) <= MAX_SUBMISSIONS:
        raise DispatchError(f"max_jobs {value!r}: a whole number from 1 to {MAX_SUBMISSIONS} (a "
                            f"matrix runs at most {MAX_SUBMISSIONS} jobs)")
    return int(value)


def class_plan(client, org: str, prefix: str, lab: str, *, at_deadline: bool = True,
               gpu: bool = False, out: Path, lab_info=None, progress=None,
               max_jobs: int = MAX_SUBMISSIONS) -> dict:
    """List the assignment's repositories, resolve each to its commit of record and split the
    class into batches for the class workflow's matrix. Writes ``records.json`` and
    ``unresolved.csv`` into ``out`` (:func:`msda_labs.classroom.classwide.write_records`);
    returns the step's outputs and counts."""
    from msda_labs.classroom.classwide import resolve_class, write_records

    lab_id = parse_lab(lab)
    org, prefix = parse_class(org, prefix)
    info = lab_info or _manifest_lab(lab_id, gpu)
    due = cutoff = None
    if at_deadline:
        if info.due is None:
            raise DispatchError(f"{lab_id} has no due date in classroom.yml (labs[].due): set "
                                f"one, or dispatch with at_deadline off to grade the last "
                                f"commit GitHub received")
        due, cutoff = info.due, info.cutoff
    resolved = resolve_class(client, org, prefix, due, cutoff, progress=progress)
    if not resolved:
        raise DispatchError(f"no repository of {org} starts with {prefix!r} (template and "
                            f"archived repositories are left out)")
    counts = write_records(resolved, lab_id, Path(out))
    ready = [r for r in resolved if r.record is not None and r.record.found]
    if not ready:
        raise DispatchError(f"none of the {len(resolved)} repositories of {org}/{prefix}* has a "
                            f"commit of record: see {Path(out) / 'unresolved.csv'}")
    groups = batches([r.entry for r in ready], parse_max_jobs(max_jobs))
    width = max(2, len(str(len(groups))))
    include = []
    for number, group in enumerate(groups, start=1):
        parse_submissions("\n".join(group))  # the regrade job's own check, here first
        name = f"{number:0{width}d}"
        include.append({"batch": name, "label": f"batch {name} ({len(group)})",
                        "submissions": "\n".join(group)})
    size = 2 * len(json.dumps({"include": include}, separators=(",", ":")))
    if size > OUTPUT_LIMIT:
        raise DispatchError(f"the matrix of {len(ready)} submissions is about {size // 1000} kB "
                            f"(as GitHub counts it, UTF-16), over the {OUTPUT_LIMIT // 1000} kB "
                            f"a job's outputs may hold: regrade the class in parts (`python -m "
                            f"msda_labs class plan` splits it over several runs of regrade.yml)")
    return {"lab": lab_id, "gpu": bool(gpu), "include": include, "listed": counts["listed"],
            "planned": counts["planned"], "unresolved": counts["unresolved"],
            "batch_size": len(groups[0]), "at_deadline": bool(at_deadline)}


def plan_summary(plan_out: dict, org: str, prefix: str, unresolved: list[list[str]]) -> str:
    jobs = len(plan_out["include"])
    clock = ("the last commit GitHub received by the due date (or the end of the late window)"
             if plan_out["at_deadline"] else "the last commit GitHub received")
    lines = [f"## Class plan of {plan_out['lab']}: {org}/{_cell(prefix)}*", "",
             f"{plan_out['listed']} repositories listed, **{plan_out['planned']} planned** in "
             f"{jobs} job(s) of at most {plan_out['batch_size']} submission(s), "
             f"{plan_out['unresolved']} unresolved. Each is graded at its commit of record: "
             f"{clock}, by GitHub's server times.", ""]
    if unresolved:
        lines += ["| repository | why no commit of record |", "|---|---|"]
        lines += [f"| {_cell(r[0])} | {_cell(r[2])} |" for r in unresolved[:200]]
        if len(unresolved) > 200:
            lines.append(f"| ... | {len(unresolved) - 200} more in the artifact's unresolved.csv |")
    return "\n".join(lines) + "\n"


def fetch_submissions(text: str, into: Path, *, token: str = "",
                      server: str = "https://github.com") -> tuple[list[DispatchEntry],
                                                                   list[str]]:
    """Fetch each ``owner/repo@sha`` entry of ``text`` into ``into/<folder>`` at that commit
    (one commit, no history, no tags), as actions/checkout does for one. The token reaches git
    through the environment (``GIT_CONFIG_*``), never a command line or a file. Returns the
    entries fetched and one line per entry that could not be (its folder is removed)."""
    import base64
    import shutil
    import subprocess

    entries = parse_submissions(text)
    # no prompt for a password; no Git LFS download of the student's files (nothing graded
    # lives there, and it would be a second fetch with the token)
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_LFS_SKIP_SMUDGE="1")
    if token:
        count = int(env.get("GIT_CONFIG_COUNT") or 0)
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env.update({"GIT_CONFIG_COUNT": str(count + 1),
                    f"GIT_CONFIG_KEY_{count}": f"http.{server}/.extraheader",
                    f"GIT_CONFIG_VALUE_{count}": f"AUTHORIZATION: basic {basic}"})
    into = Path(into)
    into.mkdir(parents=True, exist_ok=True)
    fetched, failed = [], []
    for sub in entries:
        dest = into / sub.folder
        steps = [("init", ["init", "-q", str(dest)]),
                 ("fetch", ["-C", str(dest), "fetch", "-q", "--depth=1", "--no-tags",
                            f"{server}/{sub.owner}/{sub.repo}.git", sub.ref]),
                 ("checkout", ["-C", str(dest), "-c", "advice.detachedHead=false", "checkout",
                               "-q", "--detach", "FETCH_HEAD"])]
        why = ""
        for name, args in steps:
            proc = subprocess.run(["git", *args], env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
                why = f"git {name}: {last[:300]}"
                break
        if not why and _SHA.match(sub.ref):
            head = subprocess.run(["git", "-C", str(dest), "rev-parse", "HEAD"], env=env,
                                  capture_output=True, text=True).stdout.strip()
            if head != sub.ref:
                why = f"fetched {head[:12] or 'nothing'}, not {sub.ref[:12]}"
        if why:
            shutil.rmtree(dest, ignore_errors=True)
            failed.append(f"{sub.label}: {why}")
        else:
            fetched.append(sub)
    return fetched, failed


def planned_entries(plan_dir: Path) -> tuple[list[DispatchEntry], dict[str, dict],
                                             list[list[str]]]:
    """The class plan's artifact (``records.json``, ``unresolved.csv``): the planned
    submissions, their records by folder, and the unresolved repositories' rows."""
    import csv

    plan_dir = Path(plan_dir)
    try:
        items = json.loads((plan_dir / "records.json").read_text())
        text = "\n".join(f"{i['repository']}@{i['record']['sha']}" for i in items)
        records = {i["student"]: i["record"] for i in items}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DispatchError(f"{plan_dir}/records.json: not a class plan's records "
                            f"({type(exc).__name__}: {exc})") from None
    entries = []
    for group in batches(text.split("\n")) if text else []:
        entries += parse_submissions("\n".join(group))
    unresolved = []
    if (plan_dir / "unresolved.csv").is_file():
        with open(plan_dir / "unresolved.csv", newline="") as fh:
            unresolved = list(csv.reader(fh))[1:]
    return entries, records, unresolved


def write_final_grades(rows: list, records: dict[str, dict], out: Path, *,
                       roster: Path | None = None, prefix: str | None = None) -> tuple[list,
                                                                                      list[Path]]:
    """The late policy of classroom.yml applied to the run's rows (the columns of the local
    ``gradebook`` command), and with ``roster`` the Canvas and Moodle files beside ``out``."""
    from msda_labs.classroom.grades import apply_extensions, apply_policy, entry_from_row
    from msda_labs.classroom.lms import read_roster, write_lms
    from msda_labs.course.manifest import ManifestError, find_manifest, load_manifest

    try:
        manifest = load_manifest(find_manifest())
    except ManifestError as exc:
        raise DispatchError(str(exc)) from None
    order = [lab.id for lab in sorted((lab for lab in manifest.labs if lab.due is not None),
                                      key=lambda lab: (lab.due, lab.id))]
    entries = [entry_from_row(r, records.get(r.student)) for r in rows]
    apply_extensions(entries, manifest)
    finals = apply_policy(entries, manifest.late_policy, order)
    if manifest.late_policy.kind == "free_days":
        for final in finals:
            final.notes.append("free late days of this lab only: combine every lab's reports "
                               "with `python -m msda_labs gradebook` for the course's count")
    written = write_lms(finals, "csv", out)[0]
    if roster is not None:
        people = read_roster(roster)
        for fmt in ("canvas", "moodle"):
            written += write_lms(finals, fmt, out.with_name(f"{fmt}.csv"), roster=people,
                                 prefix=prefix)[0]
    return finals, written


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
    gpu = ns.gpu or _truthy(os.environ.get("GPU"))
    records: dict[str, dict] = {}
    unresolved: list[list[str]] = []
    if ns.plan:  # the class workflow: the plan's artifact lists the submissions
        entries, records, unresolved = planned_entries(Path(ns.plan))
    else:
        text = ns.submissions if ns.submissions is not None else os.environ.get("SUBMISSIONS",
                                                                                "")
        entries = parse_submissions(text)
    rows = gradebook_rows(lab, entries, Path(ns.reports), gpu=gpu,
                          merged=Path(ns.merged) if ns.merged else None)
    if unresolved:  # listed, never dropped: a row without a score, and why
        from msda_labs.classroom.regrade import GradebookRow

        owner_of = {r[0]: r[0].partition("/")[0] for r in unresolved}
        rows += [GradebookRow(f"{owner_of[r[0]]}--{r[0].partition('/')[2]}", lab, "", "",
                              "not graded", "", f"no commit of record: {r[2]}")
                 for r in unresolved]
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    write_gradebook(rows, Path(ns.out))
    summary = render_summary(lab, rows, gpu=gpu)
    if ns.final:
        if ns.roster and not Path(ns.roster).is_file():
            raise DispatchError(f"roster {ns.roster!r}: no such file in the kit's checkout (a "
                                f"path relative to the repository root)")
        finals, written = write_final_grades(rows, records, Path(ns.final),
                                             roster=Path(ns.roster) if ns.roster else None,
                                             prefix=ns.prefix or None)
        late = [f for f in finals if f.entry.late_days]
        summary += (f"\nLate policy applied: {len(late)} late submission(s); the final grades "
                    f"(late days, penalty and the calculation per row) are in "
                    f"{', '.join(f'`{p.name}`' for p in written)}.\n")
        for path in written:
            print(f"wrote {path}")
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


def _cmd_class_plan(ns) -> int:
    from msda_labs.classroom.github import GitHub

    org = ns.org if ns.org is not None else os.environ.get("ORG", "")
    prefix = ns.prefix if ns.prefix is not None else os.environ.get("PREFIX", "")
    lab = ns.lab if ns.lab is not None else os.environ.get("LAB", "")
    gpu = ns.gpu or _truthy(os.environ.get("GPU"))
    at_deadline = _truthy(os.environ.get("AT_DEADLINE", "true")) and not ns.latest
    client = GitHub()
    if not client.token:
        raise DispatchError("no token for GitHub's API: the plan lists the organisation's "
                            "repositories with GH_TOKEN (the STUDENT_REPOS_TOKEN secret, with "
                            "Metadata, Contents and Actions: read)")
    out = Path(ns.out)

    def progress(item):
        status = item.record.note() if item.record is not None else item.error
        print(f"  {item.repo.full_name:<45} {status}")

    max_jobs = parse_max_jobs(ns.max_jobs if ns.max_jobs is not None
                              else os.environ.get("MAX_JOBS"))
    result = class_plan(client, org, prefix, lab, at_deadline=at_deadline, gpu=gpu, out=out,
                        progress=progress, max_jobs=max_jobs)
    import csv

    with open(out / "unresolved.csv", newline="") as fh:
        unresolved = list(csv.reader(fh))[1:]
    jobs = len(result["include"])
    print(f"{result['listed']} repositories listed, {result['planned']} planned in {jobs} "
          f"job(s) of at most {result['batch_size']}, {result['unresolved']} unresolved; "
          f"{client.calls} API calls")
    matrix = json.dumps({"include": result["include"]}, separators=(",", ":"))
    (out / "matrix.json").write_text(matrix + "\n")
    outputs = {"lab": result["lab"], "gpu": json.dumps(result["gpu"]), "matrix": matrix,
               "planned": str(result["planned"])}
    if not write_step_outputs(outputs, blocks=True):
        print(f"matrix: {out / 'matrix.json'}")
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a") as fh:
            fh.write(plan_summary(result, org, prefix, unresolved))
    return 0


def _cmd_fetch(ns) -> int:
    text = ns.submissions if ns.submissions is not None else os.environ.get("SUBMISSIONS", "")
    fetched, failed = fetch_submissions(text, Path(ns.into),
                                        token=os.environ.get("STUDENT_REPOS_TOKEN", ""))
    for sub in fetched:
        print(f"  {sub.label}  ->  {ns.into}/{sub.folder}")
    for line in failed:
        if os.environ.get("GITHUB_ACTIONS") == "true":
            print(f"::error title=Submission not fetched::{line}")
        print(f"not fetched: {line}", file=sys.stderr)
    print(f"{len(fetched)} submission(s) fetched, {len(failed)} not")
    return 0 if fetched else 1


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
            p.add_argument("--plan", metavar="DIR",
                           help="the class plan's artifact (records.json, unresolved.csv): the "
                                "submissions and their commits of record, instead of "
                                "$SUBMISSIONS")
            p.add_argument("--final", metavar="CSV",
                           help="also write the final grades: classroom.yml's late policy "
                                "applied (the columns of `msda_labs gradebook`)")
            p.add_argument("--roster", metavar="CSV",
                           help="with --final: also canvas.csv and moodle.csv beside it")
            p.add_argument("--prefix", help="with --roster: the assignment prefix to strip")
            p.set_defaults(func=_cmd_gradebook)
    c = sub.add_parser("class-plan", help="list, resolve and batch a whole class")
    c.add_argument("--org", help="the organisation (default: $ORG)")
    c.add_argument("--prefix", help="the assignment's repository prefix (default: $PREFIX)")
    c.add_argument("--lab", help="lab id (default: $LAB)")
    c.add_argument("--gpu", action="store_true", help="with the GPU stage (default: $GPU)")
    c.add_argument("--latest", action="store_true",
                   help="the last commit received, not the one at the deadline (default: "
                        "$AT_DEADLINE, true unless 'false')")
    c.add_argument("--max-jobs", help="at most this many regrade jobs, 1 to 256 (default: "
                                      "$MAX_JOBS, else 256)")
    c.add_argument("--out", default="plan", metavar="DIR",
                   help="where records.json, unresolved.csv and matrix.json go")
    c.set_defaults(func=_cmd_class_plan)
    f = sub.add_parser("fetch", help="fetch a batch's submissions at their commits")
    f.add_argument("--submissions", help="owner/repo@sha entries (default: $SUBMISSIONS)")
    f.add_argument("--into", required=True, metavar="DIR")
    f.set_defaults(func=_cmd_fetch)
    ns = parser.parse_args(argv)
    try:
        return ns.func(ns)
    except (DispatchError, KitError) as exc:
        if os.environ.get("GITHUB_ACTIONS") == "true":
            print(f"::error title=Regrade inputs::{exc}")
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
