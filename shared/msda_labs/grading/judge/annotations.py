"""GitHub annotations of a grading run: one workflow command per exercise that did not pass,
cause first.

    ::error file=lab05.py,line=62,title=Task 5.1 load_point (0/3 pts)::FAILED: ...
    ::error file=lab05.py,line=180,title=Task 5.4 msda_forward_kernel (0/2 pts)::FAILED: 6 te...
    ::notice file=lab05.py,line=60,title=Task 5.2 gather_corner (0/4 pts)::not attempted

The order is the order of reading (:mod:`.diagnosis`): first the exercises where a named mistake
starts, in task order (lab 05's helpers before the kernel that composes them), then the other
failures in task order, then the exercises whose every failure follows from a cause upstream,
whose message says so in one line. An annotation sits on the line of the student's file that an
error's traceback names (the evidence's ``line``); otherwise on the ``def`` line of the function
the failing test exercises (the evidence's ``function``: where the error was raised, or what the
test called), else of the function the exercise grades.

GitHub shows these in the check run and beside the code in a pull request's "Files changed"
(the Feedback pull request included). It keeps at most 10 error and 10 notice annotations of
one step (and 50 of a job), so the step prints at most that many, in that order, and says how
many more the job summary holds.

The function is found by reading source, never by importing it: the student's module and the
lab's tests are parsed with :mod:`ast`. An exercise whose name is a function of the module
points there; otherwise the functions of the module that its tests reach (``module.f``,
``submission.run("f")``, through helpers of the test file) are used, in order of appearance.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from msda_labs.grading.isolation.source import decode_submission
from msda_labs.grading.judge.diagnosis import (
    diagnose,
    student_words,
    task_key,
)
from msda_labs.grading.judge.render import own_message, test_lines
from msda_labs.grading.judge.results import GradeResult
from msda_labs.grading.judge.rules import scope_statements

__all__ = ["ANNOTATIONS_PER_STEP", "definitions", "reached_names", "graded_functions",
           "exercised_function", "annotation_lines",
           "escape_data", "escape_property"]

# Per step GitHub keeps 10 annotations of each kind (error, warning, notice); 50 per job.
ANNOTATIONS_PER_STEP = 10
_PARAMS = re.compile(r"\[.*\]$")


def escape_data(text: str) -> str:
    """The message part of a workflow command (as @actions/core escapes it)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value (file, title) of a workflow command."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _parse(path: Path) -> ast.Module | None:
    """The syntax tree of a module, read as the judge reads a submission (one decoding of its
    bytes: :func:`msda_labs.grading.isolation.source.decode_submission`)."""
    try:
        text = decode_submission(Path(path).read_bytes(), Path(path).name)
        return ast.parse(text, filename=str(path))
    except (OSError, SyntaxError, ValueError):  # SourceRefused is a ValueError
        return None


def definitions(module_path: Path) -> dict[str, int]:
    """``{name: line of its first def/class}`` of the functions and classes of a module's own
    scope, wherever they stand in it (in an ``if``, a ``try``...; empty when it cannot be read
    or parsed)."""
    tree = _parse(module_path)
    if tree is None:
        return {}
    found: dict[str, int] = {}
    for node in scope_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.setdefault(node.name, node.lineno)
    return found


def reached_names(tests: list[Path], test_names: set[str], wanted: dict[str, int]) -> list[str]:
    """Names of ``wanted`` that the given test functions reach, in order of first appearance."""
    functions: dict[str, ast.AST] = {}
    for path in tests:
        tree = _parse(path)
        if tree is not None:
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    functions.setdefault(node.name, node)
    found: list[str] = []
    seen: set[str] = set()
    queue = [functions[n] for n in sorted(test_names) if n in functions]
    while queue:
        node = queue.pop(0)
        if id(node) in seen:
            continue
        seen.add(id(node))
        for sub in ast.walk(node):
            name = None
            if isinstance(sub, ast.Attribute):
                name = sub.attr
                if name in functions:  # e.g. probes.kernel_probe: a sibling module's function
                    queue.append(functions[name])
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                name = sub.value
            elif isinstance(sub, ast.Name) and sub.id in functions and sub.id != node.name:
                queue.append(functions[sub.id])  # a helper of the test file
            if name in wanted and name not in found:
                found.append(name)
    return found


def _test_files(tests_dir: Path | None) -> list[Path]:
    # The test files and their sibling modules (probes_labNN.py, judge_labNN.py): the
    # functions a test reaches may live in either.
    return sorted(Path(tests_dir).glob("*.py")) if tests_dir else []


def graded_functions(result: GradeResult, module_path: Path,
                     tests_dir: Path | None = None) -> dict[str, tuple[str, int]]:
    """``{exercise id: (function name, def line)}`` for every exercise of ``result``; line 1
    (and the module's name) when no function can be found."""
    wanted = definitions(module_path)
    tests = _test_files(tests_dir)
    out = {}
    for ex in result.exercises:
        named = [n.strip() for n in ex.name.split(",") if n.strip() in wanted]
        if not named:
            bases = {_PARAMS.sub("", t.name) for t in ex.tests}
            named = reached_names(tests, bases, wanted)
        out[ex.id] = (named[0], wanted[named[0]]) if named else (Path(module_path).stem, 1)
    return out


def exercised_function(ex, test, module_path: Path, tests_dir: Path | None,
                       default: tuple[str, int]) -> tuple[str, int]:
    """The function one failing test exercises and its ``def`` line: the one its evidence
    names (an error's function, or what the test called), else one of the exercise's named
    functions that this test reaches, else the first function of the module this test
    reaches, else ``default``."""
    wanted = definitions(module_path)
    fn = test.evidence.function if test is not None else ""
    if fn in wanted:
        return fn, wanted[fn]
    if test is None:
        return default
    reached = reached_names(_test_files(tests_dir), {_PARAMS.sub("", test.name)}, wanted)
    named = [n.strip() for n in ex.name.split(",") if n.strip() in wanted]
    for name in reached:
        if not named or name in named:
            return name, wanted[name]
    return default


def _telling(ex, diagnosis):
    """The failing test that explains an exercise best: one where a named mistake starts, then a
    failure with a message (often a named mistake) before an error, a crash or a timeout
    (:attr:`Status.telling`), before a bare failure."""
    failing = [t for t in ex.tests if t.status not in ("passed", "not_attempted")]

    def key(t):
        finding = diagnosis.of(ex, t)
        return (not (finding and finding.causes), t.status.telling, not t.message)

    return min(failing, key=key, default=None)


_ORDER = {"cause": 0, "own": 1, "follows": 2}


def annotation_lines(result: GradeResult, module_path: Path, tests_dir: Path | None = None,
                     file_label: str | None = None,
                     per_kind: int = ANNOTATIONS_PER_STEP) -> list[str]:
    """The workflow commands of ``result``: ``::error`` for each exercise that lost points
    (cause first, see the module's docstring), ``::notice`` for each one not attempted, at most
    ``per_kind`` of each, then one plain line naming what was left out."""
    where = graded_functions(result, module_path, tests_dir)
    label = file_label or Path(module_path).name
    diagnosis = diagnose(result)
    errors, notices = [], []
    for ex in result.exercises:
        if ex.status == "passed":
            continue
        function, line = where[ex.id]
        title = f"Task {ex.id} {ex.name} ({ex.score}/{ex.max_score} pts)"
        if function not in ex.name.split(", "):
            title += f" in {function}"
        if ex.status == "not_attempted":
            props = (f"file={escape_property(label)},line={line},"
                     f"title={escape_property(title)}")
            message = f"not attempted: {function} still raises NotImplementedError (the stub)"
            notices.append(f"::notice {props}::" + escape_data(message))
            continue
        kind = diagnosis.kind(ex)
        test = _telling(ex, diagnosis)
        finding = diagnosis.of(ex, test)
        function, line = exercised_function(ex, test, module_path, tests_dir, (function, line))
        title = f"Task {ex.id} {ex.name} ({ex.score}/{ex.max_score} pts)"
        if function not in ex.name.split(", "):
            title += f" in {function}"
        if kind == "follows":
            feedback = "; ".join(test_lines(ex, diagnosis))
        else:
            feedback = f"{test.status.terminal}: {test.name}: " + (
                own_message(finding) if finding is not None else
                student_words(test.message or str(test.status)))
            if test.evidence.line and test.evidence.function == function:
                line = test.evidence.line  # the line that raised, in the function it names
        props = (f"file={escape_property(label)},line={line},"
                 f"title={escape_property(title)}")
        errors.append(((_ORDER.get(kind, 1), task_key(ex.id)),
                       f"::error {props}::" + escape_data(feedback)))
    errors.sort(key=lambda item: item[0])
    lines = [text for _, text in errors[:per_kind]] + notices[:per_kind]
    left = max(0, len(errors) - per_kind) + max(0, len(notices) - per_kind)
    if left:
        lines.append(f"{left} more exercise(s) did not pass; GitHub keeps {per_kind} annotations "
                     f"of a kind per step: the job summary lists them all")
    return lines
