"""A stand-in for the three REST endpoints the throttle gate reads (msda_labs/classroom/gate.py),
served over HTTP on 127.0.0.1 so that the gate's own client, run by act or by a unit test, talks
to it as it would to api.github.com. The objects carry the fields GitHub documents for them
(GET /repos/{owner}/{repo}/actions/runs/{run_id}, GET .../actions/workflows/{id}/runs and
GET .../actions/runs/{run_id}/jobs), those the gate reads included.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORKFLOW_ID = 161335


def iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(run_id: int, repo: str, started: datetime, status: str = "completed",
        branch: str = "main") -> dict:
    return {"id": run_id, "name": "Autograding Tests", "workflow_id": WORKFLOW_ID,
            "head_branch": branch, "event": "push", "status": status,
            "conclusion": "failure" if status == "completed" else None,
            "created_at": iso(started), "run_started_at": iso(started),
            "html_url": f"https://github.com/{repo}/actions/runs/{run_id}"}


def jobs(step: str, graded: bool) -> dict:
    steps = [{"name": "Check out the submission", "status": "completed",
              "conclusion": "success", "number": 1},
             {"name": step, "status": "completed",
              "conclusion": "failure" if graded else "skipped", "number": 2}]
    return {"total_count": 1, "jobs": [{"id": 1, "name": "run-autograding-tests",
                                        "status": "completed", "steps": steps}]}


class RunsApi:
    """``runs``: the branch's earlier runs, newest first, each with whether it graded.

    ``requests`` lists every path asked for (with its query), ``tokens`` the bearer tokens."""

    def __init__(self, repo: str, this_run: int, step: str,
                 earlier: list[tuple[int, datetime, bool]]):
        self.repo, self.this_run, self.step = repo, this_run, step
        now = datetime.now(timezone.utc)
        self.runs = [run(this_run, repo, now, status="in_progress")] + [
            run(run_id, repo, started) for run_id, started, _ in earlier]
        self.graded = {run_id: graded for run_id, _, graded in earlier}
        self.requests: list[str] = []
        self.tokens: list[str] = []
        self.repos: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                api.requests.append(self.path)
                api.tokens.append(self.headers.get("Authorization", ""))
                body, code = api.answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, raw: str) -> tuple[dict, int]:
        path = urllib.parse.urlsplit(raw).path
        match = re.match(r"^/repos/([^/]+/[^/]+)/actions/", path)
        if match is None:
            return {"message": "Not Found"}, 404
        self.repos.append(match.group(1))  # act names the repository after its git remote
        base = f"/repos/{match.group(1)}/actions"
        if path == f"{base}/runs/{self.this_run}":
            return self.runs[0], 200
        if path == f"{base}/workflows/{WORKFLOW_ID}/runs":
            return {"total_count": len(self.runs), "workflow_runs": self.runs}, 200
        for run_id, graded in self.graded.items():
            if path == f"{base}/runs/{run_id}/jobs":
                return jobs(self.step, graded), 200
        return {"message": "Not Found"}, 404

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def minutes_ago(minutes: float) -> datetime:
    return datetime.now(timezone.utc) - timedelta(minutes=minutes)
