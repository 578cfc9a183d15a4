"""Triton's kernel cache for separated children, kept per submission.

A separated child compiles its kernels into a cache folder it owns. Shared between submissions,
that folder would let one submission plant a compiled kernel that another loads; fresh for every
grading, it would make a Triton lab compile everything each time (lab 09: about 8 s more). So
each submission gets a folder of its own, named after the SHA-256 of its bytes, under a root-owned
folder that other users may pass through but not list: only runs of the same file ever write to
it, so whatever it holds came from that file or the kit. One executor at a time holds it (a lock);
it belongs to that executor's uid while held and to root otherwise.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["KernelCache"]


def _chown_tree(top: Path, uid: int) -> None:
    os.lchown(top, uid, uid)
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), uid, uid)


class KernelCache:
    """The held cache folder of one submission (see the module docstring)."""

    def __init__(self, folder: Path, lock_fd: int):
        self.folder = folder
        self._lock_fd = lock_fd

    @classmethod
    def claim(cls, submission: Path, uid: int) -> KernelCache | None:
        """The submission's folder, owned by ``uid``; None when another executor holds it or
        the root folder is not safe (then the caller uses a fresh folder)."""
        root = Path(tempfile.gettempdir()) / "msda-triton-cache"
        try:
            root.mkdir(mode=0o711, exist_ok=True)
            info = os.lstat(root)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
                return None
            key = hashlib.sha256(Path(submission).read_bytes()).hexdigest()[:32]
            fd = os.open(root / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            folder = root / key
            folder.mkdir(mode=0o700, exist_ok=True)
            if folder.is_symlink() or not folder.is_dir():
                raise OSError(f"{folder} is not a folder")
            _chown_tree(folder, uid)
        except OSError:
            os.close(fd)
            return None
        return cls(folder, fd)

    def release(self) -> None:
        if self._lock_fd < 0:
            return
        try:
            _chown_tree(self.folder, 0)
        except OSError:
            pass
        os.close(self._lock_fd)
        self._lock_fd = -1
