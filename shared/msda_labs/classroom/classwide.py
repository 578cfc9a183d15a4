"""A whole class in one command: list the assignment's repositories, resolve each to its commit
of record, and regrade them all.

    python -m msda_labs class plan --org ORG --prefix lab-05- --lab lab05 --out plan/
    python -m msda_labs class regrade --org ORG --prefix lab-05- --lab lab05 --json lab05.json

``plan`` lists the organisation's repositories whose name starts with the assignment's prefix
(GitHub's REST API, 100 a page, every page), resolves each to its commit of record for the
lab's due date from GitHub's server times (:mod:`msda_labs.classroom.deadline`), and splits the
class into dispatches of the regrade workflow (``.github/workflows/regrade.yml``) of at most
256 submissions each: a matrix generates at most 256 jobs per workflow run (GitHub's *Actions
limits*, https://docs.github.com/en/actions/reference/limits, and *Workflow syntax*,
``jobs.<job_id>.strategy.matrix``). It writes ``dispatch-NN.txt`` (the ``submissions`` input of
one run: ``owner/repo@<40-hex SHA>`` lines), ``records.json`` (every student's commit of record,
its server time and late days, for ``gradebook --records``), ``unresolved.csv`` (repositories
with nothing received by the cutoff) and ``dispatch.sh`` (one ``gh workflow run`` per file;
the runs queue one after another). A class of 1,000 is four runs.

``regrade`` does the same on this machine, clone-free: each ``labNN.py`` at its commit of
record is fetched through the API and regraded (:mod:`msda_labs.classroom.record`).
"""

from __future__ import annotations

import csv
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from msda_labs.classroom import deadline
from msda_labs.classroom.github import ClassRepo, list_class_repos

__all__ = ["Resolved", "resolve_class", "split", "write_plan", "write_records", "MATRIX_LIMIT"]

# A matrix generates at most 256 jobs per workflow run (GitHub's Actions limits): the regrade
# workflow's own cap on one dispatch (msda_labs.classroom.dispatch.MAX_SUBMISSIONS).
MATRIX_LIMIT = 256


@dataclass
class Resolved:
    repo: ClassRepo
    record: deadline.CommitOfRecord | None
    error: str = ""

    @property
    def folder(self) -> str:
        """The regrade workflow's folder (and gradebook name) for this submission."""
        return f"{self.repo.owner}--{self.repo.name}"

    @property
    def entry(self) -> str:
        return f"{self.repo.full_name}@{self.record.sha}"


def resolve_class(client, org: str, prefix: str, due, cutoff, *,
                  progress=None, deadline_of=None) -> list[Resolved]:
    """Every repository of the assignment with its commit of record (or why it has none).
    ``deadline_of(student)``, when given, is the (due, cutoff) of one student (an extension),
    or None for the lab's own."""
    resolved = []
    for repo in list_class_repos(client, org, prefix):
        own = deadline_of(repo.student) if deadline_of is not None else None
        try:
            record = deadline.server_record(client, repo.owner, repo.name, repo.default_branch,
                                            *(own or (due, cutoff)))
            item = Resolved(repo, record, "" if record.found else record.note())
        except (deadline.DeadlineError, ValueError, OSError) as exc:
            item = Resolved(repo, None, str(exc))
        except Exception as exc:  # noqa: BLE001 - e.g. a GitHubError: one repository only
            item = Resolved(repo, None, f"{type(exc).__name__}: {exc}")
        resolved.append(item)
        if progress is not None:
            progress(item)
    return resolved


def split(items: list, size: int = MATRIX_LIMIT) -> list[list]:
    """``items`` in consecutive chunks of at most ``size`` (one workflow run each)."""
    if size < 1 or size > MATRIX_LIMIT:
        raise ValueError(f"a dispatch holds 1 to {MATRIX_LIMIT} submissions, not {size}")
    return [items[i:i + size] for i in range(0, len(items), size)]


def write_plan(resolved: list[Resolved], lab: str, out: Path, *, size: int = MATRIX_LIMIT,
               gpu: bool = False, workflow: str = "regrade.yml") -> dict:
    """Write the dispatch lists, the records, the unresolved list and the script; returns a
    summary (``dispatches``: the submission counts, ``planned``, ``unresolved``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ready = [r for r in resolved if r.record is not None and r.record.found]
    chunks = split(ready, size)
    # The lists are read beside the script, from whatever folder it is run (sh plan/dispatch.sh),
    # and a list that cannot be read stops it (set -e stops at a failed assignment, not at a
    # failed $(cat) inside gh's arguments, which would send an empty list).
    script = ["#!/bin/sh", "# One run of the regrade workflow per file; GitHub queues them.",
              "set -e", 'cd "$(dirname "$0")"']
    for i, chunk in enumerate(chunks, start=1):
        name = f"dispatch-{i:02d}.txt"
        (out / name).write_text("".join(f"{r.entry}\n" for r in chunk))
        script.append(f"submissions=\"$(cat {shlex.quote(name)})\"")
        script.append(f"gh workflow run {shlex.quote(workflow)} -f lab={shlex.quote(lab)} "
                      f"-f gpu={'true' if gpu else 'false'} "
                      f"-f submissions=\"$submissions\"")
    (out / "dispatch.sh").write_text("\n".join(script) + "\n")
    counts = write_records(resolved, lab, out)
    return {"dispatches": [len(c) for c in chunks], **counts}


def write_records(resolved: list[Resolved], lab: str, out: Path) -> dict:
    """``records.json`` (each planned student's commit of record, its server time and late
    days) and ``unresolved.csv`` (each repository without one, and why) in ``out``; returns the
    counts (``listed``, ``planned``, ``unresolved``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ready = [r for r in resolved if r.record is not None and r.record.found]
    records = [{"student": r.folder, "lab": lab, "repository": r.repo.full_name,
                "record": r.record.to_dict()} for r in ready]
    (out / "records.json").write_text(json.dumps(records, indent=2) + "\n")
    planned = {id(r) for r in ready}
    unresolved = [r for r in resolved if id(r) not in planned]
    with open(out / "unresolved.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["repository", "student", "why"])
        for r in unresolved:
            writer.writerow([r.repo.full_name, r.repo.student, r.error])
    return {"planned": len(ready), "unresolved": len(unresolved), "listed": len(resolved)}
