"""The kit's one error base, and the errors that cross layers.

Every part of the library raises a :class:`KitError` (or a subclass) for a problem that the
person running a command can fix: a lab that does not exist, a missing file, a GPU stage that
cannot run. The command line (:mod:`msda_labs.cli`) prints its message after ``error:`` and
exits with status 2; library callers catch it like any exception. Nothing here imports anything
else of the kit, so every layer may import it.
"""

from __future__ import annotations

__all__ = ["KitError", "GpuStageError"]


class KitError(Exception):
    """A usage or infrastructure problem: the command exits with status 2 and this message."""


class GpuStageError(KitError):
    """The GPU stage was started but could not finish (Modal refused, the image failed...)."""
