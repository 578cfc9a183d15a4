"""Rules checked on the submission's source, read (never run) by the judge.

Reading the source is honest where running it is not: the submission cannot change what the
judge parses. Each helper returns facts; tests decide what they cost.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from msda_labs import student
from msda_labs.grading.isolation.source import SourceRefused, decode_submission

__all__ = ["NotAPlainDef", "SourceInfo", "forbidden_imports", "indirect_uses", "scope_statements",
           "tamper_uses", "watch_untouched"]


class NotAPlainDef(AssertionError):
    """A rule's target is not bound as a plain ``def`` the judge can read: the rule fails closed
    (an AssertionError, so the rule's points are lost) with this message."""


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def scope_statements(body: list[ast.stmt]):
    """Every statement of one scope (a module's or a class's body): through every block
    (``if``/``else``, ``for``, ``while``, ``try``/``except``/``finally``, ``with``, ``match``),
    not into the bodies of the functions and classes it defines (scopes of their own)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, _DEFS):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from scope_statements(getattr(stmt, field, None) or [])
        for handler in getattr(stmt, "handlers", None) or []:
            yield handler
            yield from scope_statements(handler.body)
        for case in getattr(stmt, "cases", None) or []:
            yield case
            yield from scope_statements(case.body)


def _own_parts(stmt: ast.AST):
    """The nodes of a statement itself: its expressions, targets and patterns, not the
    statements of its blocks (met on their own by :func:`scope_statements`)."""
    if isinstance(stmt, _DEFS):
        parts = list(stmt.decorator_list)
        if not isinstance(stmt, ast.ClassDef):
            parts += [stmt.args, stmt.returns] if stmt.returns else [stmt.args]
        else:
            parts += stmt.bases + stmt.keywords
    else:
        parts = [value for field, value in ast.iter_fields(stmt)
                 if field not in ("body", "orelse", "finalbody", "handlers", "cases")]
    for part in parts:
        for item in part if isinstance(part, list) else [part]:
            if isinstance(item, ast.AST):
                yield from ast.walk(item)


def _binds(node: ast.AST, name: str) -> str | None:
    """How ``node`` binds ``name`` other than by a def or class statement, or None."""
    if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
        return "an assignment" if isinstance(node.ctx, ast.Store) else "a del"
    if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[0]) == name:
        return "an import"
    if isinstance(node, ast.ExceptHandler) and node.name == name:
        return "an except clause"
    if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name == name:
        return "a match pattern"
    if isinstance(node, ast.MatchMapping) and node.rest == name:
        return "a match pattern"
    if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
        return "a global statement in a function"
    return None


def _bindings(body: list[ast.stmt], name: str, skip: set[int]) -> tuple[list[ast.AST], list]:
    """(the def and class statements that bind ``name`` in the scope of ``body``, wherever they
    stand in it; ``(line, how)`` of its other bindings there). Lines in ``skip`` are not
    read (the module's ``if __name__ == "__main__":`` block, which grading never runs)."""
    defs, others = [], []
    for stmt in scope_statements(body):
        if getattr(stmt, "lineno", 0) in skip:
            continue
        if isinstance(stmt, _DEFS) and stmt.name == name:
            defs.append(stmt)
        for node in ([stmt] if isinstance(stmt, (ast.ExceptHandler, ast.match_case)) else [])\
                + list(_own_parts(stmt)):
            how = _binds(node, name)
            if how:
                others.append((getattr(node, "lineno", getattr(stmt, "lineno", 0)), how))
    return defs, others


@dataclass
class SourceInfo:
    """What the judge reads of a submission: its text (the one reading of its bytes,
    :func:`msda_labs.grading.isolation.source.decode_submission`, which the child compiles too) and
    its syntax tree. ``unreadable`` says why there is no text (not UTF-8), ``syntax_error`` why
    there is no tree."""

    path: Path
    text: str
    tree: ast.Module | None
    syntax_error: str = ""
    unreadable: str = ""

    @classmethod
    def read(cls, path: Path) -> SourceInfo:
        """The source of the file ``path`` (a kit file, or a submission outside a grading job)."""
        path = Path(path)
        return cls.from_bytes(path, path.read_bytes())

    @classmethod
    def from_bytes(cls, path: Path, data: bytes) -> SourceInfo:
        """The source of a module whose bytes were read already (a grading job's submission):
        decoded once, as the compiler would, then parsed; a refused encoding is kept as
        ``unreadable``."""
        path = Path(path)
        try:
            text = decode_submission(data, path.name)
        except SourceRefused as exc:
            return cls(path, "", None, unreadable=str(exc))
        return cls.parse(path, text)

    @classmethod
    def parse(cls, path: Path, text: str) -> SourceInfo:
        """The syntax tree of ``text``, the module's decoded source."""
        try:
            return cls(Path(path), text, ast.parse(text, filename=str(path)))
        except SyntaxError as exc:
            return cls(Path(path), text, None, f"SyntaxError: {exc.msg} (line {exc.lineno})")
        except ValueError as exc:  # a null byte (a SyntaxError from Python 3.12 on)
            return cls(Path(path), text, None, f"SyntaxError: {exc}")

    @property
    def readable(self) -> bool:
        return not self.unreadable

    def definitions(self, qualname: str, follow: bool = True, graded_apart=()) -> list[ast.AST]:
        """Every ``def`` (or class) statement bound to ``qualname`` (``name`` or
        ``Class.method``), wherever it stands in its scope: in any block (``if``/``else``,
        ``try``, ``with``, ``for``, ``match``...), once or several times (each binding is
        returned: a rule must hold in every one). With ``follow``, also every function and
        class of the module that those statements name (a helper they call or hand on), and so
        on: a rule on ``qualname`` holds for the code it reaches; but not into the functions
        named in ``graded_apart``, which the lab grades on their own (a bug costs points once).

        Fails closed, raising :class:`NotAPlainDef` (an AssertionError: the rule's points are
        lost, with a message that says what to write): when ``qualname`` is bound other than by
        a plain def (an assignment, an import, a lambda, a decorator that may replace it, a
        ``global`` statement in a function, an attribute written on it) or not at all, since the
        judge cannot read what such a name will run."""
        if self.tree is None:
            raise NotAPlainDef(f"rule: the grader cannot read {self.path.name} "
                               f"({self.unreadable or self.syntax_error})")
        skip = _main_block_lines(self.tree)
        parts = qualname.split(".")
        scopes: list[list[ast.stmt]] = [self.tree.body]
        found: list[ast.AST] = []
        for depth, part in enumerate(parts):
            found, others = [], []
            for body in scopes:
                defs, more = _bindings(body, part, skip)
                found += defs
                others += more
            if depth == 0:  # the module's names: also from a function's global statement
                others += [(node.lineno, how) for node in ast.walk(self.tree)
                           if isinstance(node, (ast.Global, ast.Nonlocal))
                           and (how := _binds(node, part))]
            others += [(node.lineno, f"an attribute written on {ast.unparse(node)}")
                       for node in ast.walk(self.tree) if isinstance(node, ast.Attribute)
                       and node.attr == part and not isinstance(node.ctx, ast.Load)]
            what = ".".join(parts[: depth + 1])
            plain = (f"write {qualname} as a plain `def` (in a class for a method), "
                     f"without decorators, for the grader to check it")
            if others:
                line, how = sorted(others)[0]
                raise NotAPlainDef(f"rule: {qualname} is checked on its source, and line {line} "
                                   f"binds {what} by {how}, which the grader cannot read: "
                                   f"{plain}")
            if not found:
                raise NotAPlainDef(f"rule: {qualname} is checked on its source, and your module "
                                   f"has no def of {what}: {plain}")
            for node in found:
                if node.decorator_list:
                    raise NotAPlainDef(
                        f"rule: {qualname} is checked on its source, and line {node.lineno} "
                        f"decorates {what}; a decorator may replace the function the grader "
                        f"reads: {plain}")
            if depth < len(parts) - 1:
                if any(not isinstance(node, ast.ClassDef) for node in found):
                    raise NotAPlainDef(f"rule: {qualname} is checked on its source, and {what} "
                                       f"is not a class: {plain}")
                scopes = [node.body for node in found]
        return self._reached(found, skip, set(graded_apart) - {qualname}) if follow else found

    def _reached(self, roots: list[ast.AST], skip: set[int], apart: set[str]) -> list[ast.AST]:
        """``roots`` and every def or class of the module's scope that they name, and so on
        (never into the names of ``apart``)."""
        top: dict[str, list[ast.AST]] = {}
        for stmt in scope_statements(self.tree.body):
            if isinstance(stmt, _DEFS) and getattr(stmt, "lineno", 0) not in skip \
                    and stmt.name not in apart:
                top.setdefault(stmt.name, []).append(stmt)
        seen: dict[int, ast.AST] = {id(node): node for node in roots}
        queue = list(roots)
        while queue:
            for sub in ast.walk(queue.pop()):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                    for node in top.get(sub.id, ()):
                        if id(node) not in seen:
                            seen[id(node)] = node
                            queue.append(node)
        return list(seen.values())

    def node(self, qualname: str) -> ast.AST | None:
        """The first def/class statement bound to ``qualname`` (see :meth:`definitions`, which
        a rule should use: every binding, failing closed), or None."""
        try:
            return self.definitions(qualname, follow=False)[0]
        except NotAPlainDef:
            return None

    def calls(self, qualname: str, callee: str, graded_apart=()) -> int:
        """How many call sites in ``qualname`` (every binding, and the module's functions it
        reaches: :meth:`definitions`, which fails closed) name ``callee`` (``f(...)`` or
        ``x.f(...)``)."""
        count = 0
        for node in self.definitions(qualname, graded_apart=graded_apart):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call):
                    func = sub.func
                    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                    if name == callee:
                        count += 1
        return count

    def loops(self, qualname: str, graded_apart=()) -> list[ast.AST]:
        """for/while loops and comprehensions inside ``qualname`` (every binding, and the
        module's functions it reaches: :meth:`definitions`, which fails closed), in line
        order."""
        kinds = (ast.For, ast.While, ast.AsyncFor, ast.ListComp, ast.GeneratorExp, ast.SetComp,
                 ast.DictComp)
        found = {id(sub): sub for node in self.definitions(qualname, graded_apart=graded_apart)
                 for sub in ast.walk(node) if isinstance(sub, kinds)}
        return sorted(found.values(), key=lambda sub: (sub.lineno, sub.col_offset))

    def stub_left(self, task_id: str) -> bool:
        """True when the starter's ``raise NotImplementedError("Task X.Y...`` is still there."""
        return re.search(r"raise\s+NotImplementedError\(\s*[\"']Task " + re.escape(task_id)
                         + r"\b", self.text) is not None


STUDENT_PACKAGE = "msda_labs.student"
"""The one part of the kit a student's module may import."""

RUN_BY_HAND = student.RUN_BY_HAND


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


# -- What could reach a watch in the student's process ------------------------------------------
# A rule that is watched in the child (a spy, a trace, a recording wrapper) is believed only for a
# module whose source cannot reach the watch. What reaches it: tracing hooks, threads and other
# processes (a watch sees its own thread), the interpreter's internals (frames, the module table,
# the garbage collector, C calls), a function named at run time, a private part of a library, a
# library's switches for its own dispatch (torch.overrides and the compilers that bypass it), and
# an attribute written on anything but the module's own objects. A lab module of tensors and
# kernels needs none of it; :func:`tamper_uses` names each use, for a clear message.
TAMPER_MODULES = INDIRECT_MODULES | frozenset({
    "threading", "_thread", "concurrent", "multiprocessing", "subprocess", "asyncio", "signal",
    "faulthandler", "tracemalloc", "atexit", "sysconfig", "site", "code", "codeop", "dis",
    "traceback", "copyreg", "unittest", "pytest", "_pytest", "pty"})
"""Modules whose import reaches past a watch: besides :data:`INDIRECT_MODULES`, threads and
processes (a watch sees its own thread), signals, tracing and the interpreter's own tools."""

TAMPER_ATTRIBUTES = frozenset({
    "settrace", "setprofile", "gettrace", "getprofile", "_getframe", "f_back", "f_globals",
    "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next", "gi_frame", "cr_frame",
    "ag_frame", "gi_code", "co_code", "sys", "modules", "fork", "forkpty", "system", "popen",
    "spawnv", "spawnve", "spawnl", "posix_spawn", "execv", "execve", "execl", "kill", "_exit",
    "builtins", "overrides", "threading", "multiprocessing", "subprocess", "importlib",
    "inspect", "ctypes", "gc", "update_wrapper", "wraps", "mock", "monkeypatch"})
"""Attribute names that reach a tracing hook, a frame, the module table, another process or a
library's dispatch switches, or write on whatever they are given (``functools.update_wrapper``
and ``wraps`` copy one object's attributes onto another, a library module included; ``mock``
patches by name), whatever object they are read from."""

TAMPER_DOTTED = ("torch.overrides", "torch.jit", "torch.compile", "torch.fx", "torch.library",
                 "torch.ops", "torch.multiprocessing", "torch.utils.hooks", "torch.autograd.graph",
                 "torch.autograd.forward_ad", "torch.testing", "triton.runtime",
                 "triton.compiler", "triton.backends", "triton.knobs", "msda_labs.grading",
                 "torch.utils.data", "torch.futures", "torch.distributed")
"""Parts of the libraries that bypass or rewire what a watch sees (a compiled or scripted
function runs without torch's Python dispatch; the runtime and compiler hold the launch path a
launch watch wraps): reached by import or by attribute."""


HARMLESS_DUNDERS = frozenset({".__name__", ".__qualname__", ".__doc__"})
"""Dunder attributes that only name a thing (``type(x).__name__`` in an error message); a write
to one is still flagged, as every attribute write is."""

DISPATCH_HOOKS = frozenset({"__torch_function__", "__torch_dispatch__"})
"""Methods by which a class of the module's own takes over torch's dispatch."""


def _import_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it was imported as (``import torch.nn.functional as F``:
    ``F`` -> ``torch.nn.functional``; ``import torch.nn``: ``torch`` -> ``torch``)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.AST, imported: dict[str, str]) -> str | None:
    """The dotted name of an attribute chain rooted at an imported name (``F.grid_sample`` ->
    ``torch.nn.functional.grid_sample``), else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in imported:
        return ".".join([imported[node.id], *reversed(parts)])
    return None


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node


def _own_receivers(tree: ast.Module) -> dict[int, str]:
    """id(function node) -> the name of its first parameter, for functions defined directly in
    a class body of the module (``self``, ``cls``, an autograd Function's ``ctx``): the objects
    whose attributes a lab module writes."""
    receivers = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    params = stmt.args.posonlyargs + stmt.args.args
                    if params:
                        receivers[id(stmt)] = params[0].arg
    return receivers


PRIVATE_ALLOWED = frozenset({"torch._assert_async", "torch._assert"})
"""Private parts of torch that check a condition and reach nothing else (lab 10 validates with
``torch._assert_async``)."""


def _own_methods(tree: ast.Module) -> dict[str, set[str]]:
    """Class name -> the names of the functions defined in its body, for the module's classes."""
    methods: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            methods.setdefault(node.name, set()).update(
                stmt.name for stmt in node.body
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return methods


def _private(dotted: str) -> bool:
    if dotted in PRIVATE_ALLOWED:
        return False
    return any(part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
               for part in dotted.split(".")[1:])


def tamper_uses(info: SourceInfo, allow=()) -> list[tuple[int, str]]:
    """``(line, what)`` of everything, outside the module's ``if __name__ == "__main__":`` block,
    by which the module's code could switch off or forge a watch in its own process:

    * what :func:`indirect_uses` names (``getattr``, ``eval``, ``exec``, ``__import__``,
      ``importlib``, ``sys``, ``inspect``, ``gc``, ``ctypes``, dunder attributes other than
      ``super().__init__``...);
    * an import of :data:`TAMPER_MODULES` (threads, processes, tracing, signals) or of a part
      of :data:`TAMPER_DOTTED`, or a private module (``torch._C``);
    * an attribute of :data:`TAMPER_ATTRIBUTES` (``settrace``, frames, ``modules``, ``fork``);
    * an attribute chain from an imported name that reaches a private part (``torch._C``) or a
      part of :data:`TAMPER_DOTTED`;
    * an attribute written or deleted (``x.attr = ...``, ``del x.attr``, augmented) on anything
      but the first parameter of a method of one of the module's own classes (``self``,
      ``cls``, ``ctx``): a write on a library, on the module's imports or on an object reached
      from them can replace what a watch wraps.

    ``allow`` names parts of :data:`TAMPER_DOTTED` a lab's own work may read (lab 09 compiles
    kernels: ``triton.compiler``); writes and private parts stay flagged there too.
    """
    if info.tree is None:
        return []
    tree = info.tree
    by_hand = _main_block_lines(tree)
    imported = _import_names(tree)
    found = []
    for line, what in indirect_uses(info):
        found.append((line, what))
    # super().__init__() is how an nn.Module starts; it reaches nothing of the watch's.
    inits = {id(node) for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr == "__init__"
             and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
             and node.value.func.id == "super"}
    init_lines = {node.lineno for node in ast.walk(tree) if id(node) in inits}
    found = [(line, what) for line, what in found
             if what not in HARMLESS_DUNDERS
             and not (what == ".__init__" and line in init_lines
                      and not _other_dunder_on_line(tree, line, inits))]

    def flag(node, what):
        line = getattr(node, "lineno", 0)
        if line not in by_hand:
            found.append((line, what))

    def dotted_tamper(name: str) -> bool:
        if _private(name):
            return True
        if any(name == a or name.startswith(a + ".") for a in allow):
            return False
        return any(name == d or name.startswith(d + ".") for d in TAMPER_DOTTED)

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.name in DISPATCH_HOOKS:
            flag(node, f"def {node.name}")
        elif isinstance(node, ast.Name) and node.id in DISPATCH_HOOKS \
                and not isinstance(node.ctx, ast.Load):
            flag(node, f"{node.id} =")
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in TAMPER_MODULES \
                        or top.startswith("_") or dotted_tamper(alias.name):
                    flag(node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            top = module.split(".")[0]
            if node.level or top in TAMPER_MODULES \
                    or (top.startswith("_") and module != "__future__") or dotted_tamper(module):
                flag(node, f"from {'.' * node.level}{module} import ...")
            for alias in node.names:
                full = f"{module}.{alias.name}"
                if alias.name.startswith("_") or dotted_tamper(full) \
                        or alias.name in TAMPER_ATTRIBUTES:
                    flag(node, f"from {module} import {alias.name}")
        elif isinstance(node, ast.Attribute):
            if node.attr in TAMPER_ATTRIBUTES:
                flag(node, f".{node.attr}")
                continue
            dotted = _dotted(node, imported)
            if dotted and dotted_tamper(dotted):
                flag(node, dotted)
        elif isinstance(node, ast.Name) and node.id in imported \
                and dotted_tamper(imported[node.id]):
            flag(node, imported[node.id])

    receivers = _own_receivers(tree)
    # A method's receiver may be written; so a method must get only its own objects: one
    # reached through its class (``Class.method(torch, ...)``) could be handed a library, and a
    # receiver rebound inside the method is no longer the method's own.
    methods = _own_methods(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.attr in methods.get(node.value.id, ()):
            flag(node, f"{node.value.id}.{node.attr} (a method reached through its class)")
    for node in ast.walk(tree):
        if id(node) in receivers:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id == receivers[id(node)] \
                        and not isinstance(sub.ctx, ast.Load):
                    flag(sub, f"{sub.id} rebound")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            owner = _enclosing_method(tree, node, receivers)
            root = _root(node)
            if owner is not None and isinstance(root, ast.Name) and root.id == owner:
                continue
            flag(node, f"a write to {ast.unparse(node)}")
    return sorted(set(found))


def _other_dunder_on_line(tree: ast.Module, line: int, allowed: set[int]) -> bool:
    return any(isinstance(node, ast.Attribute) and node.lineno == line
               and node.attr.startswith("__") and node.attr.endswith("__")
               and id(node) not in allowed for node in ast.walk(tree))


def _enclosing_method(tree: ast.Module, target: ast.AST, receivers: dict[int, str]) -> str | None:
    """The receiver's name of the innermost function that holds ``target``, when that function
    is a method of one of the module's classes (a function nested in a method has none)."""
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                and node.lineno <= target.lineno <= (node.end_lineno or node.lineno) \
                and any(sub is target for sub in ast.walk(node)):
            if best is None or node.lineno >= best.lineno:
                best = node
    return receivers.get(id(best)) if best is not None else None


def watch_untouched(info: SourceInfo, rule: str, names=(), allow=()) -> None:
    """Raise AssertionError, naming the first use, when the module's source could reach a watch
    in its own process (:func:`tamper_uses`, and names containing one of ``names``): ``rule``,
    watched there, then earns nothing, since its record could have been switched off or forged.
    ``allow``: as in :func:`tamper_uses`."""
    uses = tamper_uses(info, allow)
    if names and info.tree is not None:
        uses = sorted(set(uses) | {(line, what) for line, what in indirect_uses(info, names)
                                   if any(part in what for part in names)})
    if not uses:
        return
    line, what = uses[0]
    more = f" (and {len(uses) - 1} more)" if len(uses) > 1 else ""
    raise AssertionError(
        f"rule: {rule} is watched while your code runs, and is believed only of a module that "
        f"cannot reach the watch; line {line} of your module uses {what}{more}, which can: the "
        f"grader reads your source and allows, outside `if __name__ == \"__main__\":`, no "
        f"tracing hooks, threads or processes, frames, sys/gc/inspect/ctypes/importlib, "
        f"getattr/setattr/eval/exec/open, dunder attributes (but super().__init__ and "
        f".__name__), private parts of a library (torch._C), torch.overrides, torch.jit, "
        f"torch.compile, torch.ops, triton.runtime, and no attribute written on anything but "
        f"self (or cls, or an autograd Function's ctx) in a method of your own class")
