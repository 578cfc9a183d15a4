"""Which task builds on which: the order in which a report reads a lab's tasks.

Task B *depends on* task A when a function that B grades calls a function that A grades,
directly or through helpers that no task grades. The calls are read from the lab's reference
solution (its chip, ``msda_labs/chips/labNN.py``) with :mod:`ast`, never by importing it, so
the order is declared once, by the code the handout describes, and never by hand. A lab whose
chip cannot be read has no dependencies: its tasks are read in task order.
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["task_functions", "calls", "task_dependencies", "lab_dependencies", "chip_path"]


def chip_path(lab: str) -> Path:
    """The reference solution of ``lab`` (``"lab04"``), whether or not it exists."""
    import msda_labs.chips

    return Path(msda_labs.chips.__file__).resolve().parent / f"{lab}.py"


def task_functions(tasks: dict[str, str]) -> dict[str, list[str]]:
    """``{task id: [function names]}`` from a lab's TASKS (``"fn_a, fn_b"`` names two)."""
    return {task: [n.strip() for n in str(names).split(",") if n.strip()]
            for task, names in tasks.items()}


def calls(source: str) -> dict[str, set[str]]:
    """``{top-level function: names of the module's top-level functions it mentions}``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    defs = {node.name: node for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    out: dict[str, set[str]] = {}
    for name, node in defs.items():
        found = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in defs and sub.id != name:
                found.add(sub.id)
            elif isinstance(sub, ast.Attribute) and sub.attr in defs and sub.attr != name:
                found.add(sub.attr)  # e.g. a kernel launched as module.kernel[grid](...)
        out[name] = found
    return out


def task_dependencies(tasks: dict[str, list[str] | str], source: str) -> dict[str, list[str]]:
    """``{task: [tasks it depends on]}`` (only tasks that depend on some other task), the
    earlier tasks first, read from ``source`` (see the module's docstring).

    ``tasks``: each task's functions (a list, or TASKS' ``"fn_a, fn_b"``). A task is the owner
    of a function it names first (in task order); a later task that names another task's
    function (one whose tests exercise that function) depends on its owner.
    """
    graph = calls(source)
    functions = {task: (fns if isinstance(fns, list) else task_functions({task: fns})[task])
                 for task, fns in tasks.items()}
    owner: dict[str, str] = {}
    for task, fns in functions.items():
        for fn in fns:
            owner.setdefault(fn, task)
    order = list(tasks)
    out: dict[str, list[str]] = {}
    for task, fns in functions.items():
        seen: set[str] = set()
        needs: set[str] = set()
        queue = list(fns)
        while queue:
            fn = queue.pop()
            if fn in seen:
                continue
            seen.add(fn)
            other = owner.get(fn)
            if other is not None and other != task:
                needs.add(other)  # a graded function: its own task, not followed further
                continue
            queue.extend(graph.get(fn, ()))
        if needs:
            out[task] = sorted(needs, key=order.index)
    return out


def lab_dependencies(lab: str, tasks: dict[str, list[str] | str]) -> dict[str, list[str]]:
    """:func:`task_dependencies` read from ``lab``'s chip; empty when there is none."""
    try:
        source = chip_path(lab).read_text()
    except OSError:
        return {}
    return task_dependencies(tasks, source)
