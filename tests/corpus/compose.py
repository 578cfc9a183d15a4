"""A corpus attempt as the file a student hands in.

An attempt (``tests/corpus/labNN/<name>.py``) holds what one student wrote for the tasks it
attempts: its own functions, classes and imports, written from the handout. The file it hands in
is the lab's reference solution (the chip) with each top-level definition of the attempt put in
place of the chip's definition of the same name (decorators included), new definitions added at
the end, and the attempt's imports added after the chip's. So the tasks an attempt does not write
are right by construction, and the corpus can ask of every verdict that it blames none of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _span(node: ast.stmt) -> tuple[int, int]:
    """The 0-based [first, last) lines of a top-level statement, its decorators included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return first - 1, node.end_lineno


def _definitions(tree: ast.Module) -> dict[str, ast.stmt]:
    return {node.name: node for node in tree.body if isinstance(node, DEFINITIONS)}


def compose(chip: str, attempt: str) -> str:
    """The submission: ``chip`` with the attempt's definitions in place of its own."""
    chip_lines, attempt_lines = chip.splitlines(), attempt.splitlines()
    chip_tree, attempt_tree = ast.parse(chip), ast.parse(attempt)
    chip_defs = _definitions(chip_tree)
    replaced: dict[int, list[str]] = {}  # first line in the chip -> the attempt's text
    dropped: set[int] = set()
    added: list[str] = []
    imports: list[str] = []
    for node in attempt_tree.body:
        first, last = _span(node)
        text = attempt_lines[first:last]
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports += text
        elif isinstance(node, DEFINITIONS) and node.name in chip_defs:
            old_first, old_last = _span(chip_defs[node.name])
            replaced[old_first] = text
            dropped.update(range(old_first, old_last))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the attempt's docstring
        else:
            added += ["", ""] + text
    last_import = max((_span(n)[1] for n in chip_tree.body
                       if isinstance(n, (ast.Import, ast.ImportFrom))), default=0)
    out: list[str] = []
    for i, line in enumerate(chip_lines):
        if i in replaced:
            out += replaced[i]
        if i not in dropped:
            out.append(line)
        if i + 1 == last_import and imports:
            out += imports
    main = next((i for i, line in enumerate(out) if line.startswith("if __name__ ==")), len(out))
    out[main:main] = added + ["", ""] if added else []
    return "\n".join(out) + "\n"


def submission_text(chip_path: Path, attempt_path: Path) -> str:
    return compose(chip_path.read_text(), attempt_path.read_text())
