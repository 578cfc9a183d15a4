"""Judge side of lab 03: the grader's own ``sectors_touched`` and ``efficiency``, sent to the child
as source while a later function is graded (``efficiency`` builds on ``sectors_touched``,
``tiling_speedup`` on both), so a bug costs points once. No file the child imports holds them;
the source travels with the one request that needs it (``msda_labs.grading.spies.swap_in``).
"""

import inspect

from msda_labs.truth import memory

__all__ = ["parts"]

_HEADER = ("import numpy as np\n"
           "from msda_labs.student.memsim import SECTOR_BYTES, AccessPattern\n")
_SOURCES = {name: inspect.getsource(getattr(memory, name))
            for name in ("sectors_touched", "efficiency")}


def parts(names) -> tuple:
    """``(names, source)``: the grader's functions ``names`` (and ``sectors_touched``, which
    ``efficiency`` calls) as one source text."""
    names = tuple(names)
    needed = set(names) | ({"sectors_touched"} if "efficiency" in names else set())
    return names, _HEADER + "\n\n".join(_SOURCES[n] for n in _SOURCES if n in needed)
