"""Where in the student's file an exception came from, through Triton's interpreter.

The interpreter runs a ``@triton.jit`` function as rewritten Python, compiled under the file's
name and line numbers, and wraps whatever it raises in ``InterpreterError(repr(exc))`` once per
jit call on the way out (a helper called by a kernel: twice). The message then reads
``InterpreterError('NameError("name \\'yy\\' is not defined")')`` and the traceback of the outer
exception holds no line of the student's file: both live on the wrapped exception, its
``__cause__``. :func:`innermost` unwraps it and :func:`student_line` finds the line, for the
grader's one-line verdict and for ``python labNN.py``.
"""

from __future__ import annotations

import traceback

__all__ = ["innermost", "student_line", "student_frame", "describe"]

_WRAPPERS = ("InterpreterError",)


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def innermost(exc: BaseException) -> BaseException:
    """The exception the interpreter's wrappers hold (``exc`` itself when it is none of them)."""
    while type(exc).__name__ in _WRAPPERS and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def student_line(exc: BaseException, filename: str) -> int | None:
    """The line of ``filename`` closest to where ``exc`` (or an exception it wraps) was raised:
    the deepest frame in that file of the innermost exception of the chain that has one."""
    line = None
    for link in _chain(exc):
        frames = [f for f in traceback.extract_tb(link.__traceback__) if f.filename == filename]
        if frames:
            line = frames[-1].lineno
    return line


def student_frame(exc: BaseException, filename: str) -> tuple[int, str] | None:
    """``(line, function)`` of the frame :func:`student_line` finds, or None."""
    found = None
    for link in _chain(exc):
        frames = [f for f in traceback.extract_tb(link.__traceback__) if f.filename == filename]
        if frames:
            found = (frames[-1].lineno, frames[-1].name)
    return found


def describe(exc: BaseException) -> str:
    """``Type: first line of the message`` of the innermost exception; a longer message is cut
    to its first line and marked ``[...]``."""
    inner = innermost(exc)
    text = [line for line in str(inner).strip().splitlines() if line.strip()]
    first = text[0].strip() if text else ""
    if len(text) > 1:
        first += " [...]"
    return f"{type(inner).__name__}: {first}" if first else type(inner).__name__
