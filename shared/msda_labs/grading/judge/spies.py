"""Probe-side helpers that watch a submission from inside the isolated child.

A probe (see :mod:`msda_labs.grading.isolation.executor`) calls the student's code and returns plain
data for the judge. Some facts cannot be read off a return value: whether a call raised and what it
said, which arguments one of the student's functions handed to another, how many torch calls a
function makes. These helpers turn such facts into data:

* :func:`outcome` runs a call and reports the exception it raised (or that it raised none);
* :func:`backward_outcome` runs autograd's backward and reports the gradients or its error;
* :func:`fresh_copy` executes the submission's file again, as a private module;
* :func:`spied` is such a copy with recording wrappers around some of its globals;
* :class:`CountTorchCalls` counts the torch functions called inside a ``with`` block;
* :class:`ForbiddenOps` records the interpolation functions (grid_sample and its kin) called
  inside a ``with`` block, whatever name reached them;
* :class:`KernelLaunches` records the Triton kernels launched inside a ``with`` block.

Nothing here decides a grade: the judge reads what came back. And everything here runs in the
student's process, which can switch it off or forge what it records: a finding (an interpolation
operator seen, a launch recorded) may cost points, but the absence of one is never believed as
proof. Where a rule carries points, a check the judge makes itself stands beside it where one
exists (docs/security.md lists each fact and where it is checked).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from torch.overrides import TorchFunctionMode

from msda_labs.grading.isolation.source import SourceRefused, decode_submission

__all__ = ["outcome", "backward_outcome", "fresh_copy", "spied", "CountTorchCalls",
           "CountLines", "KernelLaunches", "ForbiddenOps", "INTERPOLATION_OPS"]


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
    # The source comes from the module's own loader: a separated child cannot read the
    # submission's file, which the zygote read for it (grading.isolation.loader).
    source = None
    loader = getattr(module, "__loader__", None)
    if loader is not None and hasattr(loader, "get_source"):
        try:
            source = loader.get_source(module.__name__)
        except (ImportError, OSError):
            source = None
    if source is None:
        try:
            source = decode_submission(Path(module.__file__).read_bytes(), module.__file__)
        except (OSError, TypeError, SourceRefused) as exc:
            raise ImportError(f"cannot load a fresh copy of {module.__file__}: {exc}") from None
    fresh = ModuleType(module.__name__ + suffix)
    fresh.__file__ = module.__file__
    # Compiled as the import compiled it (grading.isolation.loader): the text, and none of this
    # module's __future__ flags.
    exec(compile(source, module.__file__, "exec", dont_inherit=True),  # noqa: S102 - its own code
         fresh.__dict__)
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


class CountLines:
    """``with CountLines(path) as counter:`` counts, in ``counter.lines``, the lines of the file
    ``path`` (the submission) that run inside the block, through ``sys.settrace``: a loop over
    numbers read out of tensors (``.tolist()``) makes few torch calls but runs many lines."""

    def __init__(self, path: str):
        self.path = path
        self.lines = 0

    def _line(self, frame, event, arg):
        if event == "line":
            self.lines += 1
        return self._line

    def _call(self, frame, event, arg):
        return self._line if frame.f_code.co_filename == self.path else None

    def __enter__(self) -> CountLines:
        import sys

        self.lines = 0
        sys.settrace(self._call)
        return self

    def __exit__(self, *exc) -> None:
        import sys

        sys.settrace(None)


class KernelLaunches:
    """Records the Triton kernels launched in this process inside a ``with`` block: each
    kernel's name, in order (``self.names``).

    It wraps two class methods that every launch goes through, whatever name the kernel was
    called by: ``run`` of the interpreter's kernels, and ``launch_metadata`` of a compiled
    kernel, which Triton's own launch path and a launcher that skips ``JITFunction.run`` (lab
    10's shipped kernels) both call before each launch. It watches from inside the student's
    process: a determined submission can hide from it, so the GPU stage also reads the compiled
    kernels off the disk (lab 10's exam).
    """

    def __init__(self):
        self.names: list[str] = []
        self._undo: list[tuple[type, str, Callable]] = []

    def _wrap(self, cls: type, method: str, name_of: Callable) -> None:
        real = cls.__dict__.get(method)
        if real is None:
            return

        def wrapper(kernel, /, *args, **kwargs):  # any keyword, "kernel" too, is the launch's
            if not kwargs.get("warmup"):
                self.names.append(name_of(kernel))
            return real(kernel, *args, **kwargs)

        # An error of the call reads as the real method's (a student sees no spy's name).
        wrapper.__name__, wrapper.__qualname__ = real.__name__, real.__qualname__
        wrapper.__module__ = getattr(real, "__module__", wrapper.__module__)

        setattr(cls, method, wrapper)
        self._undo.append((cls, method, real))

    def __enter__(self):
        from triton.compiler.compiler import CompiledKernel
        from triton.runtime.interpreter import InterpretedFunction

        self._wrap(InterpretedFunction, "run",
                   lambda k: getattr(getattr(k, "fn", None), "__name__", type(k).__name__))
        self._wrap(CompiledKernel, "launch_metadata",
                   lambda k: str(getattr(k, "name", type(k).__name__)))
        return self

    def __exit__(self, *exc):
        for cls, method, real in reversed(self._undo):
            setattr(cls, method, real)
        self._undo.clear()
        return False


# Functions that interpolate for the caller: a lab whose exercise is the interpolation itself
# (labs 01 and 02) gives no points to a function that reaches one of them, by any name.
INTERPOLATION_OPS = ("grid_sample", "interpolate", "upsample", "roi_align", "deform_conv",
                     "affine_grid")


class ForbiddenOps(TorchFunctionMode):
    """Records the torch functions whose names contain one of ``patterns`` that are called
    inside a ``with`` block: ``self.found``, sorted, each once.

    A torch function mode sees the function object, not the name the caller used:
    ``F.grid_sample`` reached through ``getattr(F, "grid" + "_sample")``, ``torch.grid_sampler``,
    ``torch.ops.aten.grid_sampler_2d`` and ``torch._C._VariableFunctions.grid_sampler_2d`` are
    all seen. It runs inside the student's process: a determined submission can switch it off,
    so the handouts say so.
    """

    def __init__(self, patterns=INTERPOLATION_OPS):
        super().__init__()
        self.patterns = tuple(patterns)
        self.found: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", None) or str(func)
        if any(p in name for p in self.patterns) and name not in self.found:
            self.found.append(name)
        return func(*args, **(kwargs or {}))

    def __exit__(self, *exc):
        self.found.sort()
        return super().__exit__(*exc)
