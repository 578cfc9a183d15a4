"""Import the submission from bytes that the zygote read, not from its file.

A separated child (:mod:`msda_labs.grading.sandbox`) may not be able to read the student's file
(a regrade's copy is closed to other users), so the zygote reads it, as root, before it forks.
The module still has the file's name as ``__file__``, tracebacks show its lines, and
``inspect.getsource`` (which ``triton.jit`` uses) returns its text: the loader serves the source
and :mod:`linecache` holds it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import linecache
import sys
from pathlib import Path

__all__ = ["import_submission"]


class _SourceLoader(importlib.abc.SourceLoader):
    """Loads the submission from bytes the zygote read: a separated child may not be able to
    read the file itself. ``inspect.getsource`` (which ``triton.jit`` uses) gets the same text."""

    def __init__(self, path: str, data: bytes):
        self.path, self.data = path, data

    def get_filename(self, fullname: str) -> str:
        return self.path

    def get_data(self, path: str) -> bytes:
        if path != self.path:
            raise OSError(f"{path} is not the submission")
        return self.data


def import_submission(path: str, data: bytes | None):
    if data is None:
        raise ImportError(f"cannot read {path}")
    name = Path(path).stem
    text = data.decode("utf-8", "replace")
    linecache.cache[path] = (len(data), None, text.splitlines(keepends=True), path)
    spec = importlib.util.spec_from_file_location(name, path, loader=_SourceLoader(path, data))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
