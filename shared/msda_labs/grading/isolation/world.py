"""A private world for every separated child: what it writes and starts ends with it.

Where the grader runs as root and the kernel allows it, the zygote does not fork the process that
runs a submission directly. It forks a *keeper* (root), the first process of a new PID namespace
(its pid 1), which moves to new mount and IPC namespaces and forks the *child* that drops to the
sandbox's uid (:func:`msda_labs.grading.isolation.sandbox.drop`) and runs the submission::

    zygote ── keeper (root, pid 1 of its namespace: mounts) ── child (the uid)

In the keeper's mount namespace (:func:`enter`):

* every world-writable folder (``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock`` and any other
  :func:`msda_labs.grading.isolation.sandbox.world_writable_folders` finds) is a fresh, size-limited
  tmpfs. Only the entries on the way to what the child must read (the interpreter's folders, the
  package, the submission's folder, the sandbox's folder) are bound back into it;
* the child's scratch (its cwd, HOME and TMPDIR) is a fresh tmpfs of its own, owned by the uid;
* every other mount that stores files is read-only, except the sandbox's Triton cache folder;
* ``/proc`` is the new PID namespace's own: the child sees its own processes only, never the
  judge's command line or environment.

The IPC namespace gives the child SysV IPC and POSIX message queues of its own. When the child
returns, the keeper exits, and the kernel kills every process left in the PID namespace,
whatever its uid or session; the last process gone, the tmpfs folders are freed. Nothing the
child wrote or started is seen by the next one. The keeper never runs student code and stays
root: the child cannot signal it, and it dies with the zygote (``PR_SET_PDEATHSIG``); killed at
the time limit, it takes the whole namespace with it.

Where a namespace is refused (a container without CAP_SYS_ADMIN), :func:`probe` says which, the
result says so (``separation.world``), and the sandbox's cleanup after every request does what
it can without one (:func:`msda_labs.grading.isolation.sandbox.clean`: the scratch emptied, what the
uid left in every world-writable folder removed, its SysV IPC objects too). ``MSDA_PRIVATE_WORLD=0``
turns the private world off, to see that cleanup at work; in the gpu mode it is on only with
``MSDA_PRIVATE_WORLD=1`` (see :func:`wanted`).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import stat

__all__ = ["WORLD_ENV", "WorldError", "Fork", "plan_world", "enter", "probe", "describe",
           "wanted"]

WORLD_ENV = "MSDA_PRIVATE_WORLD"  # 0: no private world (to see the cleanup that holds without)

_CLONE_NEWNS = 0x00020000  # linux/sched.h
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8  # linux/mount.h
_MS_REMOUNT, _MS_NOATIME, _MS_NODIRATIME = 0x20, 0x400, 0x800
_MS_BIND, _MS_REC, _MS_PRIVATE, _MS_RELATIME = 0x1000, 0x4000, 1 << 18, 1 << 21
_PER_MOUNT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC,
                    "noatime": _MS_NOATIME, "nodiratime": _MS_NODIRATIME,
                    "relatime": _MS_RELATIME}
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Kernel views, not storage: left as they are (what they let a process write is root's alone,
# or, for devpts and mqueue, dies with the process or the IPC namespace).
_KERNEL_VIEWS = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "debugfs", "tracefs",
                 "securityfs", "pstore", "bpf", "configfs", "fusectl", "binfmt_misc", "autofs",
                 "efivarfs", "nsfs", "rpc_pipefs"}
# The tmpfs sizes: a world-writable folder, and the child's scratch (the int64 cases map a sparse
# file there: its length is not counted, only the pages it touches).
_SHARED_SIZE = "size=256m,nr_inodes=32768"
_SCRATCH_SIZE = "size=1g,nr_inodes=65536"


class WorldError(OSError):
    """A namespace or a mount of the private world could not be made."""


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags: int, data=None) -> None:
    args = [None if a is None else str(a).encode() for a in (source, target, fstype)]
    if _libc().mount(*args, ctypes.c_ulong(flags), None if data is None else data.encode()) != 0:
        err = ctypes.get_errno()
        raise WorldError(err, f"mount {target}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
    if _libc().unshare(flags) != 0:
        err = ctypes.get_errno()
        raise WorldError(err, f"unshare: {os.strerror(err)}")


def wanted(gpu: bool = False) -> str:
    """"" when a separated child gets a private world, else why not: ``MSDA_PRIVATE_WORLD=0``
    turns it off; in the gpu mode it is on only with ``MSDA_PRIVATE_WORLD=1``, until a grading
    on a GPU machine has shown that CUDA works in it (the CPU, interpreter and AOT modes have)."""
    raw = os.environ.get(WORLD_ENV, "").strip()
    if raw == "0":
        return f"{WORLD_ENV}=0"
    if gpu and raw != "1":
        return f"not yet in the gpu mode; {WORLD_ENV}=1 turns it on there"
    return ""


def plan_world(plan: dict, shared: list[str], needed: list[str]) -> dict:
    """What :func:`enter` builds for a child of ``plan`` (a sandbox plan): the world-writable
    folders ``shared`` (outermost first) and, in each, the entries to bind back because a path
    of ``needed`` lies below them. The plan's folders are needed too."""
    keep: dict[str, list[str]] = {}
    paths = [os.path.realpath(p) for p in [*needed, plan["run"], plan["triton"]] if p]
    for top in shared:
        names = set()
        for path in paths:
            if path.startswith(top.rstrip("/") + "/"):
                names.add(path[len(top.rstrip("/")) + 1:].split("/", 1)[0])
        keep[top] = sorted(names)
    return {"shared": list(shared), "keep": keep, "run": os.path.realpath(plan["run"]),
            "writable": [os.path.realpath(plan["triton"])], "uid": plan["uid"],
            "gid": plan["gid"], "flags": _CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWPID}


def _unescape(field: str) -> str:
    """A path as /proc/self/mountinfo writes it (space, tab, newline, backslash in octal)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit() and len(field[i + 1:i + 4]) == 3:
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mounts() -> list[tuple[str, str, int]]:
    """(mount point, file system type, per-mount flags to keep) of this mount namespace."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields = left.split()
            options = fields[5].split(",")
            flags = 0
            for option in options:
                flags |= _PER_MOUNT_FLAGS.get(option, 0)
            found.append((_unescape(fields[4]), right.split()[0], flags))
    return found


def enter(spec: dict) -> list[str]:
    """In the keeper (root, single-threaded, just forked): new namespaces and the mounts of the
    module docstring. Raises :class:`WorldError` when the world cannot be private; returns the
    mounts that could not be made read-only (each said in words; usually none)."""
    _unshare(spec["flags"])
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    made = set()
    for top in spec["shared"]:
        try:
            info = os.lstat(top)
        except FileNotFoundError:
            continue  # below another world-writable folder, now out of sight
        if not stat.S_ISDIR(info.st_mode):
            continue
        handles = {}
        for name in spec["keep"].get(top, []):
            try:
                fd = os.open(os.path.join(top, name), os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            handles[name] = (fd, stat.S_ISDIR(os.fstat(fd).st_mode))
        mode = stat.S_IMODE(info.st_mode)
        _mount("tmpfs", top, "tmpfs", _MS_NOSUID | _MS_NODEV,
               f"mode={mode:o},uid={info.st_uid},gid={info.st_gid},{_SHARED_SIZE}")
        made.add(top)
        for name, (fd, is_dir) in handles.items():
            target = os.path.join(top, name)
            if is_dir:
                os.mkdir(target, 0o700)
            else:
                os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
            _mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC)
            os.close(fd)
    _mount("tmpfs", spec["run"], "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"mode=700,uid={spec['uid']},gid={spec['gid']},{_SCRATCH_SIZE}")
    made.add(spec["run"])
    for folder in spec["writable"]:
        if os.path.isdir(folder):
            _mount(folder, folder, None, _MS_BIND)
            made.add(folder)
    left_writable = []
    for point, fstype, flags in _mounts():
        if point in made or fstype in _KERNEL_VIEWS:
            continue
        try:
            _mount(None, point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags)
        except WorldError as exc:
            if exc.errno not in (2, 20):  # ENOENT, ENOTDIR: under a fresh tmpfs, out of sight
                left_writable.append(f"{point} ({fstype}) stays writable: {exc.strerror}")
    return left_writable


class Fork:
    """How the zygote forks a child's *keeper*: in a fresh PID namespace (of which the keeper is
    pid 1) where the world has one, with a pipe on which the keeper tells the child's wait
    status (pid 1 cannot signal itself to pass a signal on).

    ``with Fork(spec) as fork: pid = os.fork()``; the keeper then calls :meth:`keep`, the zygote
    :meth:`status` once the keeper is gone."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.read_fd, self.write_fd = os.pipe()
        self._own = None

    def __enter__(self):
        if self.spec["flags"] & _CLONE_NEWPID:
            # The next fork is pid 1 of a new PID namespace; setns in __exit__ restores this
            # process's own for the forks after it (both work in a threaded process).
            self._own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
            _unshare(_CLONE_NEWPID)
        return self

    def __exit__(self, *exc):
        if self._own is not None and os.getpid() != 1:  # (the keeper, pid 1, keeps its own)
            if _libc().setns(self._own, _CLONE_NEWPID) != 0:
                raise WorldError(ctypes.get_errno(), "setns back to the zygote's PID namespace")
            os.close(self._own)
            self._own = None

    def keep(self, child, close: tuple[int, ...] = ()) -> None:
        """In the keeper (root, just forked): enter the world, fork the process that runs
        ``child()`` (it drops privileges and runs the submission; never returns), collect every
        orphan until it is done, tell its wait status, exit. Never returns."""
        os.close(self.read_fd)
        if self._own is not None:  # the zygote's PID namespace: nothing for the child
            os.close(self._own)
            self._own = None
        try:
            _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # dies with the zygote
            enter({**self.spec, "flags": self.spec["flags"] & ~_CLONE_NEWPID})
            if self.spec["flags"] & _CLONE_NEWPID:
                _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        except Exception as exc:  # noqa: BLE001 - no student code runs outside its world
            os.write(2, f"[msda_labs] could not make the child's private world: {exc}\n".encode())
            os._exit(71)
        pid = os.fork()
        if pid == 0:
            os.close(self.write_fd)
            try:
                child()
            finally:
                os._exit(70)
        for fd in close:  # the keeper keeps no line to the judge
            try:
                os.close(fd)
            except OSError:
                pass
        while True:  # as pid 1, orphans come here too
            try:
                done, raw = os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(70)
            except InterruptedError:
                continue
            if done == pid:
                os.write(self.write_fd, raw.to_bytes(4, "little", signed=True))
                os._exit(0)  # as pid 1: the kernel kills whatever is left in the namespace

    def status(self, raw: int) -> int:
        """In the zygote, once the keeper is gone: the child's wait status as the keeper told
        it, or the keeper's own ``raw`` (killed at the time limit, say)."""
        with os.fdopen(self.read_fd, "rb") as fh:
            told = fh.read(4)
        return int.from_bytes(told, "little", signed=True) if len(told) == 4 else raw

    def parent_side(self) -> None:
        """In the zygote, right after the fork: only the keeper writes the status."""
        os.close(self.write_fd)


def probe(spec: dict) -> dict:
    """Whether :func:`enter` works here, asked of a forked helper (the zygote's own namespaces
    are left alone). Returns ``{"private": bool, "why": str, "flags": int, "notes": [...]}``;
    ``flags`` are the namespaces that could be made (the PID and IPC ones are dropped, in that
    order, where the kernel refuses them and the mount namespace works)."""
    attempts = [spec["flags"], spec["flags"] & ~_CLONE_NEWPID,
                spec["flags"] & ~(_CLONE_NEWPID | _CLONE_NEWIPC)]
    first_error = ""
    for flags in dict.fromkeys(attempts):
        answer = _ask({**spec, "flags": flags})
        if answer.get("ok"):
            notes = list(answer.get("notes", []))
            if not flags & _CLONE_NEWPID:
                notes.append(f"no PID namespace ({first_error})")
            if not flags & _CLONE_NEWIPC:
                notes.append(f"no IPC namespace ({first_error})")
            return {"private": True, "why": "", "flags": flags, "notes": notes}
        first_error = first_error or answer.get("why", "no answer")
    return {"private": False, "why": first_error, "flags": 0, "notes": []}


def _ask(spec: dict) -> dict:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked helper
        try:
            os.close(read_fd)
            try:
                notes = enter(spec)
                if spec["flags"] & _CLONE_NEWPID:  # the first fork after unshare is pid 1
                    inner = os.fork()
                    if inner == 0:
                        try:
                            _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
                            os._exit(0 if os.getpid() == 1 else 3)
                        except BaseException:  # noqa: BLE001
                            os._exit(4)
                    _, raw = os.waitpid(inner, 0)
                    if not os.WIFEXITED(raw) or os.WEXITSTATUS(raw) != 0:
                        raise WorldError(0, "the PID namespace's /proc could not be mounted")
                answer = {"ok": True, "notes": notes}
            except Exception as exc:  # noqa: BLE001
                answer = {"ok": False, "why": str(exc)}
            os.write(write_fd, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        raw = fh.read()
    os.waitpid(pid, 0)
    try:
        return json.loads(raw)
    except ValueError:
        return {"ok": False, "why": "the check process answered nothing"}


def describe(answer: dict) -> str:
    """One line for the result: "" when the world is private in full, else what is missing."""
    if not answer.get("private"):
        why = str(answer.get("why"))
        where = "" if WORLD_ENV in why else " on this platform"
        return (f"no private world for the child{where} ({why}): what it leaves in world-writable "
                f"folders is removed after each request")
    return "; ".join(answer.get("notes") or [])
