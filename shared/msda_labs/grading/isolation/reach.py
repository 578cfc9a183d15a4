"""What a separated child must still reach: the interpreter, its libraries and the package.

A child that runs as a uid of its own (:mod:`msda_labs.grading.isolation.sandbox`) imports modules
lazily (numpy's ``secrets``, a triton backend, a module of ``msda_labs.student``), so it must be
able to read the Python installation and the package. Where a folder on the way is closed to other
users (a pyenv under ``/root``, mode 0700), :func:`expose` gives the zygote a mount namespace of its
own in which that folder is a small tmpfs holding only bind mounts of the subfolders the interpreter
needs: nothing else of it becomes visible, and no mode on the disk changes. Its children inherit
the namespace. :func:`unreachable` then checks, in a dropped child, that every such folder can be
listed; the executor refuses separation (or, unless it is required, turns it off) when one cannot.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
import sysconfig
from pathlib import Path

__all__ = ["needed_folders", "expose", "unreachable"]

_CLONE_NEWNS = 0x00020000  # linux/sched.h
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 1 << 18  # linux/mount.h
_MS_NOSUID, _MS_NODEV = 0x2, 0x4


def needed_folders() -> list[str]:
    """The folders a child imports from: the interpreter's library folders (the standard library,
    its extension modules, site-packages) and the folders of the packages the zygote imported
    (torch, triton, msda_labs.student). Not every sys.path entry: the lab's tests folder is on
    it, and a child must not read that."""
    paths = sysconfig.get_paths()
    found = [paths.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    found += [os.path.dirname(os.__file__), os.path.dirname(os.path.realpath(sys.executable))]
    dynload = sys.modules.get("_json") or sys.modules.get("_struct")
    if dynload is not None and getattr(dynload, "__file__", None):
        found.append(os.path.dirname(dynload.__file__))
    for name in ("torch", "triton", "msda_labs.student"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            found.append(os.path.dirname(module.__file__))
    return [p for p in dict.fromkeys(os.path.realpath(p) for p in found if p and os.path.isabs(p))
            if os.path.isdir(p)]


def _closed_ancestor(path: str) -> tuple[str, str] | None:
    """The first folder on the way to ``path`` that other users cannot enter, and the entry
    below it on the way; None when the way is open."""
    parts = Path(path).parts
    for depth in range(1, len(parts)):
        folder = str(Path(*parts[:depth]))
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return folder, parts[depth]
    return None


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags, data) -> None:
    args = [None if a is None else str(a).encode() for a in (source, target, fstype)]
    if _libc().mount(*args, ctypes.c_ulong(flags), None if data is None else data.encode()) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}: {os.strerror(ctypes.get_errno())}")


def expose(folders: list[str]) -> str:
    """In the zygote, as root: make the closed folders on the way to ``folders`` (and files)
    passable in a mount namespace of this process's own. Everything else in a closed folder is
    out of sight there, for the zygote too: pass the submission, which it reads per request.
    Returns "" or why it could not."""
    closed: dict[str, set[str]] = {}
    for folder in folders:
        hit = _closed_ancestor(folder)
        if hit is not None:
            closed.setdefault(hit[0], set()).add(hit[1])
    if not closed:
        return ""
    libc = _libc()
    if libc.unshare(_CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}"
    try:
        _mount("none", "/", None, _MS_REC | _MS_PRIVATE, None)
        for top, entries in sorted(closed.items(), key=lambda item: len(item[0])):
            handles = {e: os.open(os.path.join(top, e), os.O_PATH)
                       for e in sorted(entries) if os.path.exists(os.path.join(top, e))}
            kinds = {e: os.path.isdir(os.path.join(top, e)) for e in handles}
            _mount("tmpfs", top, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0711,size=16m")
            for entry, fd in handles.items():
                target = os.path.join(top, entry)
                if kinds[entry]:
                    os.mkdir(target, 0o755)
                else:  # a file (the submission): bound onto an empty file
                    os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
                _mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC, None)
                os.close(fd)
    except OSError as exc:
        return str(exc)
    return ""


def unreachable(plan: dict, folders: list[str]) -> list[str]:
    """The ``folders`` that a child dropped into ``plan`` cannot list (forks one and asks)."""
    from msda_labs.grading.isolation import sandbox

    def missing() -> list[str]:
        out = []
        for folder in folders:
            try:
                os.listdir(folder)
            except OSError:
                out.append(folder)
        return out

    answer = sandbox.ask_as_child(plan, missing, orphans=True)
    if answer is None:
        return ["(the check process returned nothing)"]
    if isinstance(answer, dict):
        return [f"(could not drop privileges: {answer['drop_error']})"]
    return list(answer)
