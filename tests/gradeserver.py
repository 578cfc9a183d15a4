"""A warm grading server for the self-test: ``python -m msda_labs grade`` without the start-up.

Every grading run of the self-test (:func:`kit.run_grade`) used to start a fresh interpreter that
imported torch, numpy and pytest before any test ran: about a second of CPU per run, hundreds of
runs. The server pays that once per test process. It is a process of its own, started from this
file with the test process's environment and working folder, that imports what every grading
run's judge imports (:data:`PRELOAD`) and nothing of any submission, then waits. For each
request it forks a child from that pristine image, and the child does what the real command does:

* the environment becomes the request's, exactly (``os.environ`` cleared and refilled);
* the working folder and ``sys.path`` are those of ``python -m msda_labs`` started there (the
  folder first; ``msda_labs/__main__.py`` removes it, as in the real command);
* ``sys.argv`` is ``-m`` and the arguments, and the package runs as ``__main__`` through
  :func:`runpy._run_module_as_main`, the function behind ``python -m``;
* stdout and stderr go to files that the client reads back, as ``capture_output`` does;
* the exit status follows the interpreter's rules (``SystemExit``'s code, 1 with a traceback
  for an uncaught exception), after the ``atexit`` handlers ran, and a child killed by a signal
  reads as ``-SIGNAL``, as :class:`subprocess.Popen` reports it;
* Python's ``random`` and numpy's global generator are reseeded from the OS, as in a new process;
* a preloaded module of the kit whose file changed since the server loaded it (an edit during
  the run) makes the server refuse the run, and the client starts a new server.

The child is the judge: it starts its zygotes (:mod:`msda_labs.grading.isolation.executor`) as the
real command does, from fresh interpreters. Nothing crosses from one grading run to the next: each
child is forked from the server, which never grades.

A server serves one working folder and one environment as it was when the server imported:
a request may differ from it only in ``PYTEST_CURRENT_TEST`` and in the ``MSDA_`` names that no
preloaded module read (the server records the names that Python code looked up while it
imported; native code reads no ``MSDA_`` name). A request with another environment gets a new
server started with that environment (:func:`server`). One difference remains by construction:
the children of one server share its hash seed, where fresh interpreters draw one each.
``MSDA_PLAIN_GRADE=1`` sends every call to a plain subprocess.
"""

from __future__ import annotations

import atexit
import importlib
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

PLAIN_ENV = "MSDA_PLAIN_GRADE"  # "1": every grading run in a plain subprocess

# What every grading run's judge imports, whatever the lab (the modules common to the judges of
# all eleven labs' chips). Never the grading plugin: pytest loads it with ``-p`` and rewrites its
# asserts, which it cannot do to a module imported before. Never a module that sets an
# environment variable as it loads (msda_labs.student.runtime) or reads one (the chips): the
# server checks both after loading.
PRELOAD = (
    "torch",
    "numpy",
    "pytest",
    "yaml",
    "msda_labs.cli",
    "msda_labs.flow",
    "msda_labs.course.ladder",
    "msda_labs.course.manifest",
    "msda_labs.course.resolve",
    "msda_labs.grading.judge.compare",
    "msda_labs.grading.judge.diagnosis",
    "msda_labs.grading.isolation.executor",
    "msda_labs.grading.judge.integrity",
    "msda_labs.grading.isolation.judgeonly",
    "msda_labs.grading.judge.render",
    "msda_labs.grading.judge.results",
    "msda_labs.grading.judge.rules",
    "msda_labs.grading.isolation.sandbox",
    "msda_labs.grading.isolation.secret",
    "msda_labs.grading.judge.stage_run",
    "msda_labs.grading.judge.submission",
    "msda_labs.mistakes.forward",
    "msda_labs.mistakes.gradients",
    "msda_labs.mistakes.grid_sample",
    "msda_labs.mistakes.layers",
    "msda_labs.mistakes.memory",
    "msda_labs.mistakes.pointers",
    "msda_labs.mistakes.registry",
    "msda_labs.mistakes.submissions",
    "msda_labs.student.cases",
    "msda_labs.student.examples",
    "msda_labs.student.guards",
    "msda_labs.student.memsim",
    "msda_labs.truth.cases",
    "msda_labs.truth.layers",
    "msda_labs.truth.memory",
    "msda_labs.truth.reference",
)
# Loaded by nobody in the server (see PRELOAD); the server refuses to serve if one is.
NEVER_PRELOADED = ("msda_labs.grading.judge.plugin", "msda_labs.student.runtime",
                   "msda_labs.chips.")
# Environment names a request may set differently from the server's own environment.
FREE_NAMES = ("PYTEST_CURRENT_TEST",)
FREE_PREFIXES = ("MSDA_",)


# -- the server ---------------------------------------------------------------------------------

def _preload() -> dict:
    """Import :data:`PRELOAD`; say which environment names Python code looked up meanwhile, and
    what went wrong (an import that changed the environment or ``sys.path``, a module that must
    not be preloaded). Names read by native code are not seen: only ``MSDA_`` names are ever
    free (:data:`FREE_PREFIXES`), and no native library reads those."""
    before_env, before_path = dict(os.environ), list(sys.path)
    environ_type = type(os.environ)
    lookup = environ_type.__getitem__  # get, ``in`` and os.getenv all go through it
    read: set[str] = set()

    def watched(self, key):
        read.add(key)
        return lookup(self, key)

    environ_type.__getitem__ = watched
    try:
        for name in PRELOAD:
            importlib.import_module(name)
    finally:
        environ_type.__getitem__ = lookup
    problems = []
    if dict(os.environ) != before_env:
        problems.append("a preloaded module changed the environment")
    if sys.path != before_path:
        problems.append(f"a preloaded module changed sys.path: {sys.path} (was {before_path})")
    stray = [m for m in sys.modules if m.startswith(NEVER_PRELOADED) or m in NEVER_PRELOADED]
    if stray:
        problems.append(f"modules that must be loaded by the graded run itself: {stray}")
    return {"read": sorted(k for k in read if isinstance(k, str)), "problems": problems}


def _exit_code(exc: SystemExit) -> int:
    """The status the interpreter exits with for ``exc``, printing what it would print."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:  # noqa: BLE001 - the interpreter carries on as well
        pass
    return 1


def _reseed() -> None:
    import random

    random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _fresh_main() -> None:
    """A ``__main__`` module as a new interpreter has it (runpy runs the package's __main__.py
    in it; the server's own script must not be its namespace)."""
    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main


def _child(request: dict, keep: tuple[int, ...], base_path: list[str]) -> None:
    """The forked child: one run of ``python -m MODULE ARGS``. Never returns."""
    code = 1
    try:
        for fd in keep:
            os.close(fd)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _reseed()
        sys.path[:] = [os.getcwd(), *base_path]  # as `python -m` starts, from that folder
        sys.argv[:] = ["-m", *request["args"]]
        sys.orig_argv[:] = [sys.executable, "-m", request["module"], *request["args"]]
        _fresh_main()
        import runpy
    except BaseException:  # noqa: BLE001 - the harness's own failure, said on the run's stderr
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(70)
    try:
        try:
            runpy._run_module_as_main(request["module"])
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException:  # noqa: BLE001 - reported as the interpreter reports it
            sys.excepthook(*sys.exc_info())
            code = 1
        import threading

        shutdown = getattr(threading, "_shutdown", None)
        if shutdown is not None:
            shutdown()  # wait for the threads that are not daemons, as the interpreter does
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _wait(pid: int, timeout: float) -> int | None:
    """The child's status as :class:`subprocess.Popen` reports it (``-N``: killed by signal N),
    or None when it ran past ``timeout`` (it is then killed)."""
    deadline = time.monotonic() + timeout
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(left, 0.05))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _kit_files(root: str) -> dict[str, tuple[int, int]]:
    """(mtime, size) of every loaded module's file below ``root`` (the kit's checkout)."""
    found = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and path.startswith(root):
            try:
                stat = os.stat(path)
            except OSError:
                stat = None
            found[path] = (stat.st_mtime_ns, stat.st_size) if stat else (0, -1)
    return found


def _changed(files: dict[str, tuple[int, int]]) -> list[str]:
    """The files of ``files`` that are no longer what the server loaded."""
    out = []
    for path, seen in files.items():
        try:
            stat = os.stat(path)
            now = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            now = (0, -1)
        if now != seen:
            out.append(path)
    return out


def serve(fd: int) -> None:
    """Preload, say ready, then run each request in a fresh fork until the line closes. A
    request that finds a preloaded module of the kit changed on disk since is not run: the
    reply says so, and the client starts a new server (a new interpreter would load the new
    code)."""
    conn = Connection(fd)
    base_path = [p for p in sys.path[1:]]  # without this file's folder
    sys.path[0:1] = []
    info = _preload()
    kit_root = str(Path(__file__).resolve().parents[1]) + os.sep
    loaded = _kit_files(kit_root)
    conn.send(("ready", {"pid": os.getpid(), "cwd": os.getcwd(), "env": dict(os.environ),
                         **info}))
    while True:
        try:
            kind, request = conn.recv()
        except (EOFError, OSError):
            return
        if kind != "run":
            return
        stale = _changed(loaded)
        if stale:
            conn.send(("stale", {"files": stale}))
            continue
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the forked child
            _child(request, (conn.fileno(),), base_path)
        code = _wait(pid, request["timeout"])
        try:
            conn.send(("done", {"code": code, "pid": pid}))
        except OSError:  # the test process is gone: so is the reason to serve
            return


# -- the client ---------------------------------------------------------------------------------

class ServerError(RuntimeError):
    """The grading server could not start, or died while serving."""


class Stale(Exception):
    """The server's preloaded code of the kit changed on disk: a new server is needed."""


class GradeServer:
    """One warm server, started by the test process that uses it."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.cwd = str(Path(cwd).resolve())
        self.owner = os.getpid()
        ours, theirs = socket.socketpair()
        self.log = tempfile.NamedTemporaryFile(prefix="msda-gradeserver-", suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), cwd=self.cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self.log)
        theirs.close()
        self.conn = Connection(ours.detach())
        if not self.conn.poll(300):
            self.close()
            raise ServerError("the grading server did not start within 300 s")
        try:
            kind, info = self.conn.recv()
        except (EOFError, OSError):
            raise ServerError(f"the grading server died while starting:\n{self._log()}") \
                from None
        if kind != "ready":
            raise ServerError(f"the grading server did not start: {info}")
        if info["problems"]:
            self.close()
            raise ServerError("the grading server's image is not what a grading run starts "
                              "from: " + "; ".join(info["problems"]))
        self.env: dict[str, str] = info["env"]
        self.read = set(info["read"])
        self.served = 0  # requests answered

    def _log(self) -> str:
        try:
            return Path(self.log.name).read_text()[-3000:]
        except OSError:
            return ""

    def differences(self, env: dict[str, str], cwd: str) -> list[str]:
        """Why a run with ``env`` in ``cwd`` cannot come from the warm image ([] when it can)."""
        why = []
        if str(Path(cwd).resolve()) != self.cwd:
            why.append(f"working folder {cwd} (the server's: {self.cwd})")
        for name in sorted(set(env) | set(self.env)):
            if env.get(name) == self.env.get(name):
                continue
            free = name in FREE_NAMES or name.startswith(FREE_PREFIXES)
            if not free or name in self.read:
                why.append(f"${name} differs from the server's")
        return why

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, module: str, args: list[str], *, env: dict[str, str], cwd: str,
            timeout: float) -> subprocess.CompletedProcess:
        """``python -m module args`` in a fresh fork of the warm image; raises
        :class:`subprocess.TimeoutExpired` as :func:`subprocess.run` does."""
        with tempfile.TemporaryDirectory(prefix="msda-gradeserver-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request = {"module": module, "args": list(args), "env": dict(env), "cwd": cwd,
                       "stdout": str(out), "stderr": str(err), "timeout": timeout}
            try:
                self.conn.send(("run", request))
                if not self.conn.poll(timeout + 60):
                    raise ServerError(f"the grading server did not answer within {timeout + 60} s")
                kind, reply = self.conn.recv()
            except (EOFError, OSError) as exc:
                raise ServerError(f"the grading server died ({exc}):\n{self._log()}") from None
            if kind == "stale":
                raise Stale(reply["files"])
            self.served += 1
            stdout = out.read_text(errors="replace") if out.is_file() else ""
            stderr = err.read_text(errors="replace") if err.is_file() else ""
        cmd = [sys.executable, "-m", module, *args]
        if reply["code"] is None:
            raise subprocess.TimeoutExpired(cmd, timeout, output=stdout, stderr=stderr)
        return subprocess.CompletedProcess(cmd, reply["code"], stdout, stderr)

    def close(self) -> None:
        if os.getpid() != self.owner:
            return
        try:
            self.conn.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


_SERVER: GradeServer | None = None


def plain_requested() -> bool:
    return os.environ.get(PLAIN_ENV, "") not in ("", "0")


def server(cwd: Path, env: dict[str, str] | None = None) -> GradeServer:
    """This test process's warm server for runs in ``cwd`` with ``env`` (default: this
    process's environment): started on first use, and started again if it died or if ``env``
    differs from the one it was started with in a name that is not free (see
    :meth:`GradeServer.differences`)."""
    global _SERVER
    env = dict(os.environ if env is None else env)
    if _SERVER is not None and (_SERVER.owner != os.getpid() or not _SERVER.alive()
                                or _SERVER.differences(env, str(cwd))):
        stop()
    if _SERVER is None:  # started without the free names: the image never reads them
        _SERVER = GradeServer(cwd, {k: v for k, v in env.items() if k not in FREE_NAMES})
        atexit.register(_SERVER.close)
    return _SERVER


def stop() -> None:
    """Close this test process's server, if it started one (it exits when its line closes)."""
    global _SERVER
    if _SERVER is not None:
        _SERVER.close()
        _SERVER = None


def run_warm(module: str, args: list[str], *, env: dict[str, str], cwd: Path,
             timeout: float) -> subprocess.CompletedProcess:
    """``python -m module args`` from this process's warm server for ``cwd`` and ``env``, which
    is started again when the kit's code changed since it loaded it."""
    try:
        return server(cwd, env).run(module, args, env=env, cwd=str(cwd), timeout=timeout)
    except Stale:
        stop()
        return server(cwd, env).run(module, args, env=env, cwd=str(cwd), timeout=timeout)


def run_cli(args: list[str], *, cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 900, warm: bool = True) -> subprocess.CompletedProcess:
    """``python -m msda_labs ARGS`` in ``cwd`` with this process's environment plus ``env``,
    output captured: from the warm server, else (``warm=False`` or ``$MSDA_PLAIN_GRADE=1``) in
    a plain subprocess. An environment that the running server was not started with starts
    another (see :func:`server`)."""
    full_env = {**os.environ, **(env or {})}
    if warm and not plain_requested():
        return run_warm("msda_labs", args, env=full_env, cwd=cwd, timeout=timeout)
    return subprocess.run([sys.executable, "-m", "msda_labs", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
