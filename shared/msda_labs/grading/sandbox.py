"""Privilege separation of the processes that run submission code.

When the grader runs as root (the instructor's regrade, the Gradescope autograder, a Modal
container, act) and ``MSDA_SEPARATE`` is not ``0``, every child that a zygote forks gives up root
before it imports the submission (:func:`drop`):

* it becomes a numeric uid and gid of its own, ``64000 + slot``, with no supplementary groups.
  One :class:`Sandbox` (one executor) holds its slot with a lock file, so concurrent executors
  (pytest-xdist workers, several regrades) never share a uid. No passwd entry is needed;
* no_new_privs is set, so no set-user-ID program can hand root back;
* resource limits: file size (64 GiB: a sparse file counts its length), number of processes,
  the data segment outside the GPU mode (CUDA reserves large virtual ranges), no core files;
* its cwd, HOME and TMPDIR are a scratch folder of its own; TRITON_CACHE_DIR lies beside it and is
  kept for the executor's life;
* the zygote it was forked from has moved to a network namespace of its own, where the only
  interface is a loopback that is down (:func:`isolate_network`; refused in a container without
  CAP_SYS_ADMIN: the result then says the network is not isolated on this platform).

The judge-only files (the ground truth, the mistake catalogue, the chips, every lab's tests, the
kit's own tests with the mutant library, the seed file, the regrade's work and output folders) lose
their permissions for other users (:mod:`msda_labs.grading.judgeonly`, ``chmod o-rwx``) before
the first child runs, and a preflight process of the same uid must fail to open them before a
result may say ``separated``. After every request the zygote kills every process of the uid
(:func:`reap`: a helper that becomes the uid and calls ``kill(-1, SIGKILL)``, so a grandchild
that left the session dies too) and removes its scratch and whatever it left in /tmp, /var/tmp
and /dev/shm (:func:`clean`).

``MSDA_SEPARATE``: ``1`` requires separation (grading stops with an error where it is not in
force), ``0`` turns it off, unset: on wherever the grader runs as root.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import resource
import shutil
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["SEPARATE_ENV", "JUDGE_ONLY_ENV", "PRIVATE_FOLDER_ENV", "UID_BASE", "SandboxError",
           "Sandbox", "policy", "share_with", "drop", "reap", "clean", "isolate_network",
           "FEEDBACK_ONLY"]

SEPARATE_ENV = "MSDA_SEPARATE"
JUDGE_ONLY_ENV = "MSDA_JUDGE_ONLY"  # more judge-only paths, os.pathsep-separated
PRIVATE_FOLDER_ENV = "MSDA_PRIVATE_FOLDER"  # a regrade's copy of one checkout (see share_with)
UID_BASE = 64000
_SLOTS = 1000
_CLONE_NEWNET = 0x40000000  # linux/sched.h
_PR_SET_NO_NEW_PRIVS = 38  # linux/prctl.h
_PR_SET_CHILD_SUBREAPER = 36
# The largest file a child may write. The int64-offset cases (grading.bigcase) map a sparse
# file of about 26 GB, and the limit counts a sparse file's length, so it cannot be small; what
# a child writes is removed after each request (clean) and bounded by its time limit.
_FILE_LIMIT = 64 << 30
_DATA_HEADROOM = 4 << 30  # data segment a CPU child may add to what the zygote holds
_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")

FEEDBACK_ONLY = ("this grade is feedback only: the graded run (regrade, Gradescope) runs your code "
                 "as a separate user, with hidden cases")


class SandboxError(RuntimeError):
    """Separation was asked for and is not in force here."""


def policy() -> str:
    """``required`` (MSDA_SEPARATE=1), ``off`` (0) or ``auto`` (unset: on when root)."""
    raw = os.environ.get(SEPARATE_ENV, "").strip()
    if raw in ("", "auto"):
        return "auto"
    if raw in ("0", "1"):
        return "off" if raw == "0" else "required"
    raise SandboxError(f"{SEPARATE_ENV}={raw!r}: use 1 (require separation), 0 (turn it off) or "
                       f"leave it unset (on when the grader runs as root)")


def _libc():
    return ctypes.CDLL(None, use_errno=True)


# -- the judge side: which uid ----------------------------------------------------------------
class Sandbox:
    """One executor's uid (a locked slot) and its scratch folders."""

    def __init__(self, slot: int, lock_fd: int, base: Path):
        self.slot = slot
        self.uid = self.gid = UID_BASE + slot
        self._lock_fd = lock_fd
        self.base = base
        self.run_dir = base / "run"
        self.triton = base / "triton"

    @classmethod
    def open(cls) -> Sandbox:
        """Claim a free slot and make its scratch folders (the caller must be root)."""
        locks = _lock_dir()
        for slot in range(_SLOTS):
            uid = UID_BASE + slot
            if _has_passwd_entry(uid):
                continue
            fd = os.open(locks / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                         0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            reap(uid)  # what an executor that died holding this slot left behind
            clean_tmp(uid)
            for stale in Path(tempfile.gettempdir()).glob(f"msda-sandbox-{slot}-*"):
                if stale.is_dir() and not stale.is_symlink() and stale.stat().st_uid == 0:
                    shutil.rmtree(stale, ignore_errors=True)
            base = Path(tempfile.mkdtemp(prefix=f"msda-sandbox-{slot}-"))
            os.chmod(base, 0o711)  # the child may enter it, not list it
            box = cls(slot, fd, base)
            for folder in (box.run_dir, box.triton):
                _own_dir(folder, uid)
            return box
        raise SandboxError(f"no free uid among {UID_BASE}..{UID_BASE + _SLOTS - 1}")

    def plan(self, gpu: bool = False, triton: Path | None = None) -> dict:
        """What a zygote needs to drop a child into this sandbox (JSON-serializable); ``triton``:
        a kernel cache folder the uid owns, instead of this sandbox's fresh one."""
        return {"uid": self.uid, "gid": self.gid, "run": str(self.run_dir),
                "triton": str(triton or self.triton), "gpu": gpu}

    def close(self) -> None:
        if self._lock_fd < 0:
            return
        reap(self.uid)
        clean_tmp(self.uid)
        shutil.rmtree(self.base, ignore_errors=True)
        os.close(self._lock_fd)
        self._lock_fd = -1


def share_with(folder: Path, gid: int, keep_out: tuple[str, ...] = ("shared", "tests")) -> None:
    """Let group ``gid`` (one child's) read the student's files in ``folder``, a regrade's private
    copy of one checkout (``$MSDA_PRIVATE_FOLDER``), so that a module of theirs beside labNN.py
    imports; other users keep no access. ``keep_out``: the grading files, never shared."""
    os.chown(folder, -1, gid)
    os.chmod(folder, 0o751)
    for entry in os.scandir(folder):
        if entry.name in keep_out or entry.is_symlink():
            continue
        paths = [entry.path]
        if entry.is_dir(follow_symlinks=False):
            for sub, dirs, files in os.walk(entry.path):
                paths += [os.path.join(sub, n) for n in dirs + files]
        for path in paths:
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                continue
            os.chown(path, -1, gid)
            os.chmod(path, stat.S_IMODE(info.st_mode) & ~0o077 | 0o040
                     | (0o010 if stat.S_ISDIR(info.st_mode) else 0))


def _lock_dir() -> Path:
    for candidate in (Path("/run/msda-sandbox"), Path(tempfile.gettempdir()) / "msda-sandbox-0"):
        try:
            candidate.mkdir(mode=0o700, exist_ok=True)
        except OSError:
            continue
        info = os.lstat(candidate)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o022:
            return candidate
    raise SandboxError("no safe folder for the sandbox's lock files (/run/msda-sandbox)")


def _has_passwd_entry(uid: int) -> bool:
    import pwd

    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _own_dir(path: Path, uid: int) -> None:
    path.mkdir(mode=0o700)
    os.chown(path, uid, uid)


# -- the zygote's side: the network, dropping a child, cleaning up after it ------------------
def isolate_network() -> str:
    """Move this process into a new network namespace; returns "" or why it could not."""
    if _libc().unshare(_CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        return f"unshare(CLONE_NEWNET): {os.strerror(err)}"
    return ""


def become_subreaper() -> None:
    """Orphans of this process's children are re-parented here (and reaped by :func:`reap`)
    instead of to init, which a container may not have."""
    _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _data_size() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def drop(plan: dict) -> None:
    """In a forked child, before any submission code: give up root for the plan's uid."""
    uid, gid, run = plan["uid"], plan["gid"], plan["run"]
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, _FILE_LIMIT),
              (resource.RLIMIT_NPROC, max(1024, 8 * (os.cpu_count() or 1)))]
    if not plan.get("gpu"):
        limits.append((resource.RLIMIT_DATA, _data_size() + _DATA_HEADROOM))
    for which, value in limits:
        resource.setrlimit(which, (value, value))
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise SandboxError(f"could not become uid {uid}")
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SandboxError(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
    os.chdir(run)
    name = f"msda-sandbox-{uid - UID_BASE}"
    os.environ.update(HOME=run, TMPDIR=run, TEMP=run, TMP=run, TRITON_CACHE_DIR=plan["triton"],
                      USER=name, LOGNAME=name)
    tempfile.tempdir = None


def _runs_as(uid: int) -> bool:
    """Whether a process has ``uid`` as its real, effective or saved uid (read from /proc: a
    fork of a worker that imported torch costs about 20 ms, this about 1 ms)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Uid:"):
                        if str(uid).encode() in line.split()[1:4]:
                            return True
                        break
        except OSError:
            continue
    return False


def ask_as_child(plan: dict, question, *, orphans: bool = False):
    """Fork a helper, drop it into ``plan`` and return what ``question()`` answers there (plain
    JSON data); ``{"drop_error": why}`` when it could not drop, None when it answered nothing.
    The judge uses it to check what a child can and cannot reach before it trusts the plan."""
    import json

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked helper
        try:
            os.close(read_fd)
            try:
                drop(plan)
            except Exception as exc:  # noqa: BLE001
                answer = {"drop_error": f"{type(exc).__name__}: {exc}"}
            else:
                answer = question()
            os.write(write_fd, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        raw = fh.read()
    os.waitpid(pid, 0)
    reap(plan["uid"], orphans=orphans)
    try:
        return json.loads(raw)
    except ValueError:
        return None


def reap(uid: int, orphans: bool = False) -> None:
    """Kill every process of ``uid``: a helper becomes ``uid`` and signals all it may (only when
    one runs). A subreaper zygote passes ``orphans`` to collect the orphans it adopted."""
    if _runs_as(uid):
        _kill_all(uid)
    if orphans:
        _collect_orphans()


def _kill_all(uid: int) -> None:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked helper
        code = 0
        try:
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass  # nothing left to kill
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    os.waitpid(pid, 0)


def _collect_orphans() -> None:
    """Orphans re-parented to a subreaper zygote: all killed, each exits in a moment. This waits
    for them (at most 2 s: a process stuck in the kernel may take longer), so none is left."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if not done:
            time.sleep(0.001)


def _remove(path: str) -> None:
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def clean_tmp(uid: int) -> None:
    """Remove what ``uid`` left in /tmp, /var/tmp and /dev/shm (and one level down in the
    world-writable folders there)."""
    for top in _TMP_DIRS:
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_uid == uid:
                _remove(entry.path)
            elif stat.S_ISDIR(info.st_mode) and info.st_mode & 0o002:
                try:
                    inner = list(os.scandir(entry.path))
                except OSError:
                    continue
                for sub in inner:
                    try:
                        if sub.stat(follow_symlinks=False).st_uid == uid:
                            _remove(sub.path)
                    except OSError:
                        continue


def clean(plan: dict) -> None:
    """After a request: the child's scratch, fresh and empty, and nothing of its uid in /tmp."""
    run = Path(plan["run"])
    shutil.rmtree(run, ignore_errors=True)
    try:
        _own_dir(run, plan["uid"])
    except FileExistsError:  # pragma: no cover - rmtree left something it could not remove
        pass
    clean_tmp(plan["uid"])


def is_root() -> bool:
    return sys.platform.startswith("linux") and os.geteuid() == 0

