"""A class regrade that cannot lose the class: one process per student, each row kept at once.

:func:`msda_labs.classroom.regrade.regrade_batch` grades each student in a worker process of
its own (``python -m msda_labs.classroom.batch``, the job on its standard input, the secret
never on a command line), ``jobs`` at a time. What holds, by construction:

* **Every student's work is bounded in time.** The worker does everything for its student (the
  integrity check of the checkout, the export of its work tree, the grading process and its
  children); at the per-student limit its whole process tree is frozen (``SIGSTOP``, repeated
  until a scan of ``/proc`` finds no new descendant: a frozen process cannot fork) and then
  killed (``SIGKILL``), whatever sessions or uids its members took. The student gets a row
  "not graded: over the per-student limit", and the class goes on. The reads of the checkout
  are bounded too (:class:`msda_labs.grading.isolation.studentfiles.Reader`): no FIFO blocks them.
* **A finished row survives a crash.** Each row and its result are appended to a journal (one
  JSON line, written with one ``write`` and ``fsync``) as soon as the student is done; a line
  cut by a crash is ignored when read.
* **An interrupted run resumes.** A student whose journal line has the same key (the lab, the
  commit, the digest of ``labNN.py``, of the pristine grading files, of the secret and of the
  grading options) is not graded again. A row that was not graded is retried.
* **Workers die with the batch.** Each worker asks the kernel for ``SIGTERM`` when the batch
  dies, and kills its own tree on it, so a killed batch leaves no grading behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Job", "Outcome", "run_jobs", "read_journal", "journal_line", "kill_tree",
           "DEFAULT_STUDENT_LIMIT"]

DEFAULT_STUDENT_LIMIT = 1200.0  # seconds for everything done for one student
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PARENT_ENV = "MSDA_BATCH_PARENT"


@dataclass
class Job:
    """One student's regrade, as the worker receives it."""

    index: int
    checkout: str
    lab_id: str
    pristine: str
    options: dict  # regrade_checkout's keyword arguments (seed, seed_file, gpu, timeout...)
    out: str  # where the worker writes the result (JSON)
    log: str  # the worker's standard output and error
    # What the worker calls, "module:function" (imported there, so this module imports none of
    # its callers): the function takes (checkout, pristine=, lab_id=, **options) and returns a
    # result with to_dict().
    entry: str = "msda_labs.classroom.regrade:regrade_checkout"


@dataclass
class Outcome:
    """What came of a job: the result's dict, or why there is none."""

    job: Job
    result: dict | None
    error: str = ""
    seconds: float = 0.0


# -- the process tree ------------------------------------------------------------------------
def _parents() -> dict[int, int]:
    """{pid: parent pid} of every process in /proc."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                text = fh.read(4096)
        except OSError:
            continue
        fields = text[text.rfind(b")") + 2:].split()
        if len(fields) > 1:
            out[int(name)] = int(fields[1])
    return out


def _descendants(root: int) -> set[int]:
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, stack = set(), [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def kill_tree(root: int, *, include_root: bool = True, rounds: int = 200) -> None:
    """Kill ``root`` and every process below it: stop them all (a stopped process cannot fork)
    until a scan finds none not yet stopped, then kill them all."""
    frozen: set[int] = set()
    if include_root:
        with contextlib.suppress(OSError):
            os.kill(root, signal.SIGSTOP)
            frozen.add(root)
    for _ in range(rounds):
        new = _descendants(root) - frozen
        if not new:
            break
        for pid in new:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        frozen |= new
    for pid in frozen:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


# -- the journal ---------------------------------------------------------------------------------
def journal_line(path: Path, entry: dict) -> None:
    """Append ``entry`` as one line to the journal, durably (one write, then fsync)."""
    data = (json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_journal(path: Path) -> dict[str, dict]:
    """{checkout name: its last entry} of a journal; lines a crash cut short are skipped."""
    entries: dict[str, dict] = {}
    try:
        with open(path, "rb") as fh:
            for line in fh:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and isinstance(entry.get("checkout"), str):
                    entries[entry["checkout"]] = entry
    except FileNotFoundError:
        pass
    return entries


def digest(*parts) -> str:
    text = json.dumps([str(p) for p in parts], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# -- running the jobs ----------------------------------------------------------------------------
def _run_one(job: Job, limit: float, python: str) -> Outcome:
    start = time.monotonic()
    with open(job.log, "wb") as log:
        proc = subprocess.Popen([python, "-m", "msda_labs.classroom.batch"],
                                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True,
                                env={**os.environ, _PARENT_ENV: str(os.getpid())})
        try:
            proc.stdin.write(json.dumps(job.__dict__).encode())
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait()
            return Outcome(job, None, f"not graded: over the per-student limit of {limit:g} s "
                                      f"(everything done for this student, integrity included)",
                           time.monotonic() - start)
        except BaseException:
            kill_tree(proc.pid)
            proc.wait()
            raise
    seconds = time.monotonic() - start
    try:
        data = json.loads(Path(job.out).read_text())
    except (OSError, ValueError):
        tail = Path(job.log).read_bytes()[-600:].decode("utf-8", "replace").strip()
        return Outcome(job, None, f"the regrade failed on this checkout (worker exit "
                                  f"{proc.returncode}): {tail}", seconds)
    if data.get("error"):
        return Outcome(job, None, data["error"], seconds)
    return Outcome(job, data.get("result"), "", seconds)


def run_jobs(jobs: list[Job], *, parallel: int = 1, limit: float = DEFAULT_STUDENT_LIMIT,
             python: str | None = None, done=None, room=None) -> list[Outcome]:
    """Run ``jobs``, ``parallel`` at a time, each within ``limit`` seconds; ``done(outcome)`` is
    called (one at a time) as soon as each ends. Returns the outcomes in the jobs' order.

    ``room(slot)``, when given, names the folder a job run in slot ``slot`` (0 to ``parallel`` -
    1) works in: it is passed to the job as the option ``room``, and the jobs of one slot run one
    after another, so they share it in turn."""
    python = python or sys.executable
    lock = threading.Lock()
    outcomes: dict[int, Outcome] = {}
    slots: queue.SimpleQueue[int] = queue.SimpleQueue()
    for slot in range(max(1, parallel)):
        slots.put(slot)

    def one(job: Job) -> None:
        slot = slots.get()
        try:
            if room is not None:
                job = dataclasses.replace(job, options={**job.options, "room": str(room(slot))})
            outcome = _run_one(job, limit, python)
        finally:
            slots.put(slot)
        with lock:
            outcomes[job.index] = outcome
            if done is not None:
                done(outcome)

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        for future in [pool.submit(one, job) for job in jobs]:
            future.result()
    return [outcomes[job.index] for job in jobs]


# -- the worker ----------------------------------------------------------------------------------
def _die_with_parent(parent: int) -> None:
    """SIGTERM when the batch dies; on SIGTERM, this worker's whole tree is killed."""

    def stop(signum, frame):  # noqa: ARG001
        kill_tree(os.getpid(), include_root=False)
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the batch died before the request was made
        stop(signal.SIGTERM, None)


def _worker() -> int:
    import importlib

    from msda_labs.errors import KitError

    _die_with_parent(int(os.environ.pop(_PARENT_ENV, "0") or os.getppid()))
    job = Job(**json.loads(sys.stdin.read()))
    out: dict = {}
    try:
        module, name = job.entry.split(":")
        regrade = getattr(importlib.import_module(module), name)
        result = regrade(Path(job.checkout), pristine=Path(job.pristine), lab_id=job.lab_id,
                         **job.options)
        out["result"] = result.to_dict()
    except (KitError, ValueError, OSError) as exc:
        out["error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - reported in the student's row
        out["error"] = (f"the regrade failed on this checkout ({type(exc).__name__}: "
                        f"{str(exc)[:300]})")
    tmp = Path(job.out + ".tmp")
    tmp.write_text(json.dumps(out))
    os.replace(tmp, job.out)
    return 0


if __name__ == "__main__":
    sys.exit(_worker())
