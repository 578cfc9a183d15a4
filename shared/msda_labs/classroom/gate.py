"""Whether a push is graded when classroom.yml says ``grade_on: throttled``.

The grading workflow runs this file as a script, with the system ``python3`` and before anything
is installed or restored (the standard library only), as the first step after the checkout:

    python3 shared/msda_labs/classroom/gate.py --every 30 --step "Grade lab05"

It writes ``grade=true`` or ``grade=false`` to ``$GITHUB_OUTPUT``; every later step of the job
runs only on ``true``. A run that is not a push (a tag ``submit*``, a release, a manual or a
repository dispatch) is always graded. A push is not graded when a run of this workflow on the
same branch graded (its grading step ran) and started less than ``--every`` minutes ago; the job
summary then says when the next push will be graded and how to get a grade before that.

It reads the branch's runs through the REST API with the job's own ``GITHUB_TOKEN``
(``actions: read``): ``GET /repos/{repo}/actions/runs/{id}`` for the workflow,
``GET /repos/{repo}/actions/workflows/{workflow_id}/runs?branch=...`` for its recent runs and
``GET /repos/{repo}/actions/runs/{id}/jobs`` for whether a run's grading step ran. When the API
cannot be read, the push is graded: a wrong skip would withhold feedback, a wrong grade costs a
minute.

Note what it saves: the job still starts, and GitHub bills every job at least one minute, so a
skipped push costs as much as a graded one whose environment came from the cache. It saves
runner time and keeps a student's burst of pushes from queueing grading runs; the minutes are
saved by ``grade_on: submission`` (docs/instructors.md, section 3).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone

SUBMISSION_EVENTS = ("workflow_dispatch", "repository_dispatch", "release")


def _parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Api:
    def __init__(self, base: str, token: str, timeout: float = 10.0):
        self.base, self.token, self.timeout = base.rstrip("/"), token, timeout

    def get(self, path: str, **query) -> dict:
        url = f"{self.base}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        request = urllib.request.Request(url, headers={
            "Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
            **({"Authorization": f"Bearer {self.token}"} if self.token else {})})
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return json.load(response)


def _graded(api: Api, repo: str, run: dict, step: str) -> bool:
    """Whether the run's grading step ran (not skipped by this gate, not cancelled before it)."""
    jobs = api.get(f"/repos/{repo}/actions/runs/{run['id']}/jobs", per_page=30)
    for job in jobs.get("jobs", []):
        for item in job.get("steps") or []:
            if item.get("name") == step and item.get("conclusion") in ("success", "failure"):
                return True
    return False


def decide(env: dict, every_minutes: int, step: str, api: Api | None = None,
           now: float | None = None) -> tuple[bool, str]:
    """(grade?, why): the decision for the run described by ``env`` (GitHub's variables)."""
    event = env.get("GITHUB_EVENT_NAME", "")
    ref = env.get("GITHUB_REF", "")
    if event in SUBMISSION_EVENTS or ref.startswith("refs/tags/"):
        return True, f"a submission ({event} {ref}) is always graded"
    if event != "push":
        return True, f"event {event!r} is graded"
    repo, run_id = env.get("GITHUB_REPOSITORY", ""), env.get("GITHUB_RUN_ID", "")
    branch = env.get("GITHUB_REF_NAME", "")
    if api is None:
        api = Api(env.get("GITHUB_API_URL") or "https://api.github.com",
                  env.get("GITHUB_TOKEN", ""))
    now = time.time() if now is None else now
    window = every_minutes * 60
    try:
        this = api.get(f"/repos/{repo}/actions/runs/{run_id}")
        runs = api.get(f"/repos/{repo}/actions/workflows/{this['workflow_id']}/runs",
                       branch=branch, per_page=20).get("workflow_runs", [])
        for run in runs:
            if str(run.get("id")) == str(run_id):
                continue
            started = _parse_time(run.get("run_started_at") or run["created_at"])
            if now - started >= window:
                continue  # too old to hold this push back (runs come newest first)
            if run.get("status") == "completed" and _graded(api, repo, run, step):
                when = datetime.fromtimestamp(started, timezone.utc).strftime("%H:%M UTC")
                after = datetime.fromtimestamp(started + window, timezone.utc).strftime(
                    "%H:%M UTC")
                return False, (f"this push is not graded: run {run.get('html_url') or run['id']}"
                               f" graded this branch at {when}, and pushes are graded at most "
                               f"once every {every_minutes} minutes. A push after {after} is "
                               f"graded; before that, grade on your machine (nox -s LAB) or run "
                               f"this workflow by hand (Actions, Autograding Tests, Run "
                               f"workflow), which always grades.")
    except (urllib.error.URLError, OSError, KeyError, ValueError, TypeError) as exc:
        return True, f"graded: the runs of this branch could not be read ({exc})"
    return True, f"no run graded this branch in the last {every_minutes} minutes"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=int, required=True, help="minutes between graded pushes")
    parser.add_argument("--step", required=True, help="the name of the job's grading step")
    parser.add_argument("--lab", default="", help="the lab id, for the message")
    args = parser.parse_args(argv)
    grade, why = decide(dict(os.environ), args.every, args.step)
    why = why.replace("nox -s LAB", f"nox -s {args.lab}" if args.lab else "nox -s labNN")
    print(f"grade={'true' if grade else 'false'}: {why}")
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a") as fh:
            fh.write(f"grade={'true' if grade else 'false'}\n")
    if not grade and os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as fh:
            fh.write(f"## Not graded\n\n{why}\n")
    if not grade:
        print(f"::notice title=Not graded::{why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
