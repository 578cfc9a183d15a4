"""Folders of recorded GitHub responses (``MSDA_GITHUB_REPLAY``) written from the stand-in.

The class workflow's plan calls GitHub's API; under act there is no network, so the plan reads
the responses from a folder instead (msda_labs.classroom.github.replay_transport). The folder
is written here by making the plan's own calls against the stand-in (github_fake.FakeGitHub,
whose objects are GitHub's documented examples) through the recording transport, and every
recorded object is checked against the documented shapes before any test uses it.
"""

from __future__ import annotations

import json
from pathlib import Path

from github_fake import DOCUMENTED, PUSH_PAYLOAD, FakeGitHub

from msda_labs.classroom import github


def record_class(fake: FakeGitHub, folder: Path, org: str, prefix: str) -> int:
    """Record every response the class plan asks for (the organisation's pages, then each
    repository's runs and events); returns the number of files written."""
    client = github.GitHub("recording", transport=github.recording_transport(fake.transport,
                                                                             folder))
    for repo in github.list_class_repos(client, org, prefix):
        github.workflow_runs(client, repo.owner, repo.name, repo.default_branch)
        github.push_events(client, repo.owner, repo.name)
    return len(list(Path(folder).glob("*.json")))


def _shape(obj: dict, kind: str) -> None:
    for key, expected in DOCUMENTED[kind].items():
        assert isinstance(obj.get(key), expected), f"{kind}: {key} is not a {expected.__name__}"


def check_shapes(folder: Path) -> dict[str, int]:
    """Every recorded body is a documented shape: a page of organisation repositories, a
    ``workflow_runs`` object, or a page of events (PushEvent payloads typed as documented).
    Returns how many objects of each kind were checked."""
    seen = {"org-repo": 0, "workflow-run": 0, "push-event": 0}
    for path in sorted(Path(folder).glob("*.json")):
        saved = json.loads(path.read_text())
        assert path.stem == github.response_key(saved["url"]), path
        assert saved["status"] == 200, saved
        url, body = saved["url"], saved["body"]
        if "/orgs/" in url:
            for obj in body:
                _shape(obj, "org-repo")
                seen["org-repo"] += 1
        elif "/actions/runs" in url:
            assert isinstance(body["total_count"], int) and isinstance(body["workflow_runs"],
                                                                       list)
            for obj in body["workflow_runs"]:
                _shape(obj, "workflow-run")
                seen["workflow-run"] += 1
        elif url.split("?")[0].endswith("/events"):
            for obj in body:
                _shape(obj, "push-event")
                assert {k: type(v) for k, v in obj["payload"].items()} == PUSH_PAYLOAD
                seen["push-event"] += 1
        else:
            raise AssertionError(f"an unexpected call was recorded: {url}")
    return seen


def thousand_students(org: str = "course") -> tuple[FakeGitHub, dict[str, str]]:
    """1,000 repositories of lab-05- (with a template and another assignment's among them):
    student i pushed a commit before the due date, every tenth one pushed another inside the
    late window, and the last one only pushed after the window. Returns the stand-in and the
    commit of record each planned repository must get."""
    fake = FakeGitHub(org)
    fake.add_repo("lab-05-forward-correct", is_template=True)
    expected = {}
    for i in range(1000):
        full = fake.add_repo(f"lab-05-s{i:04d}")
        early, late = f"{i:04d}".ljust(40, "a"), f"{i:04d}".ljust(40, "b")
        if i == 999:
            fake.add_run(full, late, "2026-12-01T10:00:00Z")  # after the late window
            continue
        fake.add_run(full, early, "2026-11-19T10:00:00Z")
        if i % 10 == 0:
            fake.add_push(full, late, "2026-11-21T10:00:00Z", before=early)
        expected[full] = late if i % 10 == 0 else early
    for i in range(30):
        fake.add_repo(f"lab-06-s{i:04d}")
    return fake, expected
