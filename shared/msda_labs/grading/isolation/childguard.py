"""The child-side contract, checked where the children come from: the zygote's memory.

Every child is a copy of its zygote, so whatever the zygote imported, a submission can read. The
zygote may hold the student-side modules, the child-side grading modules, the lab's probe modules
and the chips of *earlier* labs. It must never hold the ground truth (``msda_labs.truth``), the
mistake catalogue (``msda_labs.mistakes``), the chip of the lab being graded or of a later lab, or
a test, judge or truth module of a lab (``test_*``, ``judge_*``, ``truth_*``): those compute
expected values and the judge alone runs them.

:class:`ImportWitness` records who imported each forbidden module, so that the refusal can say
which line to move to the judge.
"""

from __future__ import annotations

import re
import sys

from msda_labs.student import RUN_BY_HAND

__all__ = ["ImportWitness", "forbidden_modules", "describe"]

_CHIP = re.compile(r"^msda_labs\.chips\.lab(\d\d)$")
# The run-by-hand modules (the student-facing spec and its self-check) are no ground truth, but a
# graded child has no use for them: a submission must not hand its work to the spec.
_JUDGE_ONLY_PACKAGES = ("msda_labs.truth", "msda_labs.mistakes", *RUN_BY_HAND)
_JUDGE_PREFIXES = ("test_", "judge_", "truth_")


def _is_forbidden(name: str, lab: int | None, module=None) -> bool:
    if any(name == p or name.startswith(p + ".") for p in _JUDGE_ONLY_PACKAGES):
        return True
    match = _CHIP.match(name)
    if match and lab is not None and int(match.group(1)) >= lab:
        return True
    if lab is None:
        return False
    last = name.rsplit(".", 1)[-1]
    if not last.startswith(_JUDGE_PREFIXES):
        return False
    # A lab's test modules are imported under their basename (as pytest does); a third-party
    # package's own test_* submodules are not a lab's.
    if "." not in name:
        return True
    file = str(getattr(module, "__file__", "") or "")
    return "/tests/" in file.replace("\\", "/")


def forbidden_modules(lab: int | None) -> list[str]:
    """The judge-only modules in ``sys.modules``, sorted."""
    return sorted(name for name, module in list(sys.modules.items())
                  if _is_forbidden(name, lab, module))


def _importer() -> str:
    """The first frame outside the import machinery and this module: file:line."""
    frame = sys._getframe(2)
    while frame is not None:
        file = frame.f_code.co_filename
        if not file.startswith("<frozen") and file != __file__ and "importlib" not in file:
            return f"{file}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class ImportWitness:
    """A ``sys.meta_path`` entry that finds nothing and notes who imported a forbidden module."""

    def __init__(self, lab: int | None):
        self.lab = lab
        self.seen: dict[str, str] = {}

    def find_spec(self, name, path=None, target=None):
        if name not in self.seen and (_is_forbidden(name, self.lab)
                                      or name.rsplit(".", 1)[-1].startswith(_JUDGE_PREFIXES)):
            self.seen[name] = _importer()
        return None

    def __enter__(self):
        sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc):
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def describe(names: list[str], witness: ImportWitness | None, lab: int | None) -> str:
    """The refusal: which judge-only modules the zygote holds and who imported each."""
    parts = []
    for name in names:
        who = witness.seen.get(name) if witness else None
        parts.append(f"{name} (imported by {who})" if who else name)
    shown = "; ".join(parts[:6]) + (f"; and {len(parts) - 6} more" if len(parts) > 6 else "")
    return (f"the grading worker refuses to serve: it holds judge-only module(s) {shown}. "
            f"Every child is a copy of the worker, so a submission could read them. The child side "
            f"(probe modules, msda_labs.student, the child-side grading modules"
            + (f", chips of labs before {lab:02d}" if lab is not None else "")
            + ") must not import msda_labs.truth, msda_labs.mistakes, the lab's own or a later "
              "chip, or a test_/judge_ module: compute expected values in the test (the judge)")
