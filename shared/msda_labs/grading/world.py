"""A private world for every separated child: what it writes and starts ends with it.

Where the grader runs as root and the kernel allows it, the zygote does not fork the process that
runs a submission directly. It forks a *keeper* (root), which moves to new mount, IPC and PID
namespaces and forks the namespace's *init* (root), which forks the *child* that drops to the
sandbox's uid (:func:`msda_labs.grading.sandbox.drop`) and runs the submission::

    zygote ── keeper (root: namespaces, mounts) ── init (root, pid 1) ── child (the uid)

In the keeper's mount namespace (:func:`enter`):

* every world-writable folder (``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock`` and any other
  :func:`msda_labs.grading.sandbox.world_writable_folders` finds) is a fresh, size-limited tmpfs.
  Only the entries on the way to what the child must read (the interpreter's folders, the
  package, the submission's folder, the sandbox's folder) are bound back into it;
* the child's scratch (its cwd, HOME and TMPDIR) is a fresh tmpfs of its own, owned by the uid;
* every other mount that stores files is read-only, except the sandbox's Triton cache folder;
* ``/proc`` is the new PID namespace's own: the child sees its own processes only, never the
  judge's command line or environment.

The IPC namespace gives the child SysV IPC and POSIX message queues of its own. When the child
returns, init exits, and the kernel kills every process left in the PID namespace, whatever its
uid or session; the last process gone, the tmpfs folders are freed. Nothing the child wrote or
started is seen by the next one. The keeper and init never run student code and stay root: the
child cannot signal them, and init dies with the keeper (``PR_SET_PDEATHSIG``), so a keeper
killed at the time limit takes the whole namespace with it.

Where a namespace is refused (a container without CAP_SYS_ADMIN), :func:`probe` says which, the
result says so (``separation.world``), and the sandbox's cleanup after every request does what
it can without one (:func:`msda_labs.grading.sandbox.clean`: the scratch emptied, what the uid
left in every world-writable folder removed, its SysV IPC objects too). ``MSDA_PRIVATE_WORLD=0``
turns the private world off, to see that cleanup at work.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import stat

__all__ = ["WORLD_ENV", "WorldError", "plan_world", "enter", "isolate", "probe", "describe",
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


def wanted() -> bool:
    """Whether a separated child gets a private world (unless ``MSDA_PRIVATE_WORLD=0``)."""
    return os.environ.get(WORLD_ENV, "").strip() != "0"


def plan_world(plan: dict, shared: list[str], needed: list[str]) -> dict:
    """What :func:`enter` builds for a child of ``plan`` (a sandbox plan): the world-writable
    folders ``shared`` (outermost first) and, in each, the entries to bind back because a path
    of ``needed`` lies below them. The plan's folders are needed too."""
    keep: dict[str, list[str]] = {}
    wanted = [os.path.realpath(p) for p in [*needed, plan["run"], plan["triton"]] if p]
    for top in shared:
        names = set()
        for path in wanted:
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


def _mirror(raw: int) -> None:
    """Exit the way a waited-for process did (wait status ``raw``): never returns."""
    if os.WIFSIGNALED(raw):
        sig = os.WTERMSIG(raw)
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(raw) if os.WIFEXITED(raw) else 70)


def isolate(spec: dict, child, close_in_keeper: tuple[int, ...] = ()) -> None:
    """In the keeper (forked by the zygote, root): enter the world and run ``child()`` (which
    drops privileges and runs the submission; it never returns) two forks down, as the module
    docstring draws. The keeper exits as the child did. Never returns."""
    try:
        enter(spec)
    except Exception as exc:  # noqa: BLE001 - no student code runs outside its world
        os.write(2, f"[msda_labs] could not make the child's private world: {exc}\n".encode())
        os._exit(71)
    status_r, status_w = os.pipe()
    keeper = os.getpid()
    init = os.fork()
    if init == 0:
        os.close(status_r)
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The keeper died before the line above (outside a PID namespace; inside, getppid() is
        # 0): then the zygote's reap of the uid ends the child, and this process with it.
        if not spec["flags"] & _CLONE_NEWPID and os.getppid() != keeper:
            os._exit(70)
        if spec["flags"] & _CLONE_NEWPID:
            try:
                _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
            except WorldError as exc:
                os.write(2, f"[msda_labs] /proc of the child's world: {exc}\n".encode())
                os._exit(71)
        pid = os.fork()
        if pid == 0:
            os.close(status_w)
            try:
                child()
            finally:
                os._exit(70)
        for fd in close_in_keeper:  # init keeps no line to the judge either
            try:
                os.close(fd)
            except OSError:
                pass
        while True:  # pid 1: collect every orphan until the child is done
            try:
                done, raw = os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(70)
            except InterruptedError:
                continue
            if done == pid:
                os.write(status_w, raw.to_bytes(4, "little", signed=True))
                os._exit(0)  # as pid 1: the kernel kills whatever is left in the namespace
    os.close(status_w)
    for fd in close_in_keeper:
        try:
            os.close(fd)
        except OSError:
            pass
    while True:
        try:
            _, raw = os.waitpid(init, 0)
            break
        except InterruptedError:
            continue
    with os.fdopen(status_r, "rb") as fh:
        told = fh.read(4)
    _mirror(int.from_bytes(told, "little", signed=True) if len(told) == 4 else raw)


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
        return (f"no private world for the child on this platform ({answer.get('why')}): what it "
                f"leaves in world-writable folders is removed after each request")
    return "; ".join(answer.get("notes") or [])
