"""A stand-in for GitHub's REST API: the transport that msda_labs.classroom.github.GitHub calls.

Every object it serves is built from one of the templates in data/github/ (a repository of an
organisation, a workflow run, a PushEvent, a file's contents), each shaped like the example of
GitHub's documentation (the pages named in msda_labs/classroom/github.py), with placeholders
``{{name}}`` filled per object. Lists are served 100 a page (``per_page``) with a ``Link``
header whose ``rel="next"`` points at the next page, as GitHub paginates them. Nothing here
touches the network.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "github"
API = "https://api.github.com"

# The keys of each object as GitHub documents them (those the kit reads are checked to be there,
# with their JSON types): the shape check of the templates.
DOCUMENTED = {
    "org-repo": {"id": int, "name": str, "full_name": str, "owner": dict, "private": bool,
                 "default_branch": str, "archived": bool, "is_template": bool, "url": str},
    "workflow-run": {"id": int, "head_branch": str, "head_sha": str, "event": str,
                     "status": str, "created_at": str, "run_number": int, "workflow_id": int,
                     "head_commit": dict, "repository": dict, "run_attempt": int},
    "push-event": {"id": str, "type": str, "actor": dict, "repo": dict, "payload": dict,
                   "public": bool, "created_at": str},
    "contents-file": {"type": str, "encoding": str, "content": str, "path": str, "sha": str},
}
PUSH_PAYLOAD = {"repository_id": int, "push_id": int, "ref": str, "head": str, "before": str}


def build(template: str, **values) -> dict:
    text = (DATA / f"{template}.json").read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", json.dumps(str(value))[1:-1])
    assert "{{" not in text, f"{template}: placeholders left: {text[text.index('{{'):][:40]}"
    return json.loads(text)


class FakeGitHub:
    """Repositories, their workflow runs, push events and files; ``transport`` serves them."""

    def __init__(self, org: str = "course"):
        self.org = org
        self.repos: list[dict] = []
        self.runs: dict[str, list[dict]] = {}
        self.events: dict[str, list[dict]] = {}
        self.files: dict[tuple[str, str, str], bytes] = {}
        self.requests: list[str] = []

    def add_repo(self, name: str, **overrides) -> str:
        repo = build("org-repo", owner=self.org, name=name)
        repo.update(overrides)
        self.repos.append(repo)
        return repo["full_name"]

    def add_run(self, full_name: str, sha: str, created_at: str, *, event: str = "push",
                branch: str = "main", commit_date: str = "2000-01-01T00:00:00Z") -> None:
        run = build("workflow-run", repo=full_name, name=full_name.split("/")[1], head_sha=sha,
                    created_at=created_at, event=event, title="submit", login="student",
                    commit_date=commit_date)
        run["head_branch"] = branch
        run["id"] = run["run_number"] = len(self.runs.get(full_name, [])) + 1
        self.runs.setdefault(full_name, []).insert(0, run)  # newest first, as GitHub lists them

    def add_push(self, full_name: str, sha: str, created_at: str, *, before: str = "0" * 40,
                 ref: str = "refs/heads/main") -> None:
        event = build("push-event", repo=full_name, owner=full_name.split("/")[0],
                      head_sha=sha, before=before, created_at=created_at, login="student")
        event["payload"]["ref"] = ref
        self.events.setdefault(full_name, []).insert(0, event)

    def add_file(self, full_name: str, path: str, sha: str, data: bytes) -> None:
        self.files[full_name, path, sha] = data

    # ----------------------------------------------------------------------------- transport

    def _page(self, items: list, url: urllib.parse.SplitResult, query: dict):
        per_page = int(query.get("per_page", 30))
        page = int(query.get("page", 1))
        chunk = items[(page - 1) * per_page: page * per_page]
        headers = {"Content-Type": "application/json"}
        if page * per_page < len(items):
            following = dict(query, page=str(page + 1))
            link = f"{API}{url.path}?{urllib.parse.urlencode(following)}"
            headers["Link"] = f'<{link}>; rel="next", <{link}>; rel="last"'
        return chunk, headers

    def transport(self, address: str, headers: dict) -> tuple[int, dict, bytes]:
        assert address.startswith(API + "/"), address
        assert headers.get("Accept") == "application/vnd.github+json"
        self.requests.append(address)
        url = urllib.parse.urlsplit(address)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = url.path.strip("/").split("/")
        body: object
        reply = {"Content-Type": "application/json"}
        if parts[:1] == ["orgs"] and parts[2:] == ["repos"] and parts[1] == self.org:
            body, reply = self._page(self.repos, url, query)
        elif parts[:1] == ["repos"] and parts[3:] == ["actions", "runs"]:
            runs = [r for r in self.runs.get(f"{parts[1]}/{parts[2]}", [])
                    if "branch" not in query or r["head_branch"] == query["branch"]]
            chunk, reply = self._page(runs, url, query)
            body = {"total_count": len(runs), "workflow_runs": chunk}
        elif parts[:1] == ["repos"] and parts[3:] == ["events"]:
            body, reply = self._page(self.events.get(f"{parts[1]}/{parts[2]}", []), url, query)
        elif parts[:1] == ["repos"] and parts[3:4] == ["contents"]:
            key = (f"{parts[1]}/{parts[2]}", "/".join(parts[4:]), query.get("ref", ""))
            if key not in self.files:
                return 404, reply, b'{"message": "Not Found"}'
            body = build("contents-file", repo=key[0], path=key[1],
                         content=base64.b64encode(self.files[key]).decode())
        else:
            return 404, reply, b'{"message": "Not Found"}'
        return 200, reply, json.dumps(body).encode()
