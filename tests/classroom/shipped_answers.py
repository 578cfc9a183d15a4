"""Every function and class that a lab's template ships, tried as the answer to that lab's tasks.

A template repository carries far more Python than the student's ``labNN.py``: the grading
tests, the ground truth a local grade needs, the chips of earlier labs, the run-by-hand spec and
self-check, the grader itself. None of it may answer one of the lab's own tasks under the lab's
rules. This module plays the student who looks for such code and copies it:

1. :func:`definitions`: every ``def`` and ``class`` in every Python file of the export except
   ``labNN.py``, found by walking each file's whole syntax tree (nested in functions, blocks and
   conditionals too; methods are left out: their body reads ``self``);
2. :func:`candidates`: for each task function (the self-check's steps name them, with their
   task), the definitions a caller could call the same way: a Triton kernel for a kernel with as
   many parameters, a class for a class, a function for a function whose positional parameters
   admit the task's;
3. :func:`submission`: the chip with the task function replaced by the candidate's source, renamed
   to the task's name, and every definition, constant and import it needs pasted beside it,
   followed through the kit's own imports (what a copier would paste, never an import of the
   kit: the import rule refuses those anyway);
4. :func:`prescreen`: each pasted module runs the lab's own small self-check example in a forked
   process under a time limit; a candidate that crashes or answers with another shape cannot earn
   a task's points and is not graded;
5. :func:`grade_task`: what is left is graded in a copy of the export, as a student would,
   with ``--task``; the task must earn 0.

``python tests/classroom/shipped_answers.py [labNN ...]`` prints the table of what earned points.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("MSDA_SHIPPED_CACHE",
                            Path(tempfile.gettempdir()) / "msda-shipped-answers"))
PRESCREEN_SECONDS = 20  # a candidate's self-check example, in its own process
KERNEL_LABS = {4, 5, 6, 8}  # run in Triton's interpreter
JOBS = max(1, int(os.environ.get("MSDA_SHIPPED_JOBS", "1")))  # prescreens and grades at a time


@dataclass(frozen=True)
class Signature:
    """What a caller may pass positionally: ``required`` to ``total`` arguments (``total`` None:
    any number); ``kind``: function, class or kernel."""

    kind: str
    required: int
    total: int | None

    def admits(self, task: Signature) -> bool:
        if self.kind != task.kind:
            return False
        if self.kind == "kernel":
            return self.total == task.total
        top = self.total if self.total is not None else 10**6
        task_top = task.total if task.total is not None else 10**6
        return self.required <= task_top and task.required <= top


@dataclass(frozen=True)
class Definition:
    """One shipped ``def`` or ``class``: the file (relative to the export), where it starts, its
    name and signature, and whether it sits at its module's top level."""

    path: str
    line: int
    name: str
    signature: Signature
    top_level: bool

    @property
    def label(self) -> str:
        return f"{self.path}:{self.name}"


def _is_kernel(node: ast.AST) -> bool:
    return any("jit" in ast.unparse(d) or "autotune" in ast.unparse(d)
               for d in getattr(node, "decorator_list", []))


def _arguments_signature(args: ast.arguments, kind: str, skip_first: bool = False) -> Signature:
    positional = [*args.posonlyargs, *args.args][1 if skip_first else 0:]
    required = len(positional) - len(args.defaults)
    total = None if args.vararg is not None else len(positional)
    return Signature(kind, max(required, 0), total)


def signature_of(node: ast.AST) -> Signature:
    """The positional call signature of a function, a Triton kernel or a class (its
    ``__init__``; a dataclass's fields; else none)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _arguments_signature(node.args, "kernel" if _is_kernel(node) else "function")
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef)
                 and n.name == "__init__"), None)
    if init is not None:
        return _arguments_signature(init.args, "class", skip_first=True)
    if any("dataclass" in ast.unparse(d) for d in node.decorator_list):
        fields = [n for n in node.body if isinstance(n, ast.AnnAssign)]
        defaults = sum(1 for n in fields if n.value is not None)
        return Signature("class", len(fields) - defaults, len(fields))
    return Signature("class", 0, None if node.bases else 0)


def _walk_definitions(tree: ast.Module):
    """(node, top_level) for every def and class not directly in a class body."""
    def visit(node, in_class, depth):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not in_class:
                    yield child, depth == 0
                yield from visit(child, isinstance(child, ast.ClassDef), depth + 1)
            else:
                yield from visit(child, in_class, depth + (0 if isinstance(
                    child, (ast.If, ast.Try, ast.With, ast.For, ast.While)) else 0))
    yield from visit(tree, False, 0)


def definitions(root: Path, lab_id: str) -> list[Definition]:
    """Every def and class of every Python file in the export ``root`` but ``labNN.py``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == f"{lab_id}.py" or "/.nox/" in f"/{rel}" or "/.venv/" in f"/{rel}":
            continue
        try:
            tree = ast.parse(path.read_text())
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node, top in _walk_definitions(tree):
            found.append(Definition(rel, node.lineno, node.name, signature_of(node), top))
    return found


def task_functions(lab: int, chip: Path) -> list[tuple[str, str, Signature]]:
    """(task, function name, signature) of each graded function, from the self-check's steps
    and the chip's definitions."""
    from msda_labs.student.selfcheck import steps

    tree = ast.parse(chip.read_text())
    defined = {n.name: n for n in tree.body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return [(step.task, step.name, signature_of(defined[step.name]))
            for step in steps(lab) if step.name in defined]


def candidates(found: list[Definition], task_signature: Signature) -> list[Definition]:
    return [d for d in found if d.signature.admits(task_signature)
            and not d.name.startswith("test_")]


# ---------------------------------------------------------------------------------- pasting

class _Module:
    """One shipped module's top-level names: name -> the statement that binds it."""

    def __init__(self, path: Path):
        self.path = path
        self.tree = ast.parse(path.read_text())
        self.binds: dict[str, ast.stmt] = {}
        for stmt in self.tree.body:
            for name in _bound_names(stmt):
                self.binds.setdefault(name, stmt)


def _bound_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names]
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(stmt, (ast.If, ast.Try)):
        return [name for s in ast.walk(stmt) if s is not stmt and isinstance(s, ast.stmt)
                for name in _bound_names(s)]
    return []


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _find_node(module: _Module, line: int, name: str) -> ast.AST:
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.lineno == line and node.name == name:
            return node
    raise LookupError(f"{module.path}:{line} {name}")


class Paster:
    """Pastes a shipped definition with what it needs, as a copier would."""

    def __init__(self, root: Path):
        self.root = root
        self.package = root / "shared"
        self.modules: dict[Path, _Module] = {}

    def module(self, path: Path) -> _Module:
        if path not in self.modules:
            self.modules[path] = _Module(path)
        return self.modules[path]

    def _kit_file(self, module: _Module, stmt: ast.ImportFrom) -> Path | None:
        """The shipped file a ``from X import ...`` of the kit names (None: not the kit's)."""
        if stmt.level:
            base = module.path.parent
            for _ in range(stmt.level - 1):
                base = base.parent
            parts = (stmt.module or "").split(".") if stmt.module else []
            target = base.joinpath(*parts)
        elif (stmt.module or "").split(".")[0] == "msda_labs":
            target = self.package.joinpath(*stmt.module.split("."))
        elif stmt.module and (module.path.parent / f"{stmt.module}.py").is_file():
            target = module.path.parent / stmt.module  # a lab's tests import their siblings
        else:
            return None
        for candidate in (target.with_suffix(".py"), target / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def paste(self, definition: Definition, as_name: str) -> str:
        """The definition renamed ``as_name``, after everything it needs."""
        path = self.root / definition.path
        module = self.module(path)
        node = _find_node(module, definition.line, definition.name)
        done: dict[tuple[Path, int], str] = {}
        order: list[tuple[Path, int]] = []
        imports: dict[str, None] = {}
        self._needs(module, _names_used(node) - {definition.name}, done, order, imports, set())
        renamed = ast.parse(textwrap.dedent(ast.get_source_segment(
            module.path.read_text(), node, padded=False) or ast.unparse(node))).body[0]
        if node.decorator_list and not renamed.decorator_list:
            renamed.decorator_list = node.decorator_list
        renamed.name = as_name
        body = [done[key] for key in order]
        text = "\n\n".join([*imports, *body, _unparse_with_decorators(renamed, node)])
        if definition.name != as_name:
            text += f"\n\n{definition.name} = {as_name}"
        return text

    def _needs(self, module, names, done, order, imports, seen):
        for name in sorted(names):
            if (module.path, name) in seen:
                continue
            seen.add((module.path, name))
            stmt = module.binds.get(name)
            if stmt is None:
                continue
            if isinstance(stmt, ast.ImportFrom):
                alias = next(a for a in stmt.names if (a.asname or a.name) == name)
                source = self._kit_file(module, stmt)
                if source is not None:
                    other = self.module(source)
                    self._needs(other, {alias.name}, done, order, imports, seen)
                    if alias.asname and alias.asname != alias.name:
                        key = (module.path, -hash(name))
                        if key not in done:
                            done[key] = f"{alias.asname} = {alias.name}"
                            order.append(key)
                    continue
                if stmt.module == "__future__":
                    continue
                imports[ast.unparse(ast.ImportFrom(stmt.module, [alias], stmt.level))] = None
                continue
            if isinstance(stmt, ast.Import):
                alias = next(a for a in stmt.names if (a.asname or a.name).split(".")[0] == name)
                imports[ast.unparse(ast.Import([alias]))] = None
                continue
            key = (module.path, stmt.lineno)
            if key in done:
                continue
            deps = _names_used(stmt) - set(_bound_names(stmt))
            done[key] = ""  # a placeholder against cycles
            self._needs(module, deps, done, order, imports, seen)
            done[key] = _statement_source(module, stmt)
            order.append(key)


def _unparse_with_decorators(renamed: ast.AST, original: ast.AST) -> str:
    return ast.unparse(renamed)


def _statement_source(module: _Module, stmt: ast.stmt) -> str:
    """A top-level statement's text as written, decorators included."""
    first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", []))])
    lines = module.path.read_text().splitlines()
    return "\n".join(lines[first - 1:stmt.end_lineno])


def with_stubs(chip_text: str, starter_text: str, names: set[str]) -> str:
    """The chip with its top-level definitions ``names`` replaced by the starter's (stubs): the
    other functions of a task graded as one (e.g. Task 3.1's ``sectors_touched`` and
    ``efficiency``) must not earn that task's points for a candidate."""
    starter = {n.name: n for n in ast.parse(starter_text).body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for name in sorted(names):
        if name in starter:
            node = starter[name]
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            stub = "\n".join(starter_text.splitlines()[first - 1:node.end_lineno])
            chip_text = submission(chip_text, name, stub)
    return chip_text


def submission(chip_text: str, task_name: str, pasted: str) -> str:
    """The chip with ``task_name``'s top-level definition removed and ``pasted`` put in before
    its ``if __name__ == "__main__":`` block (or at its end)."""
    tree = ast.parse(chip_text)
    lines = chip_text.splitlines()
    keep = [True] * len(lines)
    main_at = len(lines)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.name == task_name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            for i in range(first - 1, node.end_lineno):
                keep[i] = False
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            main_at = node.lineno - 1
    head = [line for i, line in enumerate(lines[:main_at]) if keep[i]]
    if not any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body):
        # the pasted code's annotations stay unevaluated, as in the modules it comes from
        docstring_end = tree.body[0].end_lineno if tree.body and isinstance(
            tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant) else 0
        head.insert(docstring_end, "from __future__ import annotations")
    tail = [line for i, line in enumerate(lines[main_at:], main_at) if keep[i]]
    return "\n".join([*head, "", "", pasted, "", "", *tail]) + "\n"


# ------------------------------------------------------------------------------- prescreen

def _prescreen_one(lab: int, task_name: str, source: str, workdir: Path) -> str:
    """In this (forked) process: import ``source`` as the lab module and run the task's
    self-check example; returns the report's status (ok, wrong, crash, missing, todo)."""
    import importlib.util

    from msda_labs.student.check import check
    from msda_labs.student.selfcheck import steps

    path = workdir / f"lab{lab:02d}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"lab{lab:02d}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    namespace = vars(module)
    statuses = []
    for step in steps(lab):
        if step.name == task_name:
            fn = namespace.get(step.name)
            if fn is None:
                statuses.append("missing")
                continue
            case = step.make(namespace)
            if _number(case.spec()) and not _number(case.call(fn)):
                statuses.append("wrong form")  # the tests take numbers only (as_int, as_float)
                continue
            report = check(fn, case, name=step.name, show=False)
            form = ("shape (", "expected a tensor", "results (", "should be a bool")
            if report.status == "wrong" and any(f in line for line in report.lines
                                                for f in form):
                statuses.append("wrong form")  # another shape or type: no test can pass
            else:
                statuses.append(report.status)
    return statuses[0] if statuses else "missing"


def _number(value) -> bool:
    """A real number (a bool is not one), as lab 03's and lab 09's probes read a result."""
    import numpy as np

    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))


def _start(lab: int, task_name: str, source: str):
    """Fork one prescreen; returns (pid, the pipe's read end, its scratch folder)."""
    tmp = tempfile.TemporaryDirectory(prefix="msda-shipped-")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.setsid()
        code = 0
        try:
            os.chdir(tmp.name)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            signal.alarm(PRESCREEN_SECONDS)
            status = _prescreen_one(lab, task_name, source, Path(tmp.name))
        except BaseException as exc:  # noqa: BLE001 - a candidate that fails to import
            status = f"crash: {type(exc).__name__}: {str(exc)[:80]}"
        try:
            with os.fdopen(write_end, "wb") as pipe:
                pickle.dump(status, pipe)
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    os.close(write_end)
    return pid, read_end, tmp


def _finish(pid: int, read_end: int, tmp) -> str:
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    try:
        result = pickle.loads(data)
    except Exception:  # noqa: BLE001
        result = ("timeout" if os.WIFSIGNALED(status)
                  and os.WTERMSIG(status) == signal.SIGALRM else "died")
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    tmp.cleanup()
    return result


def prescreen(lab: int, jobs: list[tuple[str, str]]) -> list[str]:
    """The self-check status of each (task function name, module source), each in a forked
    process of its own with a time limit (``timeout`` when it ran out, ``died`` when it died);
    ``$MSDA_SHIPPED_JOBS`` of them at a time (1 by default)."""
    results = []
    for first in range(0, len(jobs), JOBS):
        started = [_start(lab, name, source) for name, source in jobs[first:first + JOBS]]
        results += [_finish(*each) for each in started]
    return results


def _prescreen_main() -> None:
    """``python shipped_answers.py --prescreen LAB`` reads [(name, source)] as JSON on stdin."""
    lab = int(sys.argv[2])
    if lab in KERNEL_LABS:
        os.environ["TRITON_INTERPRET"] = "1"
    jobs = json.loads(sys.stdin.read())
    import torch  # noqa: F401 - imported once, before the forks
    if lab in KERNEL_LABS:
        import triton  # noqa: F401
    print(json.dumps(prescreen(lab, [tuple(j) for j in jobs])))


def run_prescreen(lab: int, jobs: list[tuple[str, str]], env: dict) -> list[str]:
    proc = subprocess.run([sys.executable, __file__, "--prescreen", str(lab)],
                          input=json.dumps(jobs), capture_output=True, text=True, env=env,
                          timeout=60 + PRESCREEN_SECONDS * 2 * max(len(jobs), 1))
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------- grading

def grade_task(root: Path, lab_id: str, task: str, source: str, env: dict) -> tuple[int, int]:
    """(points, out of) for ``task`` of ``source`` graded as ``labNN.py`` in a copy of the
    export ``root``, at its root, as a student would."""
    with tempfile.TemporaryDirectory(prefix="msda-shipped-grade-") as tmp:
        copy = Path(tmp) / root.name
        shutil.copytree(root, copy)
        (copy / f"{lab_id}.py").write_text(source)
        out = Path(tmp) / "grade.json"
        proc = subprocess.run([sys.executable, "-m", "msda_labs", "grade", ".", "--task", task,
                               "--json", str(out)], cwd=copy, capture_output=True, text=True,
                              timeout=900, env={**env, "PYTHONPATH": str(copy / "shared")})
        if proc.returncode != 0 or not out.is_file():
            raise RuntimeError(f"grading {lab_id} --task {task} failed:\n{proc.stdout[-2000:]}"
                               f"\n{proc.stderr[-2000:]}")
        data = json.loads(out.read_text())
        tasks = [e for e in data["exercises"] if e["id"] == task] if "exercises" in data else []
        if tasks:
            return sum(e["score"] for e in tasks), sum(e["max_score"] for e in tasks)
        return data["score"], data["max_score"]


# ------------------------------------------------------------------------------------ audit

@dataclass
class Finding:
    lab: str
    task: str
    function: str
    candidate: str
    prescreen: str
    points: int | None = None
    max_points: int | None = None


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def export_digest(root: Path, lab_id: str) -> str:
    """The export's content, but the student's module: a cache key for its grades."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel != f"{lab_id}.py" and "__pycache__" not in rel \
                and not rel.startswith(".msda/"):
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def audit(root: Path, lab_id: str, lab: int, chip: Path, env: dict,
          log=lambda line: None, under: str = "") -> list[Finding]:
    """Every fitting shipped definition (in files under ``under``, a folder of the export, if
    given) as the answer to each task of lab ``lab``; a finding per candidate that passed the
    prescreen, with its points for the task."""
    found = [d for d in definitions(root, lab_id) if d.path.startswith(under)]
    paster = Paster(root)
    starter_text = (root / f"{lab_id}.py").read_text()
    tasks = task_functions(lab, chip)
    digest = export_digest(root, lab_id)
    CACHE.mkdir(parents=True, exist_ok=True)
    findings, jobs = [], []
    for task, name, sig in tasks:
        others = {n for t, n, _ in tasks if t == task and n != name}
        chip_text = with_stubs(chip.read_text(), starter_text, others)
        for definition in candidates(found, sig):
            try:
                pasted = paster.paste(definition, name)
            except (LookupError, SyntaxError, StopIteration) as exc:
                log(f"  cannot paste {definition.label}: {exc!r}")
                continue
            source = submission(chip_text, name, pasted)
            jobs.append((Finding(lab_id, task, name, definition.label, ""), source))
    statuses = run_prescreen(lab, [(f.function, s) for f, s in jobs], env) if jobs else []
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    log(f"{lab_id}: {len(found)} definitions shipped, {len(jobs)} fit a task's signature; "
        f"self-check: {counts}")
    def graded(finding: Finding, source: str) -> Finding:
        key = CACHE / f"{_digest(digest, finding.task, source)}.json"
        if key.is_file():
            finding.points, finding.max_points = json.loads(key.read_text())
        else:
            finding.points, finding.max_points = grade_task(root, lab_id, finding.task, source,
                                                            env)
            key.write_text(json.dumps([finding.points, finding.max_points]))
        log(f"  {finding.task} {finding.function} <- {finding.candidate}: "
            f"{finding.prescreen}, {finding.points}/{finding.max_points}")
        return finding

    survivors = []
    for (finding, source), status in zip(jobs, statuses):
        finding.prescreen = status
        if status in ("ok", "wrong"):
            survivors.append((finding, source))
    with ThreadPoolExecutor(JOBS) as pool:
        findings = list(pool.map(lambda job: graded(*job), survivors))
    return findings


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(HERE.parent))
    from kit import MANIFEST, built_labs, chip_path

    from msda_labs.classroom.export import export_lab

    wanted = argv or [lab.id for lab in built_labs()]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSDA_")}
    results = []
    with tempfile.TemporaryDirectory(prefix="msda-shipped-exports-") as out:
        for lab_id in wanted:
            lab = MANIFEST.lab(lab_id)
            root = export_lab(MANIFEST, lab, Path(out))
            results += audit(root, lab_id, lab.number, chip_path(lab_id), env,
                             log=lambda line: print(line, flush=True))
    print(json.dumps([asdict(f) for f in results], indent=1))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--prescreen"]:
        _prescreen_main()
    else:
        main(sys.argv[1:])
