"""Which of the four runtime modes this process is in, and how to enter one.

    cpu        plain torch, no Triton needed
    interpret  Triton kernels run on the CPU (TRITON_INTERPRET=1, set before triton is imported)
    aot        Triton compiles ahead of time for a named GPU target, no GPU needed
    gpu        a CUDA device runs the kernels

Import this module (or call :func:`configure`) before importing triton: the interpreter flag is
read once, when triton is first imported.
"""

from __future__ import annotations

import os
import sys

MODES = ("cpu", "interpret", "aot", "gpu")

# FMA fusion changes rounding; triton 3.9 warns that its default will change. Pin it so CPU and GPU
# tolerances do not move under the students.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


class ModeError(RuntimeError):
    """The process cannot enter the requested mode (e.g. triton was imported too early)."""


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return False
    return torch.cuda.is_available()


def configure(mode: str) -> str:
    """Set up the environment for ``mode``; returns it. Must run before triton is imported."""
    if mode not in MODES:
        raise ModeError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    wanted = {"interpret": "1", "aot": "0", "gpu": "0"}.get(mode)
    if wanted is not None:
        current = os.environ.get("TRITON_INTERPRET")
        if "triton" in sys.modules and (current or "0") != wanted:
            raise ModeError(
                f"triton was imported with TRITON_INTERPRET={current!r} before mode {mode!r} was "
                f"configured; set TRITON_INTERPRET={wanted} before the first import of triton")
        os.environ["TRITON_INTERPRET"] = wanted
    if mode == "gpu" and not _cuda_available():
        raise ModeError("mode 'gpu' needs a CUDA device, and torch sees none")
    return mode


def detect() -> str:
    """The mode this process is in now."""
    flag = os.environ.get("TRITON_INTERPRET")
    if flag == "1":
        return "interpret"
    if _cuda_available():
        return "gpu"
    if flag == "0":
        return "aot"
    return "cpu"


def device() -> str:
    """Where tensors for kernels belong in this mode: 'cuda' on a GPU, else 'cpu'."""
    return "cuda" if detect() == "gpu" else "cpu"


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def auto() -> str:
    """For a student running a module by hand: the GPU when there is one, else the interpreter."""
    if os.environ.get("TRITON_INTERPRET") is None and not _cuda_available():
        os.environ["TRITON_INTERPRET"] = "1"
    return detect()
