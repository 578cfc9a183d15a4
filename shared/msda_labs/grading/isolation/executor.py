"""Run submission code away from the process that decides verdicts.

The judge (the pytest process) never imports the student's module. It keeps one warm helper
process per runtime mode, the *zygote*, which has imported torch (and triton) but never runs
student code itself. For every request the zygote forks a child; the child closes its line to the
judge, starts its own session, redirects its output to a file, imports the submission, runs a
*probe* (a module-level function of a test module, called as ``probe(module, *args)``) and writes
its result back through a pipe, serialized with ``torch.save``. The judge reads that result with
``torch.load(weights_only=True)``: plain data and tensors only, so a submission cannot smuggle
code into the judge. A crash, a hang, an ``exit()`` or a monkeypatched comparison inside the child
can only cost that one request.

Forking from a warm zygote costs about 10 ms, against about 2 s to start Python with torch and
triton; that is what keeps a lab's grading within seconds.

Where the grader runs as root, each child also drops to a uid of its own before it imports the
submission (:mod:`msda_labs.grading.isolation.sandbox`): the executor claims the uid, hides the
judge-only files from it and proves, with a preflight process of that uid, that it cannot open
them.
:attr:`Executor.separation` says whether that holds (``separated``) and how.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from msda_labs.grading.isolation import judgeonly, sandbox, stem

__all__ = [
    "Conversation",
    "Executor",
    "InfrastructureError",
    "Outcome",
    "probe_ref",
    "relay_safe",
    "grading_env",
    "python_command",
    "package_root",
]

# SEED: the instructor's secret (MSDA_GRADE_SEED, MSDA_GRADE_SEED_FILE); children get only the
# per-submission salt (MSDA_CASE_SALT). PYTHONHASHSEED is no secret.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|PRIVATE_KEY|^MODAL_|"
                          r"^AWS_|^ACTIONS_(ID_TOKEN|RUNTIME)|(?<!PYTHONHASH)SEED", re.IGNORECASE)
# A line that a GitHub runner would take as a workflow command: "::name ...::" once trimmed, or
# the older "##[name ...]" anywhere in the line.
_WORKFLOW_COMMAND = re.compile(r"^(\s*)::|##\[")

# Modes and the TRITON_INTERPRET value their zygote starts with.
_MODE_ENV = {"cpu": None, "interpret": "1", "aot": "0", "gpu": "0"}

# The environment of a grading process (the judge that a regrade starts, a zygote) is built from
# these names and prefixes, never inherited wholesale: a variable that changes how Python, pytest
# or torch start (PYTHONSTARTUP, PYTEST_ADDOPTS, PYTEST_PLUGINS, LD_PRELOAD, ...) stays behind.
_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
    "LD_LIBRARY_PATH", "PYTHONPATH",  # PYTHONPATH: read by python_command, ignored under -I
})
_ENV_PREFIXES = ("LC_", "MSDA_", "TRITON_", "TORCH_", "PYTORCH_", "CUDA_", "NVIDIA_", "OMP_",
                 "MKL_", "OPENBLAS_")
# Set in every grading process: only the plugins the kit names are loaded (``-p
# msda_labs.grading.judge.plugin``), and torch loads no device backend that an installed (or
# planted) package declares as an entry point.
_FIXED_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
# How a grading process starts: isolated mode (-I: no current folder, script folder, PYTHON*
# variable or user site on sys.path), then the kit's package root and the instructor's own
# PYTHONPATH entries, given here, in front.
_BOOT = ("import sys; sys.path[:0] = [p for p in sys.argv[1].split({sep!r}) if p]; "
         "name = sys.argv[2]; sys.argv = [name, *sys.argv[3:]]; import runpy; "
         "runpy.run_module(name, run_name='__main__', alter_sys=True)")


def package_root() -> Path:
    """The folder that holds this ``msda_labs`` package (``shared/`` of the kit or an export)."""
    return Path(__file__).resolve().parents[3]


def grading_env(extra: dict[str, str] | None = None, *,
                base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a grading process: the allowed names of ``base`` (this process's
    environment), ``extra``, and the switches that turn plugin and backend autoloading off."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if k in _ENV_NAMES or k.startswith(_ENV_PREFIXES)}
    env.update(extra or {})
    env.update(_FIXED_ENV)
    return env


def _search_path(path: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The kit's package root, ``path``, then the absolute entries of $PYTHONPATH (never the
    current folder: ``""``, ``.`` and relative entries are dropped)."""
    extra = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    found = [str(package_root()), *path, *extra]
    return [p for p in dict.fromkeys(found) if p and os.path.isabs(p)]


def python_command(module: str, *args: str, path: list[str] | tuple[str, ...] = (),
                   python: str | None = None, unbuffered: bool = False) -> list[str]:
    """``python -m module args`` for a grading process, in isolated mode with a fixed search
    path: the kit's package root (or the first entry of ``path``), ``path`` and $PYTHONPATH's
    absolute entries, then the interpreter's own site-packages. Nothing in the current folder
    (a student's checkout) can be imported, and no ``.pth`` or ``sitecustomize`` there runs."""
    search = [*path, *_search_path()] if path else _search_path()
    search = [p for p in dict.fromkeys(search) if p and os.path.isabs(p)]
    # -B: a grading process writes no bytecode (no __pycache__ in the lab or the course
    # folder); it still reads what is there (the interpreter's own packages, compiled already).
    return [python or sys.executable, "-I", "-B", *(["-u"] if unbuffered else []), "-c",
            _BOOT.format(sep=os.pathsep), os.pathsep.join(search), module, *args]


class InfrastructureError(RuntimeError):
    """The grader itself cannot run (no triton, zygote failed to start...)."""


@dataclass
class Outcome:
    """What came back from one request. ``kind`` is ok, not_attempted, error, crashed or timeout."""

    kind: str
    value: Any = None
    message: str = ""
    output: str = ""  # the tail of what the submission printed
    duration: float = 0.0
    extra: dict = field(default_factory=dict)


def probe_ref(fn: Callable) -> tuple[str, str, str]:
    """How a child finds ``fn``: (module name, file, qualified name)."""
    module = sys.modules.get(fn.__module__)
    path = getattr(module, "__file__", None) or ""
    return fn.__module__, str(Path(path).resolve()) if path else "", fn.__qualname__


def relay_safe(text: str) -> str:
    """``text`` (what a submission printed or raised) with every line that a GitHub runner would
    execute as a workflow command defused: a leading ``::`` becomes ``: :``, ``##[`` ``## [``.
    A runner splits its output at CR as well as LF, so a CR starts a line here too."""
    return "\n".join(_WORKFLOW_COMMAND.sub(lambda m: f"{m.group(1)}: :" if m.group(0).strip()
                                            == "::" else "## [", line)
                     for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))


def _one_line(text: str) -> str:
    return relay_safe(" ".join(part.strip() for part in text.splitlines() if part.strip()))[:2000]


def _error_fields(payload: dict) -> dict:
    """The type, line, function and ``Type: message`` of an error the child reported, each
    checked (the child runs student code: what it sends is untrusted)."""
    line = payload.get("line")
    function = payload.get("function")
    return {"type": str(payload.get("type", ""))[:100],
            "line": line if type(line) is int and line > 0 else None,
            "function": function[:100] if isinstance(function, str) and
            function.isidentifier() else "",
            "error": _one_line(str(payload.get("error") or ""))[:500]}


def _decode_payload(raw: bytes) -> Any:
    import torch

    # weights_only: tensors, numbers, strings, lists, tuples, dicts; nothing that runs code.
    return torch.load(io.BytesIO(raw), weights_only=True)


class _Zygote:
    def __init__(self, mode: str, env: dict[str, str], *, preload: list[str],
                 modules: list[str], lab: int | None, plan: dict | None, submission: str = ""):
        self.mode = mode
        self.info: dict = {}
        parent_sock, child_sock = socket.socketpair()
        # Credentials stay with the judge: student code must not read a Modal or GitHub token
        # that an instructor's regrade (or a CI job) holds in its environment, nor the seed.
        full_env = {k: v for k, v in grading_env(env).items() if not _SECRET_NAME.search(k)}
        for name in (sandbox.JUDGE_ONLY_ENV, sandbox.PRIVATE_FOLDER_ENV, stem.STEMS_ENV):
            full_env.pop(name, None)  # paths the judge needs and a child does not
        flag = _MODE_ENV[mode]
        if flag is None:
            full_env.pop("TRITON_INTERPRET", None)
        else:
            full_env["TRITON_INTERPRET"] = flag
        full_env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
        full_env["PYTHONUNBUFFERED"] = "1"  # for the children's own interpreters, if any
        cmd = python_command("msda_labs.grading.isolation.zygote", "--fd", str(child_sock.fileno()),
                             "--mode", mode, unbuffered=True)
        if lab is not None:
            cmd += ["--lab", str(lab)]
        if plan is not None:
            cmd += ["--plan", json.dumps(plan), "--submission", submission]
        for name in modules:
            cmd += ["--preload-module", name]
        for path in preload:
            cmd += ["--preload", path]
        # Its working folder is the package root (the judge's), never the student's folder. A
        # warm stem forks it where the host keeps stems (grading.isolation.stem); else it starts
        # cold.
        self.proc = stem.spawn(cmd, full_env, str(package_root()), child_sock.fileno()) or \
            subprocess.Popen(cmd, pass_fds=(child_sock.fileno(),), env=full_env,
                             stdin=subprocess.DEVNULL, cwd=package_root())
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self._ready = False

    def wait_ready(self, timeout: float = 180.0) -> None:
        if self._ready:
            return
        if not self.conn.poll(timeout):
            self.kill()
            raise InfrastructureError(
                f"the {self.mode} worker did not start within {timeout:.0f} s")
        try:
            kind, info = self.conn.recv()
        except EOFError:
            self.kill()
            raise InfrastructureError(
                f"the {self.mode} worker died while starting (exit status {self.proc.wait()})"
            ) from None
        if kind != "ready":
            self.kill()
            raise InfrastructureError(info)
        self.info = info
        self._ready = True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass


class Conversation:
    """A probe that runs while the judge talks with it (:meth:`Executor.converse`)."""

    def __init__(self, executor: Executor, zyg: _Zygote, mode: str, conn: Connection,
                 timeout: float):
        self.conn = conn
        self._executor, self._zyg, self._mode, self._timeout = executor, zyg, mode, timeout
        self._outcome: Outcome | None = None

    def finish(self) -> Outcome:
        """Close the judge's end of the line and wait for the probe's result."""
        if self._outcome is not None:
            return self._outcome
        try:
            self.conn.close()
        except OSError:
            pass
        zyg = self._zyg
        try:
            if not zyg.conn.poll(self._timeout + 60):
                raise TimeoutError
            reply = zyg.conn.recv()
        except (EOFError, OSError, BrokenPipeError, TimeoutError):
            zyg.kill()
            self._executor._zygotes.pop(self._mode, None)
            self._outcome = Outcome("crashed", message="the grading worker died while running "
                                                       "this test")
            return self._outcome
        self._outcome = Executor._interpret(reply, self._timeout)
        return self._outcome


class Executor:
    """Runs probes against one submission file, one forked child per request.

    ``lab`` (the lab's number) and ``lab_dir`` say which judge-only files to hide and which chips
    the child side may hold; ``preload`` are probe modules (files) and ``preload_modules`` package
    modules that every zygote imports before it serves. ``source``: the submission's text as the
    judge read it (:func:`msda_labs.grading.isolation.source.decode_submission`); each request
    carries it and the child compiles it, so what runs is what the rules read. Without it, the
    zygote reads the file and decodes it the same way.
    """

    def __init__(self, submission: Path, *, workdir: Path | None = None,
                 preload: list[str] | None = None, env: dict[str, str] | None = None,
                 default_timeout: float = 60.0, lab: int | None = None,
                 lab_dir: Path | None = None, preload_modules: list[str] | None = None,
                 source: str | None = None):
        self.submission = Path(submission).resolve()
        self.source = source
        self.workdir = Path(workdir or self.submission.parent).resolve()
        self.preload = [str(Path(p).resolve()) for p in (preload or [])]
        self.preload_modules = list(preload_modules or [])
        self.lab = lab
        self.lab_dir = Path(lab_dir).resolve() if lab_dir else None
        self.env = {"MSDA_STAGE": "chips", **(env or {})}
        self.default_timeout = default_timeout
        self._zygotes: dict[str, _Zygote] = {}
        self._sandbox: sandbox.Sandbox | None = None
        self._required = False
        self.separation: dict | None = None  # decided when the first worker starts

    def _separate(self) -> None:
        """Decide, once, whether children run as a uid of their own (see the module docstring)."""
        if self.separation is not None:
            return
        try:
            wanted = sandbox.policy()
        except sandbox.SandboxError as exc:
            raise InfrastructureError(str(exc)) from None
        self._required = wanted == "required"
        if wanted == "off":
            self.separation = {"separated": False, "why": f"{sandbox.SEPARATE_ENV}=0"}
            return
        if not sandbox.is_root():
            if wanted == "required":
                raise InfrastructureError(
                    f"{sandbox.SEPARATE_ENV}=1 but the grader runs as uid {os.geteuid()}: running "
                    f"submissions as a separate user needs root (it takes a uid per executor)")
            self.separation = {"separated": False, "why": "the grader does not run as root"}
            return
        try:
            box = sandbox.Sandbox.open()
            paths = judgeonly.judge_only_paths(self.lab_dir, self.lab)
            judgeonly.hide(paths)
            opened, error = judgeonly.preflight(box.plan(), paths)
        except (OSError, sandbox.SandboxError) as exc:
            raise InfrastructureError(f"could not set up separation: {exc}") from None
        if error or opened:
            why = (f"uid {box.uid} could not be taken ({error})" if error else
                   f"uid {box.uid} can still read {', '.join(opened[:3])}")
            if wanted == "required" or error:
                box.close()
            if wanted == "required":
                raise InfrastructureError(
                    f"separation is not in force: {why}. {sandbox.SEPARATE_ENV}=1 requires it; "
                    f"make those files unreadable to other users, or set "
                    f"{sandbox.SEPARATE_ENV}=0 for an ungraded run")
            self.separation = {"separated": False, "why": why}
            self._sandbox = None if error else box
            return
        self._sandbox = box
        private = os.environ.get(sandbox.PRIVATE_FOLDER_ENV, "")
        if private and Path(private).resolve() == self.submission.parent:
            sandbox.share_with(self.submission.parent, box.gid)
        self.separation = {"separated": True, "uid": box.uid, "hidden": [str(p) for p in paths]}

    def start(self, mode: str) -> None:
        """Start the zygote of ``mode`` in the background (it takes about 2 s to warm)."""
        if mode not in _MODE_ENV:
            raise InfrastructureError(f"unknown mode {mode!r}")
        self._separate()
        zyg = self._zygotes.get(mode)
        if zyg is None or not zyg.alive():
            plan = self._sandbox.plan(gpu=mode == "gpu") if self._sandbox else None
            self._zygotes[mode] = _Zygote(mode, self.env, preload=self.preload,
                                          modules=self.preload_modules, lab=self.lab, plan=plan,
                                          submission=str(self.submission))

    def _ready(self, mode: str) -> _Zygote:
        self.start(mode)
        zyg = self._zygotes[mode]
        zyg.wait_ready()
        missing = zyg.info.get("unreachable") if self._sandbox is not None else None
        if missing:
            why = (f"a child of uid {self._sandbox.uid} cannot read what it imports from: "
                   f"{', '.join(missing[:3])}")
            self._stop_all()
            if self._required:
                raise InfrastructureError(f"separation is not possible here: {why}. "
                                          f"{sandbox.SEPARATE_ENV}=1 requires it")
            self.separation = {"separated": False, "why": why}
            return self._ready(mode)  # the same worker, unseparated
        if self._sandbox is not None and "netns" not in self.separation:
            network = zyg.info.get("network", "")
            self.separation["netns"] = not network
            if network:
                self.separation["network"] = f"network not isolated on this platform ({network})"
        if self._sandbox is not None and "private" not in self.separation:
            # Each child's own PID, mount and IPC namespaces, fresh tmpfs over every
            # world-writable folder (grading.isolation.world); where refused, said here.
            self.separation["private"] = bool(zyg.info.get("private"))
            if zyg.info.get("world"):
                self.separation["world"] = zyg.info["world"]
        return zyg

    def run(self, probe: Callable | tuple[str, str, str], *args, mode: str = "cpu",
            timeout: float | None = None, **kwargs) -> Outcome:
        """Run ``probe(submission_module, *args, **kwargs)`` in a fresh child of the zygote."""
        timeout = float(timeout or self.default_timeout)
        ref = probe if isinstance(probe, tuple) else probe_ref(probe)
        request = {
            "probe": ref,
            "args": pickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL),
            "submission": str(self.submission),
            "source": self.source,
            "workdir": str(self.workdir),
            "timeout": timeout,
        }
        for attempt in (1, 2):
            zyg = self._ready(mode)
            try:
                zyg.conn.send(("run", request))
                if not zyg.conn.poll(timeout + 60):
                    raise TimeoutError
                reply = zyg.conn.recv()
                break
            except (EOFError, OSError, BrokenPipeError, TimeoutError):
                # The zygote itself died or stalled (a child can signal its parent). Restart it
                # and count this request as crashed: no result, no points.
                zyg.kill()
                self._zygotes.pop(mode, None)
                if attempt == 2:
                    return Outcome("crashed", message="the grading worker died while running "
                                                      "this test")
        else:  # pragma: no cover
            raise AssertionError
        return self._interpret(reply, timeout)

    def converse(self, probe: Callable | tuple[str, str, str], *args, mode: str = "cpu",
                 timeout: float | None = None, submission: Path | str | None = None,
                 **kwargs) -> Conversation:
        """Start ``probe(submission_module, *args, channel=..., **kwargs)`` in a fresh child and
        return at once: the judge talks with the running probe through
        :attr:`Conversation.conn` (a socket of its own, straight to the child), then collects
        the probe's result with :meth:`Conversation.finish`. What the child sends on that line
        is untrusted: read it as bytes (``recv_bytes``), never unpickle it. ``submission``: a
        file of the kit the child imports instead of the student's (a clean child, forked from
        the same worker, that runs no student code)."""
        timeout = float(timeout or self.default_timeout)
        ref = probe if isinstance(probe, tuple) else probe_ref(probe)
        request = {
            "probe": ref,
            "args": pickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL),
            "submission": str(submission or self.submission),
            "source": None if submission else self.source,
            "workdir": str(self.workdir),
            "timeout": timeout,
            "channel": True,
        }
        from multiprocessing import reduction

        zyg = self._ready(mode)
        ours, theirs = socket.socketpair()
        try:
            zyg.conn.send(("run", request))
            reduction.send_handle(zyg.conn, theirs.fileno(), zyg.proc.pid)
        except (OSError, BrokenPipeError):
            ours.close()
            zyg.kill()
            self._zygotes.pop(mode, None)
            raise InfrastructureError("the grading worker died before the conversation "
                                      "started") from None
        finally:
            theirs.close()
        return Conversation(self, zyg, mode, Connection(ours.detach()), timeout)

    @staticmethod
    def _interpret(reply: dict, timeout: float) -> Outcome:
        if reply["status"] == "infra":
            raise InfrastructureError(reply["message"])
        output = relay_safe(reply.get("output", ""))
        duration = reply.get("duration", 0.0)
        if reply["status"] == "timeout":
            return Outcome("timeout", message=f"did not finish within the {timeout:g} s time limit",
                           output=output, duration=duration)
        raw = reply.get("payload") or b""
        payload = None
        if raw:
            try:
                payload = _decode_payload(raw)
            except Exception as exc:  # forged or truncated result: no points
                return Outcome("crashed", message=f"returned a result the grader cannot read "
                                                  f"({type(exc).__name__})",
                               output=output, duration=duration)
        if not isinstance(payload, dict) or payload.get("kind") not in (
                "ok", "not_attempted", "error"):
            if reply["status"] == "signaled":
                how = f"was killed by signal {reply['code']}"
            else:
                how = f"exited with status {reply['code']} before returning a result"
            last = output.strip().splitlines()[-1:] if output.strip() else []
            hint = f"; last output: {last[0][:200]}" if last else ""
            return Outcome("crashed", message=f"the process running your code {how}{hint}",
                           output=output, duration=duration)
        return Outcome(payload["kind"], value=payload.get("value"),
                       message=_one_line(str(payload.get("message", ""))), output=output,
                       duration=duration, extra=_error_fields(payload))

    def _stop_all(self) -> None:
        """Stop every worker and give the sandbox back (separation turned off)."""
        for zyg in self._zygotes.values():
            zyg.kill()
        self._zygotes.clear()
        self._give_back()

    def _give_back(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()  # never raises; its Triton cache goes with it
            self._sandbox = None

    def close(self) -> None:
        for zyg in self._zygotes.values():
            try:
                zyg.conn.send(("exit", None))
            except OSError:
                pass
            zyg.kill()
        self._zygotes.clear()
        self._give_back()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
