"""Single source for chips and starters: strip the solution fences out of a chip.

A chip marks each answer like this::

    # TODO(Task 1.1): read the four corners (about 10 lines)
    # BEGIN SOLUTION
    ...the answer...
    # STARTER
    # raise NotImplementedError("Task 1.1: bilinear_sample")
    # END SOLUTION

The starter keeps what is outside the fences, drops the answer, and un-comments the lines between
``# STARTER`` and ``# END SOLUTION`` (one ``# `` after the indentation). Fences must not nest and
must be closed; anything else is an error naming the line.
"""

from __future__ import annotations

import re

__all__ = ["FenceError", "strip"]

_FENCE = re.compile(r"^(\s*)#\s*(BEGIN SOLUTION|STARTER|END SOLUTION)\s*$")


class FenceError(ValueError):
    """A chip's solution fences are malformed."""


def strip(text: str, name: str = "<chip>") -> str:
    """Return the starter for chip source ``text``."""
    out: list[str] = []
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
        elif state == "outside":
            out.append(line)
        elif state == "starter":
            stripped = line.lstrip()
            indent = line[: len(line) - len(stripped)]
            if stripped.startswith("# "):
                out.append(indent + stripped[2:])
            elif stripped.rstrip("\n") == "#":
                out.append("\n")
            else:
                raise FenceError(f"{name}:{lineno}: a STARTER line must be a comment ('# ...')")
    if state != "outside":
        raise FenceError(f"{name}: the fence opened at line {opened_at} is never closed")
    return "".join(out)
