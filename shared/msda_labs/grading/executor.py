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
"""

from __future__ import annotations

import io
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

__all__ = [
    "Executor",
    "InfrastructureError",
    "Outcome",
    "probe_ref",
]

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|PRIVATE_KEY|^MODAL_|"
                          r"^AWS_|^ACTIONS_(ID_TOKEN|RUNTIME)", re.IGNORECASE)

# Modes and the TRITON_INTERPRET value their zygote starts with.
_MODE_ENV = {"cpu": None, "interpret": "1", "aot": "0", "gpu": "0"}


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


def _decode_payload(raw: bytes) -> Any:
    import torch

    # weights_only: tensors, numbers, strings, lists, tuples, dicts; nothing that runs code.
    return torch.load(io.BytesIO(raw), weights_only=True)


class _Zygote:
    def __init__(self, mode: str, preload: list[str], env: dict[str, str]):
        self.mode = mode
        parent_sock, child_sock = socket.socketpair()
        # Credentials stay with the judge: student code must not read a Modal or GitHub token
        # that an instructor's regrade (or a CI job) holds in its environment.
        full_env = {k: v for k, v in os.environ.items() if not _SECRET_NAME.search(k)}
        full_env.update(env)
        flag = _MODE_ENV[mode]
        if flag is None:
            full_env.pop("TRITON_INTERPRET", None)
        else:
            full_env["TRITON_INTERPRET"] = flag
        full_env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
        full_env["PYTHONUNBUFFERED"] = "1"
        cmd = [sys.executable, "-m", "msda_labs.grading.zygote", "--fd", str(child_sock.fileno()),
               "--mode", mode]
        for path in preload:
            cmd += ["--preload", path]
        self.proc = subprocess.Popen(cmd, pass_fds=(child_sock.fileno(),), env=full_env,
                                     stdin=subprocess.DEVNULL)
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


class Executor:
    """Runs probes against one submission file, one forked child per request."""

    def __init__(self, submission: Path, *, workdir: Path | None = None,
                 preload: list[str] | None = None, env: dict[str, str] | None = None,
                 default_timeout: float = 60.0):
        self.submission = Path(submission).resolve()
        self.workdir = Path(workdir or self.submission.parent).resolve()
        self.preload = [str(Path(p).resolve()) for p in (preload or [])]
        self.env = {"MSDA_STAGE": "chips", **(env or {})}
        self.default_timeout = default_timeout
        self._zygotes: dict[str, _Zygote] = {}

    def start(self, mode: str) -> None:
        """Start the zygote of ``mode`` in the background (it takes about 2 s to warm)."""
        if mode not in _MODE_ENV:
            raise InfrastructureError(f"unknown mode {mode!r}")
        zyg = self._zygotes.get(mode)
        if zyg is None or not zyg.alive():
            self._zygotes[mode] = _Zygote(mode, self.preload, self.env)

    def _ready(self, mode: str) -> _Zygote:
        self.start(mode)
        zyg = self._zygotes[mode]
        zyg.wait_ready()
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

    @staticmethod
    def _interpret(reply: dict, timeout: float) -> Outcome:
        output = reply.get("output", "")
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
                       message=str(payload.get("message", "")), output=output,
                       duration=duration, extra={"type": payload.get("type", "")})

    def close(self) -> None:
        for zyg in self._zygotes.values():
            try:
                zyg.conn.send(("exit", None))
            except OSError:
                pass
            zyg.kill()
        self._zygotes.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
