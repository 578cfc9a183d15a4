"""The commit of record: which commit of a student's repository counts for a lab's due date.

A commit's own dates are no clock: the student sets them (``GIT_COMMITTER_DATE``,
``GIT_AUTHOR_DATE``). The times used here are the server's: when GitHub recorded a push to the
branch (a ``PushEvent``: its ``created_at`` and ``payload.head``), or when it created a workflow
run for the branch (``created_at`` and ``head_sha``). Each is a *sighting*: at that moment the
branch's head was that commit. The commit of record for a cutoff (the due date, or the end of
the late window) is the head at the last sighting at or before the cutoff; the time it was
received is its first sighting; a commit first received after the due date is late by whole
days, each started day counting (1 minute late is 1 day).

Without any server time (a folder of local clones with no GitHub remote, or no token), the
commit dates are used instead, and the result says so in a warning that every report repeats.
"""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from msda_labs.errors import KitError

__all__ = ["DeadlineError", "Sighting", "CommitOfRecord", "late_days", "parse_time",
           "from_runs", "from_push_events", "from_commit_dates", "commit_of_record",
           "server_record", "local_record", "github_remote", "materialise", "COMMIT_DATES"]

COMMIT_DATES = ("no server time: the commit dates were used, which the student can set "
                "(GIT_COMMITTER_DATE); regrade from GitHub to use when GitHub received each push")
_DAY = timedelta(days=1)


class DeadlineError(KitError, ValueError):
    """The commit of record cannot be found (no sighting, no such commit in the clone...)."""


def parse_time(text: str) -> datetime:
    """GitHub's ISO 8601 timestamps (``2026-11-20T22:10:05Z``), timezone-aware."""
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no timezone")
    return when


def late_days(received: datetime | None, due: datetime | None) -> int:
    """Whole days late, each started day counting; 0 when on time or without a due date."""
    if received is None or due is None or received <= due:
        return 0
    return math.ceil((received - due) / _DAY)


@dataclass(frozen=True)
class Sighting:
    """At ``at`` (a server time, or a commit date in the fallback) the branch's head was ``sha``."""

    sha: str
    at: datetime
    source: str  # "push event", "workflow run" or "commit date"


def from_runs(runs: list[dict], branch: str) -> list[Sighting]:
    """Sightings from workflow runs of ``branch`` started by a push or a manual dispatch (whose
    ``head_sha`` is the branch's head when the run was created)."""
    seen = []
    for run in runs:
        if run.get("head_branch") != branch or run.get("event") not in ("push",
                                                                          "workflow_dispatch"):
            continue
        sha, created = run.get("head_sha"), run.get("created_at")
        if isinstance(sha, str) and len(sha) == 40 and isinstance(created, str):
            seen.append(Sighting(sha.lower(), parse_time(created), "workflow run"))
    return seen


def from_push_events(events: list[dict], branch: str) -> list[Sighting]:
    """Sightings from ``PushEvent`` entries of the repository's event list for ``branch``."""
    seen = []
    for event in events:
        payload = event.get("payload") or {}
        if event.get("type") != "PushEvent" or payload.get("ref") != f"refs/heads/{branch}":
            continue
        head, created = payload.get("head"), event.get("created_at")
        if isinstance(head, str) and len(head) == 40 and head.strip("0") \
                and isinstance(created, str):
            seen.append(Sighting(head.lower(), parse_time(created), "push event"))
    return seen


def _git(checkout: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise DeadlineError(f"git {' '.join(args[:2])} in {checkout}: "
                            f"{proc.stderr.strip()[:300]}")
    return proc.stdout


def from_commit_dates(checkout: Path, ref: str = "HEAD") -> list[Sighting]:
    """The fallback: each commit of ``ref``'s first-parent history at its committer date."""
    out = _git(checkout, "log", "--first-parent", "--format=%H %cI", ref)
    return [Sighting(sha, datetime.fromisoformat(when), "commit date")
            for sha, when in (line.split() for line in out.splitlines() if line.strip())]


@dataclass
class CommitOfRecord:
    """The commit graded for one student and lab, and what the deadline says of it."""

    sha: str                         # "" when nothing was received by the cutoff
    received_at: datetime | None     # its first sighting
    server_time: bool                # False: commit dates (the fallback)
    sources: list[str] = field(default_factory=list)
    due: datetime | None = None
    cutoff: datetime | None = None
    late_days: int = 0
    warning: str = ""

    @property
    def found(self) -> bool:
        return bool(self.sha)

    def to_dict(self) -> dict:
        data = asdict(self)
        for key in ("received_at", "due", "cutoff"):
            data[key] = data[key].isoformat() if data[key] else ""
        return data

    @classmethod
    def from_dict(cls, data: dict) -> CommitOfRecord:
        def when(key):
            return datetime.fromisoformat(data[key]) if data.get(key) else None
        return cls(sha=data.get("sha", ""), received_at=when("received_at"),
                   server_time=bool(data.get("server_time")), sources=list(data.get("sources",
                                                                                  [])),
                   due=when("due"), cutoff=when("cutoff"), late_days=int(data.get("late_days", 0)),
                   warning=data.get("warning", ""))

    def note(self) -> str:
        """One line for the gradebook's note and the report."""
        if not self.found:
            return (f"nothing received by {_fmt(self.cutoff)}" if self.cutoff
                    else "no commit found")
        clock = "received" if self.server_time else "commit date (not a server time)"
        text = f"commit of record {self.sha[:12]}, {clock} {_fmt(self.received_at)}"
        if self.due is not None:
            text += (f", {self.late_days} day(s) late (due {_fmt(self.due)})" if self.late_days
                     else f", on time (due {_fmt(self.due)})")
        return text + (f"; WARNING: {self.warning}" if self.warning else "")


def _fmt(when: datetime | None) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ") if when else ""


def commit_of_record(sightings: list[Sighting], due: datetime | None,
                     cutoff: datetime | None, *, server_time: bool = True) -> CommitOfRecord:
    """The head at the last sighting at or before ``cutoff`` (no cutoff: the last sighting),
    received at that commit's first sighting; late days against ``due``."""
    usable = sorted((s for s in sightings if cutoff is None or s.at <= cutoff),
                    key=lambda s: s.at)
    warning = "" if server_time else COMMIT_DATES
    if not usable:
        return CommitOfRecord("", None, server_time, [], due, cutoff, 0, warning)
    sha = usable[-1].sha
    first = min((s for s in sightings if s.sha == sha), key=lambda s: s.at)
    sources = sorted({s.source for s in sightings if s.sha == sha})
    return CommitOfRecord(sha, first.at, server_time, sources, due, cutoff,
                          late_days(first.at, due), warning)


def server_record(client, owner: str, repo: str, branch: str, due: datetime | None,
                  cutoff: datetime | None, *, head: str | None = None) -> CommitOfRecord:
    """The commit of record from GitHub's server times (workflow runs and push events).
    ``head``: the branch's head in a clone; when GitHub's lists never show it, the record
    warns (push events are kept 90 days; runs can be deleted)."""
    from msda_labs.classroom.github import push_events, workflow_runs

    sightings = from_runs(workflow_runs(client, owner, repo, branch), branch)
    sightings += from_push_events(push_events(client, owner, repo), branch)
    record = commit_of_record(sightings, due, cutoff)
    if not sightings:
        record.warning = (f"GitHub lists no push event and no workflow run of {branch}: "
                          f"nothing can be shown to have been received")
    elif head and head not in {s.sha for s in sightings}:
        record.warning = (f"the clone's {branch} ({head[:12]}) appears in no push event or "
                          f"workflow run GitHub lists (events are kept 90 days): when it was "
                          f"received is unknown, so it was not considered")
    return record


def github_remote(checkout: Path) -> tuple[str, str] | None:
    """``(owner, repo)`` of a clone whose ``origin`` is on github.com, else None."""
    proc = subprocess.run(["git", "-C", str(checkout), "remote", "get-url", "origin"],
                          capture_output=True, text=True)
    url = re.sub(r"^https://[^/@]*@", "https://", proc.stdout.strip())  # a token in the URL
    for prefix in ("https://github.com/", "git@github.com:", "ssh://git@github.com/"):
        if url.startswith(prefix):
            path = url[len(prefix):].removesuffix("/").removesuffix(".git")
            owner, _, repo = path.partition("/")
            if owner and repo and "/" not in repo:
                return owner, repo
    return None


def _branch_of(checkout: Path) -> str:
    """The clone's branch; for a detached head, origin's default branch (else ``main``)."""
    branch = _git(checkout, "rev-parse", "--abbrev-ref", "HEAD").strip()
    if branch != "HEAD":
        return branch
    proc = subprocess.run(["git", "-C", str(checkout), "symbolic-ref", "--short",
                           "refs/remotes/origin/HEAD"], capture_output=True, text=True)
    return proc.stdout.strip().removeprefix("origin/") if proc.returncode == 0 else "main"


def local_record(checkout: Path, due: datetime | None, cutoff: datetime | None, *,
                 client=None, branch: str | None = None) -> CommitOfRecord:
    """The commit of record of a local clone: from GitHub's server times when ``client`` is
    given and the clone's ``origin`` is on github.com, else from the commit dates (with the
    warning). The commit must be in the clone."""
    checkout = Path(checkout)
    if not (checkout / ".git").exists():
        raise DeadlineError(f"{checkout} is not a git clone: there is no history to pick the "
                            f"commit of record from")
    remote = github_remote(checkout) if client is not None else None
    if remote is not None:
        branch = branch or _branch_of(checkout)
        head = _git(checkout, "rev-parse", "HEAD").strip()
        record = server_record(client, *remote, branch, due, cutoff, head=head)
        if record.found and subprocess.run(
                ["git", "-C", str(checkout), "cat-file", "-e", f"{record.sha}^{{commit}}"],
                capture_output=True).returncode != 0:
            raise DeadlineError(f"the commit of record {record.sha[:12]} (received "
                                f"{_fmt(record.received_at)}) is not in {checkout}: "
                                f"git -C {checkout} fetch origin {record.sha}")
        return record
    record = commit_of_record(from_commit_dates(checkout), due, cutoff, server_time=False)
    if client is not None:
        record.warning = ("the clone's origin is not on github.com, so " + record.warning)
    return record


def materialise(checkout: Path, sha: str, dest: Path, *, limit: int = 64 << 20) -> Path:
    """The files of commit ``sha`` written to ``dest`` (a new folder), read from the clone's
    object store: the clone itself is not written to (no checkout, no worktree, no index), and
    none of its attributes or filters apply. Only regular files are written (links and
    submodules are left out, as are files over ``limit`` bytes and paths that would leave
    ``dest``)."""
    listing = subprocess.run(["git", "-C", str(checkout), "ls-tree", "-r", "-z", "--full-tree",
                              f"{sha}^{{commit}}"], capture_output=True)
    if listing.returncode != 0:
        raise DeadlineError(f"cannot read commit {sha[:12]} of {checkout}: "
                            f"{listing.stderr.decode(errors='replace').strip()[:300]}")
    files = []
    for item in listing.stdout.split(b"\0"):
        if not item:
            continue
        meta, _, raw_path = item.partition(b"\t")
        mode, kind, blob = meta.split()
        path = raw_path.decode("utf-8", errors="surrogateescape")
        parts = path.split("/")
        if kind != b"blob" or mode not in (b"100644", b"100755") or path.startswith("/") \
                or any(p in ("", ".", "..", ".git") for p in parts):
            continue
        files.append((blob.decode(), path, mode == b"100755"))
    dest.mkdir(parents=True)
    with subprocess.Popen(["git", "-C", str(checkout), "cat-file", "--batch"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        for blob, path, executable in files:
            proc.stdin.write(blob.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            size = int(header[2])
            if size > limit:
                while size > 0:  # read past it, a MiB at a time
                    size -= len(proc.stdout.read(min(size, 1 << 20)))
                proc.stdout.read(1)
                continue
            data = proc.stdout.read(size)
            proc.stdout.read(1)  # the newline after each object
            target = dest.joinpath(*path.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            if executable:
                target.chmod(0o755)
        proc.stdin.close()
    return dest
