"""The mutant library: the kit's chips with planted mistakes, read from ``tests/mutants``.

Each ``labNN.yaml`` lists mutants of that lab's chip: text replacements (``replace``, pairs of
old and new text, each old text occurring exactly once in the chip), why the result is wrong
(``why``), the phrase the feedback must contain (``expect``), the tasks it loses points in
(``tasks``) and the ladder rules it breaks (``rules``). ``whole.yaml`` lists whole-submission
mutants (:mod:`msda_labs.mistakes.submissions`): a block appended to any lab's chip;
``every_lab.yaml`` lists text appended to every lab's chip (with the task each lab grades it on);
``degenerate.yaml`` the graded functions whose degenerate answers
(:mod:`msda_labs.mistakes.degenerate`) must score 0.

The self-test (``tests/kit.py``) and the synthetic class of the insight page
(:mod:`msda_labs.classroom.sample_class`) both read the library through this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from msda_labs.errors import KitError

__all__ = ["MutantError", "Mutant", "Degenerate", "degenerate", "load", "whole_entries"]


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
    append_text: str = ""  # text added after the chip's last line (every_lab.yaml)

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
        if self.append_text:
            source = source.rstrip("\n") + "\n" + self.append_text
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
    for entry in _read(Path(folder) / "every_lab.yaml"):
        tasks = (entry.get("tasks") or {}).get(lab_id)
        if tasks is None:
            raise MutantError(f"every_lab.yaml: {entry['id']} names no task for {lab_id}")
        found.append(Mutant(lab=lab_id, id=str(entry["id"]), append_text=str(entry["append"]),
                            why=" ".join(str(entry.get("why", "")).split()),
                            expect=entry.get("expect") or "", tasks=tuple(str(t) for t in tasks)))
    if whole:
        for entry in whole_entries(folder):
            if lab_id in entry.get("labs", ()):
                found.append(Mutant(lab=lab_id, id=f"whole_{entry['id']}", append=entry["id"],
                                    why=" ".join(str(entry.get("why", "")).split()),
                                    expect=entry.get("expect") or "",
                                    tasks=tuple(str(t) for t in entry.get("tasks") or ())))
    return found


@dataclass(frozen=True)
class Degenerate:
    """One degenerate answer: ``function`` of ``lab``'s chip answers ``answer`` whatever its
    input (:mod:`msda_labs.mistakes.degenerate`); it must score 0 on each of ``tasks`` (on the
    tests of ``tests`` only, where other functions share those tasks)."""

    lab: str
    function: str
    answer: str
    tasks: tuple
    expr: str | None = None
    alias: str | None = None
    tests: tuple = ()  # where other functions share the tasks: the tests that call this one
    byhand: bool = True  # python labNN.py's example must call it wrong (its values are wrong)

    @property
    def id(self) -> str:
        return f"{self.function}:{self.answer}"

    def apply(self, source: str) -> str:
        """``source`` (the lab's chip) with this answer planted in ``function``."""
        import re

        from msda_labs.mistakes.degenerate import planted

        owner = self.function.split(".")[0]
        if not re.search(rf"^(def|class) {owner}\b", source, flags=re.M) or \
                (self.alias and not re.search(rf"^def {self.alias}\b", source, flags=re.M)):
            raise MutantError(f"degenerate {self.lab}/{self.id}: the source defines no "
                              f"{owner} (or {self.alias}) at its top level")
        generic = self.answer if self.expr is None and self.alias is None else "named"
        return planted(source, self.function, generic, self.expr, self.alias, lab=self.lab)


def degenerate(lab_id: str, folder: Path) -> list[Degenerate]:
    """The degenerate answers of ``lab_id``, from ``folder/degenerate.yaml``: for each function
    listed there, the answers of its kind (``degenerate.GENERIC``), then its named ones."""
    from msda_labs.mistakes.degenerate import GENERIC

    path = Path(folder) / "degenerate.yaml"
    table = yaml.safe_load(path.read_text()) if path.is_file() else {}
    found = []
    for entry in (table or {}).get(lab_id) or ():
        kind = entry.get("returns", "other")
        if kind not in GENERIC:
            raise MutantError(f"{path}: {lab_id}/{entry['function']}: unknown kind {kind!r}")
        tasks = tuple(str(t) for t in entry["tasks"])
        tests = tuple(entry.get("tests") or ())
        for answer in GENERIC[kind]:
            found.append(Degenerate(lab_id, entry["function"], answer, tasks, tests=tests))
        for name, how in (entry.get("answers") or {}).items():
            found.append(Degenerate(lab_id, entry["function"], str(name), tasks,
                                    expr=how.get("expr"), alias=how.get("alias"), tests=tests,
                                    byhand=how.get("byhand", True) is not False))
    return found
