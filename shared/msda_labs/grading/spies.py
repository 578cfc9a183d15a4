"""Probe-side helpers that watch a submission from inside the isolated child.

A probe (see :mod:`msda_labs.grading.executor`) calls the student's code and returns plain data
for the judge. Some facts cannot be read off a return value: whether a call raised and what it
said, which arguments one of the student's functions handed to another, how many torch calls a
function makes. These helpers turn such facts into data:

* :func:`outcome` runs a call and reports the exception it raised (or that it raised none);
* :func:`backward_outcome` runs autograd's backward and reports the gradients or its error;
* :func:`fresh_copy` executes the submission's file again, as a private module;
* :func:`spied` is such a copy with recording wrappers around some of its globals;
* :class:`CountTorchCalls` counts the torch functions called inside a ``with`` block;
* :class:`KernelLaunches` records the Triton kernels launched inside a ``with`` block;
* :func:`swap_in` puts the grader's own version of some of the student's functions in their
  place for one request, from source the judge sends with it (so that a bug costs points once,
  and no file the child imports holds those answers).

Nothing here decides a grade: the judge reads what came back.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

from torch.overrides import TorchFunctionMode

__all__ = ["outcome", "backward_outcome", "fresh_copy", "spied", "CountTorchCalls", "swap_in",
           "KernelLaunches"]


def swap_in(module: ModuleType, parts) -> None:
    """Replace the functions of ``module`` named in ``parts`` = ``(names, source)`` by those that
    ``source`` defines (the judge's: it builds ``parts`` for the one request that needs them);
    empty ``parts``: nothing to replace."""
    if not parts:
        return
    names, source = parts
    grader: dict[str, Any] = {}
    exec(compile(source, "<the grader's parts>", "exec"), grader)  # noqa: S102 - the judge's code
    for name in names:
        setattr(module, name, grader[name])


def outcome(fn: Callable, *args, **kwargs) -> tuple[str, str]:
    """Call ``fn`` and report how it ended, for a judge that decides what an exception means.

    Returns:
        ``("none", "")`` when it returned, else ``(exception type name, message)``.
        NotImplementedError propagates: the task was not attempted.
    """
    try:
        fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the judge decides what the exception means
        return type(exc).__name__, str(exc)
    return "none", ""


def backward_outcome(out, grad, leaves) -> dict:
    """``out.backward(grad)``, then the gradients of ``leaves``, or autograd's error as data.

    Returns:
        ``{"grads": [leaf.grad, ...]}``, or ``{"backward_error": first line of the
        RuntimeError}`` (a backward that returns the wrong number of gradients, or gradients of
        the wrong shape, fails that way); anything else, NotImplementedError included,
        propagates.
    """
    try:
        out.backward(grad)
    except NotImplementedError:
        raise
    except RuntimeError as exc:
        return {"backward_error": str(exc).strip().splitlines()[0][:400]}
    return {"grads": [t.grad for t in leaves]}


def fresh_copy(module: ModuleType, suffix: str = "_again") -> ModuleType:
    """A fresh execution of ``module``'s file under the name ``module.__name__ + suffix``: its
    globals bound anew, so that a decision it took at import time is taken again and its
    globals can be replaced without touching the original."""
    spec = importlib.util.spec_from_file_location(module.__name__ + suffix, module.__file__)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a fresh copy of {module.__file__}")
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    return fresh


def _recording(real: Callable, record: Callable[[dict[str, Any]], Any], log: list) -> Callable:
    signature = inspect.signature(real)

    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        log.append(record(dict(bound.arguments)))
        return real(*args, **kwargs)

    return wrapper


def spied(module: ModuleType, recorders: dict[str, Callable[[dict[str, Any]], Any]]):
    """A fresh copy of ``module`` whose globals named in ``recorders`` record every call.

    Each wrapper binds the call's arguments to the real function's signature (defaults applied)
    and appends ``recorder(arguments)`` to that name's log before calling the real function;
    the copy's own code calls the wrappers, because it looks the names up in its globals.

    Args:
        module: the submission (or any module loaded from a file).
        recorders: global name -> function of the bound arguments ``{parameter: value}``
            returning the plain facts to keep about one call.

    Returns:
        ``(copy, logs)``: the spied copy and ``{name: [facts of each call, in order]}``.
    """
    fresh = fresh_copy(module, "_spied")
    logs: dict[str, list] = {}
    for name, record in recorders.items():
        logs[name] = []
        setattr(fresh, name, _recording(getattr(fresh, name), record, logs[name]))
    return fresh, logs


class CountTorchCalls(TorchFunctionMode):
    """``with CountTorchCalls() as counter:`` counts, in ``counter.calls``, the torch functions
    and tensor methods called inside the block (a Python loop over elements shows up as a count
    that grows with the problem's size)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


class KernelLaunches:
    """Records the Triton kernels launched in this process inside a ``with`` block: the name of
    each kernel's Python function, in order (``self.names``).

    It wraps ``run`` of Triton's launchable kernel classes (the interpreter's and the compiled
    one's; an autotuned kernel launches through them), so a launch through any name counts. It
    watches from inside the student's process: a determined submission can hide from it, so the
    GPU stage also reads the compiled kernels off the disk (lab 10's exam).
    """

    def __init__(self):
        self.names: list[str] = []
        self._undo: list[tuple[type, Callable]] = []

    def __enter__(self):
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        for cls in (InterpretedFunction, JITFunction):
            real = cls.__dict__.get("run")
            if real is None:
                continue

            def run(kernel, *args, _real=real, **kwargs):
                if not kwargs.get("warmup"):
                    fn = getattr(kernel, "fn", None)
                    self.names.append(getattr(fn, "__name__", type(kernel).__name__))
                return _real(kernel, *args, **kwargs)

            cls.run = run
            self._undo.append((cls, real))
        return self

    def __exit__(self, *exc):
        for cls, real in reversed(self._undo):
            cls.run = real
        self._undo.clear()
        return False
