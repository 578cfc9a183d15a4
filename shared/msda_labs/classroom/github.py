"""The few GitHub REST API calls the grade of record needs, through a transport that tests replace.

Every time this module returns was set by GitHub's server: when a workflow run was created, or
when a push event was recorded. Nothing here reads a commit's own dates, which a student sets.

The calls and the shapes read, as GitHub documents them:

* ``GET /orgs/{org}/repos`` (*List organization repositories*,
  https://docs.github.com/en/rest/repos/repos#list-organization-repositories): a list of
  repository objects; read ``name``, ``full_name``, ``owner.login``, ``default_branch``,
  ``archived``, ``is_template``. ``per_page`` is at most 100.
* ``GET /repos/{owner}/{repo}/actions/runs`` (*List workflow runs for a repository*,
  https://docs.github.com/en/rest/actions/workflow-runs#list-workflow-runs-for-a-repository):
  ``{"total_count": N, "workflow_runs": [...]}``; read each run's ``head_sha``, ``head_branch``,
  ``event`` and ``created_at``. With a ``branch`` filter the API returns at most 1,000 runs.
* ``GET /repos/{owner}/{repo}/events`` (*List repository events*,
  https://docs.github.com/en/rest/activity/events#list-repository-events): a list of events;
  read ``type == "PushEvent"``, ``created_at`` and the payload's ``ref`` and ``head`` (*GitHub
  event types*, https://docs.github.com/en/rest/using-the-rest-api/github-event-types#pushevent).
  Only events of the past 90 days are listed, at most 300.
* ``GET /repos/{owner}/{repo}/contents/{path}?ref=SHA`` (*Get repository content*,
  https://docs.github.com/en/rest/repos/contents#get-repository-content): ``type``, ``encoding``
  (``base64``) and ``content`` of one file at one commit.

Pages follow the ``Link`` header's ``rel="next"`` URL (*Using pagination in the REST API*,
https://docs.github.com/en/rest/using-the-rest-api/using-pagination-in-the-rest-api).

Recorded responses: with ``MSDA_GITHUB_REPLAY=DIR`` in the environment, every call is answered
from the folder ``DIR`` instead of the network (:func:`replay_transport`), and a call that was
not recorded fails as a 404 that names it. Each response is one file, ``<key>.json`` (the key:
:func:`response_key` of the request's full URL), holding ``url``, ``status``, ``headers`` (the
``Link`` header of a page among them) and ``body`` (the JSON GitHub sent).
:func:`recording_transport` writes such a folder from any other transport. The workflow tests
use it to run the whole-class regrade under act, which has no network; no workflow sets it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from msda_labs.errors import KitError

__all__ = ["GitHubError", "GitHub", "ClassRepo", "urllib_transport", "next_link",
           "list_class_repos", "workflow_runs", "push_events", "file_at", "API", "REPLAY_ENV",
           "response_key", "replay_transport", "recording_transport", "default_transport"]

API = "https://api.github.com"
PER_PAGE = 100
_MAX_PAGES = 100  # 10,000 items: more than any list this module reads

# transport(url, headers) -> (status, response headers, body bytes)
Transport = Callable[[str, dict], tuple[int, dict, bytes]]


class GitHubError(KitError, RuntimeError):
    """A GitHub API call failed; the message names the call and GitHub's answer."""


class _SameHost(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to the same https host: the token never leaves api.github.com."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        old, new = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)
        if new.scheme != "https" or new.netloc != old.netloc:
            raise GitHubError(f"GET {old.path}: redirected to {new.scheme}://{new.netloc}, "
                              f"not followed")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def urllib_transport(url: str, headers: dict) -> tuple[int, dict, bytes]:
    """The real network (only used outside the tests)."""
    request = urllib.request.Request(url, headers=headers)
    opener = urllib.request.build_opener(_SameHost)
    try:
        with opener.open(request, timeout=60) as response:
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read()


REPLAY_ENV = "MSDA_GITHUB_REPLAY"


def response_key(url: str) -> str:
    """The file name (without ``.json``) of a recorded response to ``url``."""
    return hashlib.sha256(url.encode()).hexdigest()[:32]


def replay_transport(folder: str | os.PathLike) -> Transport:
    """A transport that answers from a folder of recorded responses (see the module's notes)."""
    root = Path(folder)
    if not root.is_dir():
        raise GitHubError(f"{REPLAY_ENV}={folder}: no such folder of recorded responses")

    def transport(url: str, headers: dict) -> tuple[int, dict, bytes]:
        path = root / f"{response_key(url)}.json"
        if not path.is_file():
            return 404, {}, json.dumps({"message": f"not recorded in {root}: {url}"}).encode()
        saved = json.loads(path.read_text())
        if saved.get("url") != url:
            raise GitHubError(f"{path}: recorded for {saved.get('url')!r}, not {url!r}")
        return int(saved["status"]), dict(saved.get("headers") or {}), \
            json.dumps(saved.get("body")).encode()

    return transport


def recording_transport(inner: Transport, folder: str | os.PathLike) -> Transport:
    """``inner``, writing each response it gives into ``folder`` for :func:`replay_transport`."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)

    def transport(url: str, headers: dict) -> tuple[int, dict, bytes]:
        status, reply, body = inner(url, headers)
        try:
            data = json.loads(body or b"null")
        except ValueError:
            data = None
        keep = {k: v for k, v in reply.items() if k.lower() in ("link", "content-type")}
        (root / f"{response_key(url)}.json").write_text(json.dumps(
            {"url": url, "status": status, "headers": keep, "body": data}))
        return status, reply, body

    return transport


def default_transport() -> Transport:
    """The network, or the recorded responses named by ``$MSDA_GITHUB_REPLAY``."""
    folder = os.environ.get(REPLAY_ENV)
    return replay_transport(folder) if folder else urllib_transport


def next_link(headers: dict) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header, or None on the last page."""
    link = next((v for k, v in headers.items() if k.lower() == "link"), "")
    for part in link.split(","):
        match = re.match(r'\s*<([^>]+)>\s*;\s*rel="([^"]+)"', part)
        if match and match.group(2) == "next":
            return match.group(1)
    return None


class GitHub:
    """A read-only GitHub REST client. ``transport`` does the HTTP (tests pass recorded
    responses); ``token`` defaults to ``$GH_TOKEN`` or ``$GITHUB_TOKEN``."""

    def __init__(self, token: str | None = None, *, transport: Transport | None = None,
                 base: str = API):
        self.token = token if token is not None else (os.environ.get("GH_TOKEN")
                                                      or os.environ.get("GITHUB_TOKEN") or "")
        self.transport = transport or default_transport()
        self.base = base.rstrip("/")
        self.calls = 0

    def _url(self, path: str, params: dict | None) -> str:
        url = path if path.startswith("http") else f"{self.base}{path}"
        if params:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(params)
        return url

    def get(self, path: str, params: dict | None = None) -> tuple[object, dict]:
        url = self._url(path, params)
        if not url.startswith(self.base + "/"):
            raise GitHubError(f"refusing to follow {url}: not under {self.base}")
        headers = {"Accept": "application/vnd.github+json",
                   "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "msda-labs"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self.calls += 1
        status, response_headers, body = self.transport(url, headers)
        try:
            data = json.loads(body or b"null")
        except ValueError:
            data = None
        if status != 200:
            message = data.get("message", "") if isinstance(data, dict) else ""
            lower = {k.lower(): v for k, v in response_headers.items()}
            if status in (403, 429) and lower.get("x-ratelimit-remaining") == "0":
                reset = lower.get("x-ratelimit-reset", "")
                when = (datetime.fromtimestamp(int(reset), timezone.utc).strftime("%H:%M:%SZ")
                        if reset.isdigit() else "later")
                message = f"the rate limit of this token is used up until {when}; run again then"
            raise GitHubError(f"GET {url.removeprefix(self.base)}: HTTP {status}"
                              + (f" ({message})" if message else ""))
        return data, response_headers

    def pages(self, path: str, params: dict | None = None, *,
              key: str | None = None) -> Iterator[dict]:
        """Every item of a paginated list (``key``: the list's field in an object page)."""
        url: str | None = self._url(path, {**(params or {}), "per_page": PER_PAGE})
        for _ in range(_MAX_PAGES):
            if url is None:
                return
            data, headers = self.get(url)
            items = data.get(key) if key and isinstance(data, dict) else data
            if not isinstance(items, list):
                raise GitHubError(f"GET {url.removeprefix(self.base)}: expected a list"
                                  + (f" in {key!r}" if key else "") + f", got "
                                  f"{type(items).__name__}")
            yield from items
            url = next_link(headers)
        raise GitHubError(f"GET {path}: more than {_MAX_PAGES} pages")


@dataclass(frozen=True)
class ClassRepo:
    """One student's repository of an assignment."""

    owner: str
    name: str
    student: str          # the repository name without the assignment's prefix
    default_branch: str

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


def list_class_repos(client: GitHub, org: str, prefix: str) -> list[ClassRepo]:
    """The organisation's repositories whose name starts with ``prefix`` (the assignment's),
    sorted by name; template and archived repositories are left out."""
    repos = []
    for item in client.pages(f"/orgs/{urllib.parse.quote(org)}/repos", {"type": "all"}):
        name = item.get("name", "")
        if not name.startswith(prefix) or item.get("is_template") or item.get("archived"):
            continue
        student = name[len(prefix):].lstrip("-_") or name
        repos.append(ClassRepo(item.get("owner", {}).get("login", org), name, student,
                               item.get("default_branch") or "main"))
    return sorted(repos, key=lambda r: r.name.lower())


def workflow_runs(client: GitHub, owner: str, repo: str, branch: str) -> list[dict]:
    return list(client.pages(f"/repos/{owner}/{repo}/actions/runs", {"branch": branch},
                             key="workflow_runs"))


def push_events(client: GitHub, owner: str, repo: str) -> list[dict]:
    return [e for e in client.pages(f"/repos/{owner}/{repo}/events")
            if e.get("type") == "PushEvent"]


def file_at(client: GitHub, owner: str, repo: str, path: str, sha: str) -> bytes | None:
    """The bytes of ``path`` at commit ``sha`` (None: no such file there)."""
    try:
        data, _ = client.get(f"/repos/{owner}/{repo}/contents/{urllib.parse.quote(path)}",
                             {"ref": sha})
    except GitHubError as exc:
        if "HTTP 404" in str(exc):
            return None
        raise
    if not isinstance(data, dict) or data.get("type") != "file":
        return None
    if data.get("encoding") != "base64":
        raise GitHubError(f"{owner}/{repo}:{path}@{sha[:12]}: content in encoding "
                          f"{data.get('encoding')!r}, not base64 (a file over 1 MB?)")
    return base64.b64decode(data.get("content", ""))
