"""Warm starts for zygotes: a process that has imported torch once and forks a fresh zygote.

A zygote (:mod:`msda_labs.grading.isolation.zygote`) starts as a new interpreter and imports torch
(and triton in the Triton modes): about 2.4 s of CPU, paid once per mode by every grading run.
A host that grades many submissions in a row (the kit's self-test, a class regrade) can pay it
once instead: with ``MSDA_ZYGOTE_STEMS`` naming a folder of its own (mode 0700), the executor
asks a *stem* for each zygote. A stem is started exactly as that zygote would be (the same
interpreter, ``-I``, search path, working folder and environment), imports torch and triton, and
then only waits. For each request it forks a child, which takes the judge's socket and standard
streams, the request's environment and working folder, and runs the zygote module as
``python -m`` would: from then on it is the zygote, unchanged. The stem itself never imports a
submission, a lab or anything of the judge, and a child never returns to it.

What can differ from a cold start, and how each is held equal:

* the environment: the child's is the request's, exactly. The stem starts with the request's
  environment less its ``MSDA_`` names (those the kit sets per run: a salt, a stage), so nothing
  it imported can hold one; every other name is part of the stem's key (another value selects
  another stem), and a request that sets a name the stem looked up while it imported is refused
  (the executor then starts the zygote cold);
* the random state: ``random`` is reseeded from the OS in every child, as a new process would be;
  the hash seed is the stem's (one per stem, where cold starts draw one each);
* the parent: a zygote forked by a stem is the stem's child, not the judge's; the judge holds its
  pid (:class:`StemChild`), can kill it and sees it end, but not its exit status.

Requests are JSON with three file descriptors passed beside them (``SCM_RIGHTS``); the stem
accepts connections only from its own uid, over a socket in a folder only that uid can enter, and
unpickles nothing. A stem ends when its folder is removed, its socket is replaced, the folder's
holder (:func:`held`) is gone, or it has waited :data:`IDLE_SECONDS` without a request.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["STEMS_ENV", "StemChild", "held", "spawn", "stop_all"]

STEMS_ENV = "MSDA_ZYGOTE_STEMS"
IDLE_SECONDS = 900.0
_MAX_REQUEST = 1 << 20
_START_SECONDS = 180.0
_MODULE = "msda_labs.grading.isolation.stem"
_ZYGOTE = "msda_labs.grading.isolation.zygote"
_HELD = ".held"
_POLL_SECONDS = 0.5
_SUN_PATH = 100  # a socket's address is at most 107 bytes on Linux (sun_path); keep clear of it


@contextlib.contextmanager
def _address(path: Path):
    """The address to bind or connect ``path`` by: the path itself when it is short enough for a
    socket address, otherwise the same file reached through an open descriptor of its folder
    (``/proc/self/fd/N/name``), which any folder depth fits."""
    if len(os.fsencode(str(path))) <= _SUN_PATH:
        yield str(path)
        return
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


class StemChild:
    """A zygote forked by a stem, seen from the judge: what :class:`subprocess.Popen` offers that
    the executor uses (``pid``, ``poll``, ``kill``, ``wait``). Its exit status stays with the stem,
    so a zygote that ended reads as ``-1``."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)  # the stem reaps its children: an ended one is gone
            except ProcessLookupError:
                self.returncode = -1
            except PermissionError:  # pragma: no cover - the pid was reused by another user
                self.returncode = -1
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.01)
        return self.returncode


def _split(cmd: list[str]) -> tuple[list[str], str, list[str]]:
    """A grading process's command (``executor.python_command``): its interpreter part (up to
    and including the search path), the module, and the module's arguments."""
    at = cmd.index("-c")
    return cmd[:at + 3], cmd[at + 3], cmd[at + 4:]


def _mode(args: list[str]) -> str:
    return args[args.index("--mode") + 1] if "--mode" in args else ""


def _key(head: list[str], mode: str, env: dict[str, str], cwd: str) -> str:
    fixed = sorted((k, v) for k, v in env.items() if not k.startswith("MSDA_"))
    text = json.dumps([head, mode, fixed, cwd], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _send(sock: socket.socket, data: dict, fds: list[int] = ()) -> None:
    body = json.dumps(data).encode()
    socket.send_fds(sock, [struct.pack("!I", len(body)) + body], list(fds))


def _recv(sock: socket.socket, nfds: int = 0) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(sock, _MAX_REQUEST + 4, nfds)
    if len(data) < 4:
        raise ValueError("a short message")
    (size,) = struct.unpack("!I", data[:4])
    body = data[4:]
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            raise ValueError("the message ended early")
        body += chunk
    if size > _MAX_REQUEST:
        raise ValueError("a message larger than 1 MiB")
    return json.loads(body), fds


def _folder() -> Path | None:
    value = os.environ.get(STEMS_ENV, "")
    if not value:
        return None
    folder = Path(value)
    try:
        info = folder.stat()
    except OSError:
        return None
    if info.st_uid != os.geteuid() or info.st_mode & 0o077 or not folder.is_dir():
        return None  # a folder others can enter is not one to take zygotes from
    return folder


def spawn(cmd: list[str], env: dict[str, str], cwd: str, fd: int) -> StemChild | None:
    """Fork the zygote that ``cmd`` would start (with ``env``, in ``cwd``, talking through ``fd``)
    from a warm stem, starting the stem first if there is none. ``None`` when stems are off (no
    ``MSDA_ZYGOTE_STEMS``) or anything fails: the caller then starts the zygote cold."""
    folder = _folder()
    if folder is None:
        return None
    head, module, args = _split(cmd)
    if module != _ZYGOTE or "--fd" not in args:
        return None
    key = _key(head, _mode(args), env, cwd)
    path = folder / f"{key}.sock"
    try:
        with open(folder / f"{key}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            sock = _connect(path) or _start(head, _mode(args), env, cwd, folder, key)
        if sock is None:
            return None
        with sock:
            _send(sock, {"args": args, "env": env, "cwd": cwd}, [fd, 1, 2])
            sock.settimeout(60)
            reply, _ = _recv(sock)
    except (OSError, ValueError):
        return None
    pid = reply.get("pid")
    return StemChild(pid) if isinstance(pid, int) and pid > 0 else None


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _address(path) as address:
            sock.connect(address)
    except OSError:
        sock.close()
        return None
    return sock


def _start(head: list[str], mode: str, env: dict[str, str], cwd: str, folder: Path,
           key: str) -> socket.socket | None:
    path = folder / f"{key}.sock"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    # The stem holds no MSDA_ name: what it imports cannot keep a value of one (a copy of the
    # environment included), and a name it looked up is one no request may set.
    own = {k: v for k, v in env.items() if not k.startswith("MSDA_")}
    with open(folder / f"{key}.log", "ab") as log:
        proc = subprocess.Popen([*head, _MODULE, "--socket", str(path), "--mode", mode], env=own,
                                cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
    (folder / f"{key}.pid").write_text(f"{proc.pid}\n")
    end = time.monotonic() + _START_SECONDS
    while time.monotonic() < end and proc.poll() is None:
        sock = _connect(path) if path.exists() else None
        if sock is not None:
            return sock
        time.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
    return None


@contextlib.contextmanager
def held(folder: Path | str):
    """Keep the stems of ``folder`` for as long as this context lasts, and no longer: it holds a
    shared lock on the folder's ``.held`` file, and a stem of a folder that has one ends within
    :data:`_POLL_SECONDS` of finding it unlocked, so a holder killed outright (``SIGKILL``, where
    no ``finally`` runs) leaves no stem behind. Processes forked meanwhile share the lock."""
    fd = os.open(Path(folder) / _HELD, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def _unheld(folder: Path) -> bool:
    """Whether ``folder`` has a ``.held`` file that no one holds any longer."""
    try:
        fd = os.open(folder / _HELD, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def stop_all(folder: Path | str) -> int:
    """End every stem of ``folder`` (their pids are kept there). Returns how many were signalled."""
    stopped = 0
    for pid_file in Path(folder).glob("*.pid"):
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
            stopped += 1
    return stopped


# -- the stem ------------------------------------------------------------------------------------


def _warm(mode: str) -> set[str]:
    """Import what a zygote of ``mode`` imports first; the environment names looked up meanwhile."""
    environ_type = type(os.environ)
    lookup = environ_type.__getitem__  # get, ``in`` and os.getenv all go through it
    read: set[str] = set()

    def watched(self, name):
        read.add(name)
        return lookup(self, name)

    environ_type.__getitem__ = watched
    try:
        import torch  # noqa: F401

        if mode != "cpu":
            import triton  # noqa: F401
            import triton.language  # noqa: F401
    finally:
        environ_type.__getitem__ = lookup
    return read


def _become_zygote(request: dict, fds: list[int]) -> None:
    """In the forked child: take the judge's socket and streams, the request's environment and
    folder, and run the zygote module as ``python -m`` does. Never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote waits for its own children
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        line, out, err = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for extra in (null, out, err):
            os.close(extra)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        import random

        random.seed()
        args = list(request["args"])
        args[args.index("--fd") + 1] = str(line)
        sys.argv = [_ZYGOTE, *args]
        import runpy

        try:
            runpy.run_module(_ZYGOTE, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a child never returns into the stem
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _valid(request, fds: list[int]) -> str:
    if not isinstance(request, dict) or len(fds) != 3:
        return "a request is a JSON object with three descriptors"
    args, env, cwd = request.get("args"), request.get("env"), request.get("cwd")
    if not (isinstance(args, list) and all(isinstance(a, str) for a in args) and "--fd" in args):
        return "args: the zygote's arguments, with --fd"
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str)
                                          for k, v in env.items())):
        return "env: names to strings"
    if not isinstance(cwd, str):
        return "cwd: a folder"
    return ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=_MODULE)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--mode", required=True)
    args = parser.parse_args(argv)
    read = _warm(args.mode)
    own_env = dict(os.environ)
    path = Path(args.socket)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    with _address(temporary) as address:
        listener.bind(address)
    os.chmod(temporary, 0o600)
    listener.listen(16)
    os.replace(temporary, path)  # the socket appears only once it listens
    inode = path.stat().st_ino
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener.settimeout(_POLL_SECONDS)
    last = time.monotonic()
    while time.monotonic() - last < IDLE_SECONDS:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            try:
                if path.stat().st_ino != inode or _unheld(path.parent):
                    return 0
            except OSError:
                return 0
            continue
        last = time.monotonic()
        with conn:
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      struct.calcsize("3i")))[1]
            fds: list[int] = []
            try:
                if uid != os.geteuid():
                    raise ValueError(f"uid {uid} is not the stem's")
                conn.settimeout(30)
                request, fds = _recv(conn, 3)
                problem = _valid(request, fds)
                if not problem:
                    differ = sorted(n for n in read if request["env"].get(n) != own_env.get(n))
                    if differ:
                        problem = f"the stem read {', '.join(differ)} as something else"
                if problem:
                    _send(conn, {"error": problem})
                    continue
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    _become_zygote(request, fds)
                _send(conn, {"pid": pid})
            except (OSError, ValueError) as exc:
                with contextlib.suppress(OSError):
                    _send(conn, {"error": str(exc)})
            finally:
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
