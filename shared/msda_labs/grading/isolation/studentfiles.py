"""What the judge reads of a student's folder, read with bounds, by construction.

The instructor's regrade runs as root in its own process, before any sandbox: whatever it reads
of a checkout (the lab module, the grading files it hashes, the manifests, the listing of the
tree) is something a student committed, and git stores symbolic links. Every such read goes
through a :class:`Reader`, which

* never follows a link, at any depth: each component of a path is opened relative to the one
  before it with ``O_NOFOLLOW`` (a folder also with ``O_DIRECTORY``), from the checkout's own
  folder;
* looks before it opens (``lstat``) and opens regular files only, without blocking
  (``O_NONBLOCK``: a FIFO, a socket or a device is never opened at all);
* checks after opening (``fstat``) that it opened the very file it looked at (same device,
  inode and type), so a swap between the look and the open is caught;
* reads at most ``file_limit`` bytes of a file (a file larger than that, by its size or by what
  it yields, is refused) and at most ``total_limit`` bytes for the whole folder;
* walks folders without following links, at most ``depth_limit`` deep and ``entry_limit``
  entries in all.

What it refuses it records as odd (``Reader.odd``: path -> what it is), for the integrity
result; the caller goes on with what it could read. So the judge's work on a checkout is bounded
in bytes, entries and depth whatever the checkout holds, and blocks on nothing.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Reader", "FILE_LIMIT", "TOTAL_LIMIT", "DEPTH_LIMIT", "ENTRY_LIMIT", "kind_of"]

FILE_LIMIT = 16 << 20  # bytes of one file: far above any grading file or lab module
TOTAL_LIMIT = 256 << 20  # bytes read of one checkout in all
DEPTH_LIMIT = 48  # folders below the checkout's root
ENTRY_LIMIT = 20000  # entries listed in one walk

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def kind_of(mode: int) -> str:
    """What a file of this mode is, in words."""
    for test, word in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "folder"),
                       (stat.S_ISLNK, "symbolic link"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return word
    return "file of unknown type"


class _Missing(Exception):
    pass


class _Refused(Exception):
    def __init__(self, rel: str, why: str):
        super().__init__(why)
        self.rel, self.why = rel, why


@dataclass
class Reader:
    """Bounded reads under ``root`` (see the module's docstring). Paths are relative POSIX
    paths under ``root``; ``odd`` collects what was refused, and why."""

    root: Path
    file_limit: int = FILE_LIMIT
    total_limit: int = TOTAL_LIMIT
    depth_limit: int = DEPTH_LIMIT
    entry_limit: int = ENTRY_LIMIT
    odd: dict[str, str] = field(default_factory=dict)
    spent: int = 0  # bytes read so far

    def _refuse(self, rel: str, why: str) -> None:
        self.odd.setdefault(rel or ".", why)

    def odd_list(self) -> list[str]:
        """``path (what it is)`` for each refused entry, sorted; printable."""
        return [_printable(f"{rel} ({why})") for rel, why in sorted(self.odd.items())]

    # -- opening -------------------------------------------------------------------------------
    def _parts(self, rel: str) -> list[str]:
        parts = [p for p in str(rel).split("/") if p not in ("", ".")]
        if any(p == ".." for p in parts):
            raise _Refused(rel, "a path that leaves the folder")
        return parts

    def _open_folder(self, parts: list[str]) -> int:
        """An fd of the folder ``parts`` under the root, no link followed on the way."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for depth, part in enumerate(parts):
                rel = "/".join(parts[:depth + 1])
                try:
                    info = os.lstat(part, dir_fd=fd)
                except FileNotFoundError:
                    raise _Missing from None
                except OSError as exc:
                    raise _Refused(rel, f"unreadable: {exc.strerror or exc}") from None
                if not stat.S_ISDIR(info.st_mode):
                    raise _Refused(rel, kind_of(info.st_mode))
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _Refused(rel, f"unreadable: {exc.strerror or exc}") from None
                os.close(fd)
                fd = child
                if not _same(info, os.fstat(fd)):
                    raise _Refused(rel, "changed while it was opened")
            return fd
        except BaseException:
            os.close(fd)
            raise

    def read(self, rel: str, limit: int | None = None) -> bytes | None:
        """The bytes of the regular file ``rel``; None when it is missing, or when it is refused
        (recorded in ``odd``): not a regular file, a link on its way, too large, unreadable."""
        limit = self.file_limit if limit is None else min(limit, self.file_limit)
        try:
            parts = self._parts(rel)
            if not parts:
                raise _Refused(rel, "folder")
            folder = self._open_folder(parts[:-1])
            try:
                return self._read_in(folder, parts[-1], rel, limit)
            finally:
                os.close(folder)
        except _Missing:
            return None
        except _Refused as exc:
            self._refuse(exc.rel, exc.why)
            return None
        except OSError as exc:  # the root itself: gone or unreadable
            self._refuse(rel, f"unreadable: {exc.strerror or exc}")
            return None

    def _read_in(self, folder: int, name: str, rel: str, limit: int) -> bytes:
        try:
            info = os.lstat(name, dir_fd=folder)
        except FileNotFoundError:
            raise _Missing from None
        except OSError as exc:
            raise _Refused(rel, f"unreadable: {exc.strerror or exc}") from None
        if not stat.S_ISREG(info.st_mode):
            raise _Refused(rel, kind_of(info.st_mode))
        if info.st_size > limit:
            raise _Refused(rel, f"too large: {info.st_size} bytes, {limit} at most")
        if self.spent + info.st_size > self.total_limit:
            raise _Refused(rel, f"not read: the folder's {self.total_limit >> 20} MiB are spent")
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=folder)
        except OSError as exc:
            raise _Refused(rel, f"unreadable: {exc.strerror or exc}") from None
        try:
            if not _same(info, os.fstat(fd)):
                raise _Refused(rel, "changed while it was opened")
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            self.spent += size
            if size > limit:
                raise _Refused(rel, f"too large: more than {limit} bytes")
            return b"".join(chunks)
        except OSError as exc:
            raise _Refused(rel, f"unreadable: {exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def kind(self, rel: str) -> str | None:
        """What ``rel`` is (:func:`kind_of`), without following a link; None when missing or
        behind something that is not a folder (recorded)."""
        try:
            parts = self._parts(rel)
            if not parts:
                return "folder"
            folder = self._open_folder(parts[:-1])
            try:
                return kind_of(os.lstat(parts[-1], dir_fd=folder).st_mode)
            finally:
                os.close(folder)
        except (_Missing, FileNotFoundError):
            return None
        except _Refused as exc:
            self._refuse(exc.rel, exc.why)
            return None
        except OSError as exc:
            self._refuse(rel, f"unreadable: {exc.strerror or exc}")
            return None

    # -- walking -------------------------------------------------------------------------------
    def listing(self, top: str = "") -> list[tuple[str, str]]:
        """The entries of the folder ``top`` itself, folders included, as (relative path, what
        it is), sorted; at most ``entry_limit``. Links are listed, never followed."""
        try:
            fd = self._open_folder(self._parts(top))
        except _Missing:
            return []
        except _Refused as exc:
            self._refuse(exc.rel, exc.why)
            return []
        except OSError as exc:
            self._refuse(top, f"unreadable: {exc.strerror or exc}")
            return []
        out = []
        try:
            with os.scandir(fd) as entries:
                for entry in _take(entries, self.entry_limit):
                    name = f"{top}/{entry.name}" if top else entry.name
                    try:
                        out.append((name, kind_of(entry.stat(follow_symlinks=False).st_mode)))
                    except OSError as exc:
                        self._refuse(name, f"unreadable: {exc.strerror or exc}")
        except OSError as exc:
            self._refuse(top, f"unreadable: {exc.strerror or exc}")
        finally:
            os.close(fd)
        return sorted(out)

    def walk(self, top: str = "", skip: frozenset[str] | set[str] = frozenset()
             ) -> tuple[list[tuple[str, str]], bool]:
        """Every entry under ``top`` that is not a folder, as (relative path from the root,
        what it is), sorted; folders named in ``skip`` are not entered, nor links. Stops after
        ``entry_limit`` entries, folders included (returns whether it stopped), and enters no
        folder deeper than ``depth_limit`` (recorded in ``odd``). Entries that are not regular
        files are recorded in ``odd`` too."""
        found: list[tuple[str, str]] = []
        seen = 0
        base = self._parts(top)
        stack = [base]
        while stack:
            parts = stack.pop()
            rel = "/".join(parts)
            try:
                fd = self._open_folder(parts)
            except _Missing:
                continue
            except _Refused as exc:
                self._refuse(exc.rel, exc.why)
                continue
            except OSError as exc:
                self._refuse(rel, f"unreadable: {exc.strerror or exc}")
                continue
            listed: list[tuple[str, int | None]] = []
            try:
                with os.scandir(fd) as entries:
                    for entry in _take(entries, self.entry_limit + 1 - seen):
                        try:
                            listed.append((entry.name,
                                           entry.stat(follow_symlinks=False).st_mode))
                        except OSError as exc:
                            name = f"{rel}/{entry.name}" if rel else entry.name
                            self._refuse(name, f"unreadable: {exc.strerror or exc}")
                            listed.append((entry.name, None))
            except OSError as exc:
                self._refuse(rel, f"unreadable: {exc.strerror or exc}")
                continue
            finally:
                os.close(fd)
            for entry_name, mode in listed:
                seen += 1
                if seen > self.entry_limit:
                    self._refuse(top or ".", f"more than {self.entry_limit} entries: not all "
                                             f"listed")
                    return sorted(found), True
                if mode is None:
                    continue
                name = f"{rel}/{entry_name}" if rel else entry_name
                if stat.S_ISDIR(mode):
                    if entry_name in skip:
                        continue
                    if len(parts) + 1 > self.depth_limit:
                        self._refuse(name, f"too deep: more than {self.depth_limit} folders")
                        continue
                    stack.append([*parts, entry_name])
                    continue
                kind = kind_of(mode)
                if kind != "regular file":
                    self._refuse(name, kind)
                found.append((name, kind))
        return sorted(found), False


def _take(iterator, count: int):
    for index, item in enumerate(iterator):
        if index >= count:
            return
        yield item


def _same(before: os.stat_result, after: os.stat_result) -> bool:
    return ((before.st_dev, before.st_ino, stat.S_IFMT(before.st_mode))
            == (after.st_dev, after.st_ino, stat.S_IFMT(after.st_mode)))


def _printable(text: str) -> str:
    return text if text.isprintable() else text.encode("unicode_escape").decode()
