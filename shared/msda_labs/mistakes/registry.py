"""A catalogue of known mistakes: each one a small named function with the sentence that explains
it to a student.

A mistake registers itself with a decorator::

    FORWARD = Catalogue("forward")

    @FORWARD.register("swap_xy", "x and y swapped: ...")
    def swap_xy(planted):
        return replace(planted, locations=planted.locations.flip(-1))

and the graders look it up by name (``FORWARD["swap_xy"]``) to build what a submission with that
mistake would return, so that a failure report can say "this is exactly the output of ...".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Catalogue", "Mistake"]


@dataclass(frozen=True)
class Mistake:
    """One known mistake.

    Attributes:
        name: its key, e.g. ``"swap_xy"``.
        why: what a student reads: ``"what went wrong: why it is wrong"`` (for a gradient mistake,
            one sentence per output it shows in: ``{output: sentence}``).
        plant: the function that builds the wrong result.
    """

    name: str
    why: Any
    plant: Callable


class Catalogue:
    """Known mistakes of one kind, in the order they were registered."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Mistake] = {}

    def register(self, name: str, why) -> Callable[[Callable], Callable]:
        """Decorator: file the decorated function as the mistake ``name``, explained by ``why``."""
        if name in self._entries:
            raise ValueError(f"the {self.kind} mistake {name!r} is registered twice")

        def file(plant: Callable) -> Callable:
            self._entries[name] = Mistake(name, why, plant)
            return plant

        return file

    def __getitem__(self, name: str) -> Mistake:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} mistake {name!r}; known: "
                             f"{sorted(self._entries)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[Mistake]:
        """Every mistake, in registration order."""
        return list(self._entries.values())

    def explanations(self) -> dict[str, Any]:
        """``{name: why}`` for every mistake, in registration order."""
        return {name: entry.why for name, entry in self._entries.items()}
