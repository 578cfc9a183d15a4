"""The mutant library: the kit's chips with planted mistakes, read from ``tests/mutants``.

Each ``labNN.yaml`` lists mutants of that lab's chip: text replacements (``replace``, pairs of
old and new text, each old text occurring exactly once in the chip), why the result is wrong
(``why``), the phrase the feedback must contain (``expect``), the tasks it loses points in
(``tasks``) and the ladder rules it breaks (``rules``). ``whole.yaml`` lists whole-submission
mutants (:mod:`msda_labs.mistakes.submissions`): a block appended to any lab's chip.

The self-test (``tests/kit.py``) and the synthetic class of the insight page
(:mod:`msda_labs.classroom.sample_class`) both read the library through this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from msda_labs.errors import KitError

__all__ = ["MutantError", "Mutant", "load", "whole_entries"]


class MutantError(KitError, ValueError):
    """A mutant does not apply to the source it is planted in, or the library is missing."""


@dataclass(frozen=True)
class Mutant:
    """One planted mistake: replacements in a lab's chip, or a whole-submission block."""

    lab: str
    id: str
    why: str = ""
    replace: tuple = ()
    expect: str = ""
    tasks: tuple = ()
    rules: tuple = ()
    append: str | None = None  # a key of mistakes.submissions.SUBMISSIONS

    def apply(self, source: str) -> str:
        """``source`` with this mistake planted (:class:`MutantError` when it does not fit)."""
        for old, new in self.replace:
            count = source.count(old)
            if count != 1:
                raise MutantError(f"mutant {self.lab}/{self.id}: {old[:60]!r} occurs {count} "
                                  f"times in the source (it must occur exactly once)")
            source = source.replace(old, new)
        if self.append is not None:
            from msda_labs.mistakes.submissions import planted

            source = planted(source, self.append)
        return source


def _read(path: Path) -> list[dict]:
    entries = yaml.safe_load(path.read_text()) if path.is_file() else []
    if not isinstance(entries, list):
        raise MutantError(f"{path}: expected a list of mutants, got {type(entries).__name__}")
    return entries


def whole_entries(folder: Path) -> list[dict]:
    """The raw entries of ``folder/whole.yaml`` (each with ``labs``: where CPU grading catches
    it)."""
    return _read(Path(folder) / "whole.yaml")


def load(lab_id: str, folder: Path, *, whole: bool = True) -> list[Mutant]:
    """The mutants of ``lab_id`` in ``folder``: its replacements, then (``whole``) the
    whole-submission mutants whose ``labs`` name it, as ``whole_<id>``."""
    found = []
    for entry in _read(Path(folder) / f"{lab_id}.yaml"):
        found.append(Mutant(
            lab=lab_id, id=str(entry["id"]), why=" ".join(str(entry.get("why", "")).split()),
            replace=tuple(tuple(pair) for pair in entry.get("replace") or ()),
            expect=entry.get("expect") or "", tasks=tuple(str(t) for t in entry.get("tasks") or ()),
            rules=tuple(entry.get("rules") or ())))
    if whole:
        for entry in whole_entries(folder):
            if lab_id in entry.get("labs", ()):
                found.append(Mutant(lab=lab_id, id=f"whole_{entry['id']}", append=entry["id"],
                                    why=" ".join(str(entry.get("why", "")).split()),
                                    expect=entry.get("expect") or "",
                                    tasks=tuple(str(t) for t in entry.get("tasks") or ())))
    return found
