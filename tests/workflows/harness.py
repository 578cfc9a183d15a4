"""Run a repository's workflow under act on this host and read what GitHub would show.

:func:`run_act` returns an :class:`ActRun`: the log, act's exit status, each job's result, the
workflow commands the steps printed (``::notice``, ``::error`` with their properties), the job
summaries the steps wrote and the uploaded artifacts (act's artifact folder, filled by the
upload-artifact stand-in or the real action).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from act_env import ActSetup, env_cache_seed, run_toolcache

GIT = ["git", "-c", "user.name=msda-test", "-c", "user.email=msda-test@invalid",
       "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"]
# act's line at a step's end: "✅  Success - Main NAME [1.234s]" (or ❌ Failure, or Post NAME)
_STEP_END = re.compile(r"^\s+\S+\s+(?P<result>Success|Failure|Skipped) - (?P<phase>Main|Post|Pre) "
                       r"(?P<step>.+?)(?: \[(?P<time>[0-9.hmsµn]+)\])?$")
_DURATION = re.compile(r"([0-9.]+)(h|ms|µs|ns|m|s)")  # Go's time.Duration: 1m2.5s, 734.2ms
# act --log-prefix-job-id: "[job id] ..." (a matrix entry: "[job id-N] ...")
_PREFIX = re.compile(r"^\[(?P<job>[^\]]+)\] (?P<rest>.*)$")
_COMMAND = re.compile(r"^\s*(?:\S+\s+)?::(?P<kind>error|warning|notice)(?: (?P<props>[^:]*))?::"
                      r"(?P<message>.*)$")


@dataclass
class Command:
    """One workflow command a step printed (an annotation on GitHub)."""
    kind: str
    props: dict
    message: str
    job: str

    @property
    def line(self) -> str:
        props = ",".join(f"{k}={v}" for k, v in self.props.items())
        return f"::{self.kind}{' ' + props if props else ''}::{self.message}"


@dataclass
class ActRun:
    returncode: int
    log: str
    summaries: list[str]
    artifacts: Path
    seconds: float
    jobs: dict[str, str] = field(default_factory=dict)
    commands: list[Command] = field(default_factory=list)
    stamps: list[tuple[float, str]] = field(default_factory=list)

    def job_seconds(self, job: str, cleanup: bool = False) -> float:
        """The job's own time: from act's first line of the job (setting it up) to the start of
        its "Complete job" step, without act's start or the harness's set-up. ``cleanup``: to
        the job's last line instead, with act deleting the job's folder (on a host runner, the
        restored environment's thousands of files), which a hosted runner never does: its
        machine is thrown away after the job."""
        times, end = [], None
        for t, line in self.stamps:
            match = _PREFIX.match(line.rstrip("\n"))
            if match and match.group("job") == job:
                times.append(t)
                if end is None and match.group("rest").startswith("\u2b50 Run Complete job"):
                    end = t
        if not times:
            return 0.0
        return (times[-1] if cleanup or end is None else end) - times[0]

    def job_lines(self, job: str) -> list[str]:
        out = []
        for line in self.log.splitlines():
            match = _PREFIX.match(line)
            if match and match.group("job") == job:
                out.append(match.group("rest"))
        return out

    def step_output(self, job: str, step: str) -> list[str]:
        """What a step printed (its stdout lines and its workflow commands), as on GitHub.

        act may log a JavaScript action's output after it has logged the step's end, so the
        lines are collected until the next main step (or the job's end), skipping act's own.
        """
        lines, inside = [], False
        for rest in self.job_lines(job):
            if rest.startswith("\u2b50 Run Main ") or rest.startswith("\u2b50 Run Complete job"):
                inside = rest == f"\u2b50 Run Main {step}"
                continue
            if not inside:
                continue
            if rest.startswith("  | "):
                lines.append(rest[4:])
            elif rest == "  |":
                lines.append("")
            elif (match := re.match(r"^\s+\S+\s+(::.*)$", rest)):
                lines.append(match.group(1))
        return lines

    def steps(self, job: str) -> dict[str, tuple[str, float]]:
        """Each step that ran in ``job`` (its Main phase): name -> (Success/Failure, seconds)."""
        out = {}
        scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}
        for rest in self.job_lines(job):
            match = _STEP_END.match(rest)
            if match and match.group("phase") == "Main":
                seconds = sum(float(n) * scale[u]
                              for n, u in _DURATION.findall(match.group("time") or ""))
                out[match.group("step")] = (match.group("result"), seconds)
        return out

    def notices(self, title: str | None = None) -> list[Command]:
        return [c for c in self.commands if c.kind == "notice"
                and (title is None or c.props.get("title") == title)]

    def file_annotations(self) -> list[Command]:
        return [c for c in self.commands if "file" in c.props]

    def artifact(self, name: str, file: str) -> Path:
        return self.artifacts / name / file

    def tail(self, chars: int = 6000) -> str:
        return self.log[-chars:]


def _parse_props(text: str | None) -> dict:
    props = {}
    for part in (text or "").split(","):
        if "=" in part:
            key, _, value = part.partition("=")
            props[key.strip()] = value
    return props


def copy_working_tree(source: Path, dest: Path) -> None:
    """Copy into ``dest`` the files of the git working tree ``source`` that a fresh clone of it
    would hold, as they are now (tracked and untracked-not-ignored): the kit as CI checks it out."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=source,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        path = source / rel
        if path.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / rel)


def commit_all(repo: Path, message: str, date: str | None = None) -> None:
    env = {**os.environ}
    if date:
        env.update(GIT_COMMITTER_DATE=date, GIT_AUTHOR_DATE=date)
    if not (repo / ".git").exists():
        subprocess.run([*GIT, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-q", "--allow-empty", "-m", message], cwd=repo, check=True,
                   env=env)


def run_act(setup: ActSetup, repo: Path, work: Path, *, event: str = "push",
            payload: dict | None = None, job: str | None = None,
            inputs: dict | None = None, secrets: dict | None = None,
            env: dict | None = None, extra_args: list[str] | None = None,
            timeout: float = 900, cache_server: Path | None = None,
            bare: str = "") -> ActRun:
    """Run ``act EVENT`` in ``repo`` with the pinned actions, on the host.

    act's cache server (what actions/cache talks to) starts from a copy of the grading
    environment's seed (:func:`ensure_env_cache`), or uses ``cache_server`` itself when given
    (kept after the run). ``bare``: the job's Python without the shared packages (see
    act_env.run_toolcache)."""
    work.mkdir(parents=True, exist_ok=True)
    # act's per-run folder (the workspace copy, the checkouts) and the run's tool cache lie in a
    # folder open to other users, removed afterwards: a grading run as root drops each child to a
    # uid of its own, which must reach the job's Python and checkouts (pytest's temporary
    # folders are closed to other users).
    scratch = Path(tempfile.mkdtemp(prefix="msda-act-run-"))
    scratch.chmod(0o755)
    cache = scratch / "xdg-cache"
    summary_log = work / "summaries.md"
    summary_log.unlink(missing_ok=True)
    artifacts = work / "artifacts"
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir()
    name = repo.name
    event_file = work / "event.json"
    event_file.write_text(json.dumps(payload or {
        "ref": "refs/heads/main",
        "repository": {"full_name": f"course/{name}", "name": name, "owner": {"login": "course"}},
    }))
    toolcache = run_toolcache(setup.toolcache, scratch / "toolcache", bare=bare)
    if cache_server is None:
        cache_server = copy_cache_server(env_cache_seed(), scratch / "actcache")
    cmd = [str(setup.act), event, "-P", "ubuntu-latest=-self-hosted",
           "-P", "ubuntu-24.04=-self-hosted", "-e", str(event_file), *setup.mappings(),
           "--log-prefix-job-id",
           # one job at a time: the jobs of a run share its tool cache (a matrix would race
           # its pip installs into it); GitHub gives each job a fresh runner instead
           "--concurrent-jobs", "1",
           "--cache-server-path", str(cache_server),
           "--env", f"RUNNER_TOOL_CACHE={toolcache}",
           "--env", f"AGENT_TOOLSDIRECTORY={toolcache}",
           "--env", f"MSDA_ACT_SUMMARY_LOG={summary_log}",
           "--env", f"MSDA_ACT_ARTIFACTS={artifacts}"]
    cmd += list(extra_args or [])
    if job:
        cmd += ["-j", job]
    for key, value in (inputs or {}).items():
        cmd += ["--input", f"{key}={value}"]
    for key, value in (secrets or {}).items():
        cmd += ["-s", f"{key}={value}"]
    if not setup.torch_index_reachable:
        # the workflows name download.pytorch.org/whl/cpu; where it cannot be reached, pip would
        # retry it five times (with back-off) before using the wheels this machine has
        cmd += ["--env", "PIP_RETRIES=0"]
    for key, value in (env or {}).items():
        cmd += ["--env", f"{key}={value}"]
    run_env = setup.env()
    run_env["XDG_CACHE_HOME"] = str(cache)
    run_env["RUNNER_TOOL_CACHE"] = str(toolcache)
    started = time.monotonic()
    stamps: list[tuple[float, str]] = []  # (seconds since act started, line) as act prints them
    proc = subprocess.Popen(cmd, cwd=repo, env=run_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")

    def pump():
        for line in proc.stdout:
            stamps.append((time.monotonic() - started, line))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
        late = ""
    except subprocess.TimeoutExpired:
        proc.kill()
        code, late = -9, f"\n[harness] act ran past {timeout} s\n"
    finally:
        reader.join(30)
        seconds = time.monotonic() - started  # act's own wall time, not the clean-up below
        shutil.rmtree(scratch, ignore_errors=True)
    log = "".join(line for _, line in stamps) + late
    (work / "act.log").write_text(log)
    summaries = []
    if summary_log.is_file():
        summaries = [s.strip() for s in summary_log.read_text().split(
            "<!-- end of a step's summary -->") if s.strip()]
    run = ActRun(returncode=code, log=log, summaries=summaries, artifacts=artifacts,
                 seconds=seconds, stamps=stamps)
    for line in log.splitlines():
        match = _PREFIX.match(line)
        if not match:
            continue
        rest = match.group("rest")
        if rest.startswith("\U0001F3C1  Job "):
            run.jobs[match.group("job")] = rest.split("Job ", 1)[1].strip()
        command = _COMMAND.match(rest)
        if command and not rest.lstrip().startswith("|"):
            run.commands.append(Command(command.group("kind"), _parse_props(command.group("props")),
                                        command.group("message"), match.group("job")))
    return run


def copy_cache_server(seed: Path, dest: Path) -> Path:
    """A private copy of act's cache-server folder ``seed`` (its database copied, the cached
    archives hard-linked: act only reads them), or an empty folder when there is no seed."""
    dest.mkdir(parents=True, exist_ok=True)
    if (seed / "bolt.db").is_file():
        shutil.copy2(seed / "bolt.db", dest / "bolt.db")
        if (seed / "cache").is_dir():
            shutil.copytree(seed / "cache", dest / "cache", copy_function=os.link,
                            ignore=shutil.ignore_patterns("tmp"))
    return dest


def ensure_env_cache(setup: ActSetup, export, job: str = "run-autograding-tests") -> dict:
    """The seed of act's cache server: the exported workflow's grading environment, built once
    by a cold run (``export(folder)`` makes an exported lab repository) on a bare Python, as a
    student's first push builds it. Returns what that run measured (kept in the seed folder)."""
    import fcntl

    seed = env_cache_seed()
    record = seed / "cold-run.json"
    with open(seed.parent / "envcache.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if record.is_file():
                return json.loads(record.read_text())
            work = Path(tempfile.mkdtemp(prefix="msda-act-seed-"))
            fresh = seed.with_name(seed.name + ".building")
            shutil.rmtree(fresh, ignore_errors=True)
            try:
                repo = export(work / "repos")
                run = run_act(setup, repo, work / "act", job=job, cache_server=fresh,
                              bare="pip", timeout=3600)
                steps = run.steps(job)
                built = steps.get("Build the grading environment (only when the cache has none)")
                saved = steps.get("Save the grading environment")
                if not (built and built[0] == "Success" and saved and saved[0] == "Success"
                        and "Cache saved" in run.log):
                    raise RuntimeError(f"the cold run did not build and save the grading "
                                       f"environment:\n{run.tail()}")
                info = {"seconds": round(run.seconds, 1),
                        "steps": {k: round(v[1], 1) for k, v in steps.items()},
                        "load_average": os.getloadavg()}
                shutil.rmtree(seed, ignore_errors=True)
                os.replace(fresh, seed)
                record.write_text(json.dumps(info, indent=1))
                return info
            finally:
                shutil.rmtree(work / "repos", ignore_errors=True)  # act.log stays, for a failure
                shutil.rmtree(fresh, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def copy_tree(src: Path, dest: Path, names: list[str] | None = None) -> Path:
    """Copy ``src`` (or only the relative paths ``names`` of it) into ``dest``."""
    if names is None:
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".git", ".nox", "__pycache__"))
        return dest
    for rel in names:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (src / rel).is_file():
            shutil.copy2(src / rel, target)
    return dest
