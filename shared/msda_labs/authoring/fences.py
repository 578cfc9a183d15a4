"""Single source for chips and starters: the one parser of the solution fences in a chip.

A chip marks each answer like this::

    # TODO(Task 1.1): read the four corners (about 10 lines)
    # BEGIN SOLUTION
    ...the answer...
    # STARTER
    # raise NotImplementedError("Task 1.1: bilinear_sample")
    # END SOLUTION

:func:`strip` makes the starter: it keeps what is outside the fences, drops the answer, and
un-comments the lines between ``# STARTER`` and ``# END SOLUTION`` (one ``# `` after the
indentation). :func:`solution_blocks` lists the answers, for the exporter's leak check. Both read
the chip through :func:`fenced_lines`: fences must not nest and must be closed; anything else is a
:class:`FenceError` naming the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["FenceError", "fenced_lines", "solution_blocks", "strip"]

_FENCE = re.compile(r"^(\s*)#\s*(BEGIN SOLUTION|STARTER|END SOLUTION)\s*$")


class FenceError(ValueError):
    """A chip's solution fences are malformed."""


def fenced_lines(text: str, name: str = "<chip>") -> Iterator[tuple[str, int, str]]:
    """Walk a chip: ``(part, line number, line)`` per line, the fence markers included.

    ``part`` is ``"outside"``, ``"solution"`` (an answer line), ``"starter"`` (a line between
    ``# STARTER`` and ``# END SOLUTION``) or the marker itself (``"BEGIN SOLUTION"``,
    ``"STARTER"``, ``"END SOLUTION"``). Lines keep their line endings.

    Raises:
        FenceError: a fence nests, is never closed, or a marker stands where it cannot.
    """
    state = "outside"  # outside -> solution -> starter -> outside
    opened_at = 0
    for lineno, line in enumerate(text.splitlines(keepends=True), start=1):
        match = _FENCE.match(line)
        marker = match.group(2) if match else None
        if marker == "BEGIN SOLUTION":
            if state != "outside":
                raise FenceError(f"{name}:{lineno}: BEGIN SOLUTION inside the fence opened at "
                                 f"line {opened_at}")
            state, opened_at = "solution", lineno
        elif marker == "STARTER":
            if state != "solution":
                raise FenceError(f"{name}:{lineno}: STARTER outside a BEGIN SOLUTION fence")
            state = "starter"
        elif marker == "END SOLUTION":
            if state == "outside":
                raise FenceError(f"{name}:{lineno}: END SOLUTION without BEGIN SOLUTION")
            state = "outside"
        yield (marker or state), lineno, line
    if state != "outside":
        raise FenceError(f"{name}: the fence opened at line {opened_at} is never closed")


def strip(text: str, name: str = "<chip>") -> str:
    """Return the starter for chip source ``text``."""
    out: list[str] = []
    for part, lineno, line in fenced_lines(text, name):
        if part == "outside":
            out.append(line)
        elif part == "starter":
            stripped = line.lstrip()
            indent = line[: len(line) - len(stripped)]
            if stripped.startswith("# "):
                out.append(indent + stripped[2:])
            elif stripped.rstrip("\n") == "#":
                out.append("\n")
            else:
                raise FenceError(f"{name}:{lineno}: a STARTER line must be a comment ('# ...')")
    return "".join(out)


def solution_blocks(text: str, min_lines: int = 3, name: str = "<chip>") -> list[str]:
    """The answers fenced in a chip, each normalised: its non-blank lines, stripped.

    Only the answer part counts (not the starter lines), and an answer shorter than ``min_lines``
    non-blank lines is left out: a line or two of code is too common to call a leak.
    """
    blocks: list[str] = []
    current: list[str] = []
    for part, _lineno, line in fenced_lines(text, name):
        if part == "BEGIN SOLUTION":
            current = []
        elif part == "solution" and line.strip():
            current.append(line.strip())
        elif part in ("STARTER", "END SOLUTION") and current:
            if len(current) >= min_lines:
                blocks.append("\n".join(current))
            current = []
    return blocks
