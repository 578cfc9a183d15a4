"""Import the submission from the text the judge read, not from its file.

A separated child (:mod:`msda_labs.grading.isolation.sandbox`) may not be able to read the student's
file (a regrade's copy is closed to other users), so the judge hands the child the text it read the
rules from (:func:`msda_labs.grading.isolation.source.decode_submission`: the one reading of the
file's bytes), and the child compiles that very text: what runs is what the rules read. The module
still has the file's name as ``__file__``, tracebacks show its lines, and ``inspect.getsource``
(which ``triton.jit`` uses) returns its text: the loader serves the text and :mod:`linecache` holds
it, split into lines as the compiler numbers them.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import linecache
import sys
from pathlib import Path

from msda_labs.grading.isolation.source import source_lines

__all__ = ["import_submission"]


class _TextLoader(importlib.abc.InspectLoader):
    """Loads the submission from its decoded text: the code object is compiled from the text (a
    ``str``, so no ``coding:`` line in it can make the compiler read other bytes), and
    ``get_source`` serves the same text to ``inspect`` and ``triton.jit``."""

    def __init__(self, path: str, text: str):
        self.path, self.text = path, text

    def get_filename(self, fullname: str) -> str:
        return self.path

    def get_source(self, fullname: str) -> str:
        return self.text

    def is_package(self, fullname: str) -> bool:
        return False

    def get_code(self, fullname: str):
        return compile(self.text, self.path, "exec", dont_inherit=True)


def import_submission(path: str, text: str | None, problem: str = ""):
    """Import the submission at ``path`` from ``text``, its one reading; ``None`` with
    ``problem``, why it could not be read."""
    if text is None:
        raise ImportError(problem or f"cannot read {path}")
    name = Path(path).stem
    linecache.cache[path] = (len(text), None, source_lines(text), path)
    spec = importlib.util.spec_from_file_location(name, path, loader=_TextLoader(path, text))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
