"""Rules checked on the submission's source, read (never run) by the judge.

Reading the source is honest where running it is not: the submission cannot change what the
judge parses. Each helper returns facts; tests decide what they cost.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SourceInfo", "forbidden_imports", "indirect_uses"]


@dataclass
class SourceInfo:
    path: Path
    text: str
    tree: ast.Module | None
    syntax_error: str = ""

    @classmethod
    def read(cls, path: Path) -> SourceInfo:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        try:
            return cls(Path(path), text, ast.parse(text, filename=str(path)))
        except SyntaxError as exc:
            return cls(Path(path), text, None, f"SyntaxError: {exc.msg} (line {exc.lineno})")

    def node(self, qualname: str) -> ast.AST | None:
        """The def/class node for ``name`` or ``Class.method``."""
        if self.tree is None:
            return None
        scope: list[ast.stmt] = self.tree.body
        found = None
        for part in qualname.split("."):
            found = None
            for stmt in scope:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                        and stmt.name == part:
                    found = stmt
            if found is None:
                return None
            scope = found.body
        return found

    def calls(self, qualname: str, callee: str) -> int:
        """How many call sites in ``qualname`` name ``callee`` (``f(...)`` or ``x.f(...)``)."""
        node = self.node(qualname)
        if node is None:
            return 0
        count = 0
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                func = sub.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name == callee:
                    count += 1
        return count

    def loops(self, qualname: str) -> list[ast.AST]:
        """for/while loops and comprehensions inside ``qualname``."""
        node = self.node(qualname)
        if node is None:
            return []
        kinds = (ast.For, ast.While, ast.AsyncFor, ast.ListComp, ast.GeneratorExp, ast.SetComp,
                 ast.DictComp)
        return [sub for sub in ast.walk(node) if isinstance(sub, kinds)]

    def stub_left(self, task_id: str) -> bool:
        """True when the starter's ``raise NotImplementedError("Task X.Y...`` is still there."""
        return re.search(r"raise\s+NotImplementedError\(\s*[\"']Task " + re.escape(task_id)
                         + r"\b", self.text) is not None


STUDENT_PACKAGE = "msda_labs.student"
"""The one part of the kit a student's module may import."""

RUN_BY_HAND = ("msda_labs.student.check", "msda_labs.student.spec", "msda_labs.student.selfcheck")
"""Student modules for running a lab by hand (``python labNN.py``): the self-check and the
student-facing spec. A lab module may import them only inside ``if __name__ == "__main__":``; a
graded function that hands its work to the spec must earn nothing."""


def _rebinds_name(tree: ast.Module) -> bool:
    """Whether the module may rebind its ``__name__``: an assignment to the name, or the string
    ``"__name__"`` anywhere but where it is only read (``x["__name__"]``, ``getattr(x,
    "__name__")``, ``hasattr``)."""
    read_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            read_only.add(id(node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2:
            read_only.add(id(node.args[1]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "__name__" \
                and not isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.Constant) and node.value == "__name__" \
                and id(node) not in read_only:
            return True
        if isinstance(node, ast.keyword) and node.arg == "__name__":
            return True
    return False


def _main_block_lines(tree: ast.Module) -> set[int]:
    """The lines of the module's top-level ``if __name__ == "__main__":`` blocks (body only);
    none at all when the module rebinds ``__name__`` or spells it as a string (a module that
    makes itself ``"__main__"`` while being graded gets no exemption)."""
    lines: set[int] = set()
    if _rebinds_name(tree):
        return lines
    for stmt in tree.body:
        test = stmt.test if isinstance(stmt, ast.If) else None
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and not stmt.orelse):
            continue
        left, right = test.left, test.comparators[0]
        if isinstance(test.ops[0], ast.Eq) and isinstance(left, ast.Name) \
                and left.id == "__name__" and isinstance(right, ast.Constant) \
                and right.value == "__main__":
            for sub in stmt.body:
                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def _run_by_hand(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in RUN_BY_HAND)


def forbidden_imports(info: SourceInfo, lab: int) -> list[str]:
    """What the submission reaches for that holds answers. A lab module may import
    ``msda_labs.student`` and its modules, and the chips of earlier labs; everything else of
    ``msda_labs`` (the ground truth, the mistakes, the grader, the tooling, the chip of this lab or
    a later one) is off limits, and so are the self-check and the student-facing spec
    (:data:`RUN_BY_HAND`) outside the module's ``if __name__ == "__main__":`` block. Returns
    human-readable findings (empty when clean)."""
    if info.tree is None:
        return []
    findings = []
    by_hand = _main_block_lines(info.tree)

    def check_module(name: str, line: int) -> None:
        if not re.fullmatch(r"msda_labs(\.\w+)+", name):
            return
        if _run_by_hand(name):
            if line not in by_hand:
                findings.append(f"line {line}: uses {name} outside `if __name__ == \"__main__\":`; "
                                f"the self-check and the student-facing spec are for running the "
                                f"lab by hand, and a graded function may not use them")
            return
        chip = re.fullmatch(r"msda_labs\.chips\.lab(\d+)(\.\w+)*", name)
        if chip:
            if int(chip.group(1)) >= lab:
                findings.append(
                    f"line {line}: uses {name}, the answer of lab {int(chip.group(1)):02d}")
        elif name == "msda_labs.chips":
            findings.append(f"line {line}: imports msda_labs.chips directly; load earlier labs "
                            f"with msda_labs.student.earlier.load")
        elif name != STUDENT_PACKAGE and not name.startswith(STUDENT_PACKAGE + "."):
            findings.append(f"line {line}: uses {name}, which is the grader's, not yours "
                            f"(a lab module may import {STUDENT_PACKAGE} only)")

    for node in ast.walk(info.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check_module(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module:
            check_module(node.module, node.lineno)
            if node.module in ("msda_labs", "msda_labs.chips", STUDENT_PACKAGE):
                for alias in node.names:
                    check_module(f"{node.module}.{alias.name}", node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and "msda_labs." in node.value:
            check_module(node.value.strip(), node.lineno)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "load" and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, int) and node.args[0].value >= lab:
                findings.append(f"line {node.lineno}: load({node.args[0].value}, ...) reaches for "
                                f"the answer of lab {node.args[0].value:02d}")
    return sorted(set(findings))


# What reaches a function without naming it in the source: looked up by a name computed at run
# time, through a module that hands out others, or through a double-underscore attribute. A lab of
# plain loops and arithmetic needs none of it, and a reading of the source cannot see past it.
INDIRECT_NAMES = frozenset({"getattr", "setattr", "delattr", "vars", "globals", "locals", "dir",
                            "eval", "exec", "compile", "__import__", "__builtins__", "open",
                            "breakpoint"})
INDIRECT_MODULES = frozenset({"importlib", "inspect", "operator", "sys", "builtins", "ctypes",
                              "gc", "types", "pickle", "marshal", "runpy", "pkgutil"})


def indirect_uses(info: SourceInfo, names=()) -> list[tuple[int, str]]:
    """``(line, what)`` of every use, outside the module's ``if __name__ == "__main__":`` block,
    of :data:`INDIRECT_NAMES`, an import of :data:`INDIRECT_MODULES`, a double-underscore
    attribute, or a name that contains one of ``names`` (e.g. library interpolation's)."""
    if info.tree is None:
        return []
    by_hand = _main_block_lines(info.tree)
    found = []
    for node in ast.walk(info.tree):
        line = getattr(node, "lineno", 0)
        if line in by_hand:
            continue
        if isinstance(node, ast.Name):
            name, imported = node.id, False
        elif isinstance(node, ast.Attribute):
            name, imported = node.attr, False
        elif isinstance(node, ast.alias):
            name, imported = node.name, True
        elif isinstance(node, ast.ImportFrom):
            name, imported = node.module or "", True
        else:
            continue
        if name in INDIRECT_NAMES or imported and name.split(".")[0] in INDIRECT_MODULES:
            found.append((line, name))
        elif isinstance(node, ast.Attribute) and name.startswith("__") and name.endswith("__"):
            found.append((line, f".{name}"))
        elif any(part in name for part in names):
            found.append((line, name))
    return sorted(found)
