"""Run your functions on one small example and compare them with the student-facing spec.

``python labNN.py`` ends with ``run_lab(NN, globals())``: every task's function of the lab runs
once on a small example this module draws (never one of the grader's cases), and a short report
says what came out: the shapes, whether it agrees with :mod:`msda_labs.student.spec` (the largest
error, the first wrong element with its index, yours vs the spec), what the guard bands around a
kernel's tensors caught (writes past an end, elements never written, NaN read from outside an
input) and how long it took. A function that still raises its ``NotImplementedError`` is where
to start: the report says so in one line.

In a notebook or a REPL::

    from msda_labs.student.check import case, check
    import lab04
    check(lab04.bilinear_kernel, case(4, "bilinear_kernel"))

This is for running by hand. A graded function may not use it (the grader flags an import of it
outside ``if __name__ == "__main__":``), and it is not the grade: ``nox -s labNN`` is.
"""

from __future__ import annotations

import ast
import os
import pickle
import re
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from msda_labs.student.cases import tolerance
from msda_labs.student.guards import format_index, is_sentinel, mismatch, scan_guarded
from msda_labs.student.selfcheck import Case, Launch, NotHere, Part, has_big, steps
from msda_labs.student.tracebacks import describe

__all__ = ["Case", "Part", "Launch", "Report", "check", "case", "run_lab"]


@dataclass
class Report:
    """What one check found. ``status``: ok, wrong, todo (a NotImplementedError naming a task),
    crash (another exception), missing (the module has no such function) or skipped (the case
    cannot run on this machine: the line says why)."""

    name: str
    status: str
    lines: list = field(default_factory=list)
    seconds: float = 0.0
    task: str = ""

    def __str__(self) -> str:
        return "\n".join(self.lines)


_TODO = re.compile(r"Task (\d+\.\d+)")


def _todo_task(exc: BaseException) -> str | None:
    """The task a stub's NotImplementedError names (also when Triton wrapped it)."""
    text = f"{type(exc).__name__}: {exc}"
    while exc is not None:
        if isinstance(exc, NotImplementedError) or "NotImplementedError" in text:
            found = _TODO.search(str(exc)) or _TODO.search(text)
            if found:
                return found.group(1)
        exc = exc.__cause__ or exc.__context__
    return None


def _describe(obj) -> str:
    if isinstance(obj, str):
        return obj
    if isinstance(obj, torch.Tensor):
        return f"{tuple(obj.shape)} {str(obj.dtype).replace('torch.', '')}"
    text = repr(obj)
    return text if len(text) <= 160 else text[:150] + " ..."


def _yours(filename: str) -> bool:
    """Whether a frame's file is the student's: not the kit, not an installed package (Triton's
    machinery), not Python's standard library (functools, where Triton's autotuner calls in)."""
    return not ("site-packages" in filename or "msda_labs" in filename
                or filename.startswith("<") or filename.startswith(_STDLIB))


_STDLIB = tuple({sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]})


def _where(exc: BaseException) -> str:
    """The innermost frame of the student's own file, through the exceptions that Triton's
    interpreter wraps (the line of a ``@triton.jit`` helper lives on those)."""
    frames = []
    for link in _chain(exc):
        frames = [f for f in traceback.extract_tb(link.__traceback__)
                  if _yours(f.filename)] or frames
    return f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _num(x: float) -> str:
    return f"{x:.6g}"


def _tensor_lines(name: str, yours, spec: torch.Tensor, rtol: float, atol: float,
                  guarded: bool) -> list[str]:
    """Problems of one tensor result (empty when it agrees)."""
    if not isinstance(yours, torch.Tensor):
        return [f"{name}: expected a tensor of shape {tuple(spec.shape)}, got {_describe(yours)}"]
    if tuple(yours.shape) != tuple(spec.shape):
        return [f"{name}: shape {tuple(yours.shape)}, the spec's is {tuple(spec.shape)}"]
    if yours.is_floating_point() and spec.is_floating_point():
        bad, count = mismatch(yours, spec, rtol, atol)
    else:
        bad = yours.detach().cpu() != spec.detach().cpu().to(yours.dtype)
        count = int(bad.sum())
    lines = []
    # Only a kernel's output starts out as the sentinel; elsewhere the bit pattern means nothing.
    unwritten = is_sentinel(yours.cpu()) if guarded and yours.dtype in (
        torch.float32, torch.float16, torch.bfloat16) else None
    if yours.is_floating_point():
        nan = torch.isnan(yours.detach().cpu()) & ~torch.isnan(spec.detach().cpu())
        if unwritten is not None:
            nan &= ~unwritten
        if int(nan.sum()):
            first = format_index(int(nan.flatten().nonzero()[0]), tuple(spec.shape))
            cause = (": a lane without its mask read the NaN guard band around an input"
                     if guarded else "")
            lines.append(f"NaN: {int(nan.sum())} elements of {name} are NaN, first at "
                         f"{name}{first}{cause}")
    if count:
        flat = int(bad.flatten().nonzero()[0])
        y, s = yours.detach().cpu().flatten()[flat], spec.detach().cpu().flatten()[flat]
        shown = "never written" if unwritten is not None and bool(unwritten.flatten()[flat]) \
            else _num(float(y))
        finite = bad & torch.isfinite(yours.detach().cpu().to(torch.float64))
        worst = (yours.detach().cpu().to(torch.float64) - spec.detach().cpu().to(torch.float64))
        err = f", max |yours - spec| = {_num(float(worst.abs()[finite].max()))}" \
            if int(finite.sum()) else ""
        lines.insert(0, f"WRONG: {count} of {spec.numel()} elements of {name} differ{err}; "
                        f"first at {name}{format_index(flat, tuple(spec.shape))}: yours {shown}, "
                        f"spec {_num(float(s))}")
    return lines


def _guard_lines(part: Part) -> list[str]:
    n = 1
    for size in part.shape:
        n *= size
    buf = part.buf.detach().cpu()
    if part.start == "zeros":  # an output added into: anything non-zero in a band was written
        head, tail = buf[:part.guard], buf[part.guard + n:]
        past, before, unwritten = (tail != 0).nonzero().flatten(), int((head != 0).sum()), None
    else:
        scan = scan_guarded(buf, n, part.guard)
        past, before, unwritten = scan.past_end, scan.before_start, scan.unwritten
    lines = []
    if past.numel():
        near = "right after its last element" if int(past[0]) == 0 \
            else f"{int(past[0])} elements after its last"
        lines.append(f"OUT OF BOUNDS: {past.numel()} elements written past the end of "
                     f"{part.name} (the nearest {near}): a lane that should be masked off stored")
    if before:
        lines.append(f"OUT OF BOUNDS: {before} elements written before the start of "
                     f"{part.name}: an offset went negative")
    if unwritten is not None and unwritten.numel():
        lines.append(f"UNWRITTEN: {unwritten.numel()} of {n} elements of {part.name} never "
                     f"written, first at {part.name}{format_index(int(unwritten[0]), part.shape)}")
    return lines


def _body(part: Part) -> torch.Tensor:
    n = 1
    for size in part.shape:
        n *= size
    return part.buf.detach().cpu()[part.guard:part.guard + n].view(part.shape)


def _value_lines(name: str, yours, spec, exact: bool) -> list[str]:
    if isinstance(spec, bool) and not isinstance(yours, bool):
        return [f"WRONG: {name} should be a bool ({spec}), got {_describe(yours)}"]
    if isinstance(spec, float) and not exact and isinstance(yours, (int, float)):
        same = abs(yours - spec) <= 1e-9 * max(1.0, abs(spec))
    else:
        same = type(yours) is type(spec) and yours == spec
    if same:
        return []
    if isinstance(spec, dict) and isinstance(yours, dict):
        for key in [*spec, *(k for k in yours if k not in spec)]:
            if yours.get(key, "(missing)") != spec.get(key, "(missing)"):
                return [f"WRONG: {name}[{key!r}] is {_describe(yours.get(key, '(missing)'))}, "
                        f"the spec says {_describe(spec.get(key, '(missing)'))}"]
    if isinstance(spec, list) and isinstance(yours, list) and yours != spec:
        at = next((i for i, (a, b) in enumerate(zip(yours, spec)) if a != b),
                  min(len(yours), len(spec)))
        return [f"WRONG: {name} has {len(yours)} items, the spec {len(spec)}; first difference "
                f"at [{at}]: yours {_describe(yours[at]) if at < len(yours) else '(none)'}, "
                f"spec {_describe(spec[at]) if at < len(spec) else '(none)'}"]
    return [f"WRONG: {name} is {_describe(yours)}, the spec says {_describe(spec)}"]


def _compare(case: Case, result, expected, worst: list) -> list[str]:
    """The problems of ``result`` (empty when it agrees); the largest error of each float tensor
    part goes into ``worst``."""
    guarded = isinstance(result, Launch)
    lines = []
    if guarded:
        for part in result.parts:
            lines += _guard_lines(part)
        result = tuple(_body(p) for p in result.parts)
        if len(result) == 1:
            result = result[0]
    many = isinstance(expected, tuple)
    yours = result if many else (result,)
    specs = expected if many else (expected,)
    if many and (not isinstance(result, tuple) or len(result) != len(specs)):
        return lines + [f"expected {len(specs)} results ({', '.join(case.names)}), got "
                        f"{_describe(result)}"]
    backward = case.backward if isinstance(case.backward, tuple) else (case.backward,) * len(specs)
    for name, y, s, grad in zip(case.names, yours, specs, backward):
        if isinstance(s, torch.Tensor) and isinstance(y, torch.Tensor) \
                and y.shape == s.shape and y.is_floating_point():
            err = (y.detach().cpu().to(torch.float64) - s.detach().cpu().to(torch.float64)).abs()
            if err.numel() and bool(torch.isfinite(err).all()):
                worst.append(float(err.max()))
        if case.dtype is not None and isinstance(y, torch.Tensor) and y.is_floating_point() \
                and y.dtype != case.dtype:
            lines.append(f"WRONG: {name} is {str(y.dtype).replace('torch.', '')}, expected "
                         f"{str(case.dtype).replace('torch.', '')} (the dtype of the input)")
        if isinstance(s, torch.Tensor):
            dtype = y.dtype if isinstance(y, torch.Tensor) and y.is_floating_point() \
                else torch.float32
            rtol, atol = tolerance(dtype if dtype in (torch.float16, torch.bfloat16)
                                   else torch.float32, backward=grad)
            lines += _tensor_lines(name, y, s, rtol, atol, guarded)
        else:
            lines += _value_lines(name, y, s, case.exact)
    return lines


def check(fn, case: Case, *, name: str = "", show: bool = True) -> Report:
    """Run ``fn`` on ``case``, compare with the spec, print the report (unless ``show=False``)
    and return it."""
    name = name or getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None),
                                                            "__name__", "your function")
    report = Report(name, "ok")
    start = time.perf_counter()
    try:
        result = case.call(fn)
    except Exception as exc:  # noqa: BLE001 - a student's error is a finding, not a crash here
        report.seconds = time.perf_counter() - start
        task = _todo_task(exc)
        if task:
            report.status, report.task = "todo", task
            report.lines = [f"{name}: still raises NotImplementedError (Task {task})"]
        else:
            report.status = "crash"
            report.lines = [f"{name} on {case.what}: CRASH {describe(exc):.300}{_where(exc)}"]
        if show:
            print(report)
        return report
    report.seconds = time.perf_counter() - start
    worst: list[float] = []
    try:
        problems = _compare(case, result, case.spec(), worst)
    except Exception as exc:  # noqa: BLE001 - e.g. a layer whose projections have other sizes
        report.status = "crash"
        problems = [f"CRASH while comparing with the spec: {type(exc).__name__}: {exc}"]
    shapes = ", ".join(f"{k} {_describe(v)}" for k, v in case.inputs.items())
    report.lines = [f"{name} on {case.what}  [{report.seconds:.2f} s]"]
    if shapes:
        report.lines.append(f"  in:  {shapes}")
    shown = result if not isinstance(result, Launch) else tuple(_body(p) for p in result.parts)
    shown = shown if isinstance(shown, tuple) else (shown,)
    if case.names == ("out",):
        report.lines.append(f"  out: {_describe(shown[0])}")
    elif not any(isinstance(v, torch.Tensor) for v in shown):
        report.lines += [f"  out: {n} = {_describe(v)}" for n, v in zip(case.names, shown)]
    else:
        report.lines.append("  out: " + ", ".join(f"{n} {_describe(v)}"
                                                  for n, v in zip(case.names, shown)))
    if problems:
        report.status = "wrong" if report.status == "ok" else report.status
        report.lines += [f"  {line}" for line in problems]
        report.lines.append(f"  (compared with {case.spec_name})")
    else:
        err = f" (max |yours - spec| = {max(worst):.1e})" if worst else ""
        report.lines.append(f"  OK: agrees with {case.spec_name}{err}"
                            + ("; guard bands clean" if isinstance(result, Launch) else ""))
    if show:
        print(report)
    return report


def case(lab: int, name: str, module=None) -> Case:
    """The example ``python labNN.py`` runs ``name`` of lab ``lab`` on (lab 07's cases need the
    lab module, for its given ``gather_corners``)."""
    namespace = vars(module) if module is not None else None
    for step in steps(lab):
        if step.name == name:
            return step.make(namespace)
    raise KeyError(f"lab {lab:02d} has no self-check for {name!r}; "
                   f"those it has: {', '.join(s.name for s in steps(lab))}")


TWIN_RIGHT = ("the very same samples on a 32x32 level, every offset far inside the int32 range, "
              "come out right: the size alone breaks it. Offsets computed in int32 (program ids "
              "and tl.arange are int32) wrap past 2**31; make them int64 before they multiply "
              "strides")
TWIN_WRONG = ("the very same samples on a 32x32 level go wrong too, so the size is not what "
              "breaks it: look at the small examples first")
CRASH_HINT = ("in Triton's interpreter this is nearly always a load or store at a wild address: "
              "a lane without its mask, or an offset that overflowed")


def _isolated(run: Callable[[], Report], name: str) -> Report:
    """``run()`` in a forked child, so that a kernel that corrupts memory (the interpreter has no
    bounds checks) costs one report, not the whole run. In-process where there is no fork, and
    where a GPU may be in use: a child forked after CUDA started cannot use it."""
    if not hasattr(os, "fork") or (torch.cuda.is_available()
                                   and os.environ.get("TRITON_INTERPRET") != "1"):
        return run()
    sys.stdout.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, send the report, leave without cleaning up the parent's state
        os.close(read_end)
        code = 0
        try:
            with os.fdopen(write_end, "wb") as pipe:
                pickle.dump(run(), pipe)
        except BaseException:  # noqa: BLE001 - whatever happens, the child must not return
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    try:
        return pickle.loads(data)
    except Exception:  # noqa: BLE001 - the child died before it could answer
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) \
            else f"exit status {os.WEXITSTATUS(status)}"
        return Report(name, "crash", [f"{name}: CRASH, the process died ({how}); {CRASH_HINT}"])


def _task_key(task: str) -> tuple[int, ...]:
    return tuple(int(part) for part in task.split("."))


def _stubs(path: str) -> list[tuple[str, str]]:
    """The ``raise NotImplementedError("Task X.Y: name")`` statements left in a lab module, as
    (task, name) in task order, then file order; empty when the file cannot be read."""
    try:
        tree = ast.parse(Path(path).read_bytes())  # decoded as Python decodes it (BOM, coding)
    except (OSError, SyntaxError, ValueError):
        return []
    found = {}
    for node in ast.walk(tree):
        exc = node.exc if isinstance(node, ast.Raise) else None
        if isinstance(exc, ast.Call) and getattr(exc.func, "id", "") == "NotImplementedError" \
                and exc.args and isinstance(exc.args[0], ast.Constant) \
                and isinstance(exc.args[0].value, str):
            match = re.match(r"Task (\d+\.\d+):?\s*(\S*)", exc.args[0].value)
            if match:
                found[(match.group(1), match.group(2) or "its function")] = node.lineno
    return sorted(found, key=lambda t: (_task_key(t[0]), found[t]))  # by task, then by line


def _this_command(file: str) -> str:
    """How this run was started, to repeat it: the interpreter as the student named it when it
    lies below the current folder (the lab's ``.venv/bin/python``), else ``python``."""
    exe = sys.executable or "python"
    try:
        shown = os.path.relpath(exe)
    except ValueError:  # another drive
        shown = exe
    if shown.startswith(".."):
        shown = "python"
    return f"{shown} {file}"


def run_lab(lab: int, namespace, extra=(), big: bool | None = None) -> list[Report]:
    """Check every task's function of lab ``lab`` in ``namespace`` (a module's ``globals()``).

    Args:
        lab: the lab number.
        namespace: the lab module's globals (``globals()`` in its ``__main__`` block).
        extra: more :class:`~msda_labs.student.selfcheck.Step` s to run first (a lab's own).
        big: also run the lab's cases of size and precision (a case past 2**31 value elements,
            a half-precision case), where it has them; None: when the command line says
            ``--big`` (``python labNN.py --big``).

    Returns:
        The reports, in order. On a module where every function is still a stub, prints one line:
        the task to start with.
    """
    path = str(namespace.get("__file__", f"lab{lab:02d}.py"))
    file = path.rsplit("/", 1)[-1]
    if big is None:
        big = "--big" in sys.argv[1:]
    reports, todo = [], []
    for step in (*extra, *steps(lab, big=big)):
        fn = namespace.get(step.name)
        if fn is None:
            print(f"{step.key}: not found in {file} (the grader calls it by this name)")
            reports.append(Report(step.key, "missing", task=step.task))
            continue

        def run(fn=fn, step=step) -> Report:
            try:
                case = step.make(namespace)
            except NotHere as exc:
                return Report(step.key, "skipped", [f"{step.key}: not run on this machine: {exc}"],
                              task=step.task)
            return check(fn, case, name=step.key, show=False)

        report = _isolated(run, step.key)
        if report.status in ("wrong", "crash") and step.twin is not None:
            twin = _isolated(lambda fn=fn, step=step: check(fn, step.twin(namespace),
                                                            name=step.twin_key, show=False),
                             step.twin_key)
            report.lines.append(f"  {TWIN_RIGHT if twin.status == 'ok' else TWIN_WRONG}")
        reports.append(report)
        if report.status == "todo":
            todo.append((report.task or step.task, step.name))
            continue
        print(report)
    # What to do first: the lowest task whose stub is still in the file (a helper that no step
    # runs on its own counts too), else the first step that raised it.
    stubs = _stubs(path) or sorted(todo, key=lambda t: _task_key(t[0]))
    if stubs:
        task, name = stubs[0]
        rest = sorted({t for t, _ in stubs[1:]} - {task}, key=_task_key)
        later = f" (still to do after it: {', '.join(rest)})" if rest else ""
        first = "Start with" if all(r.status == "todo" for r in reports) else "Next"
        print(f"{first} Task {task}: {name} in {file} still raises NotImplementedError; write "
              f"the TODO(Task {task}) part, then run `{_this_command(file)}` again{later}.")
    elif big and not has_big(lab):
        print(f"--big: lab {lab:02d} has no case of size or precision to add; every example "
              f"above is all there is.")
    elif not big and has_big(lab):
        added = ", ".join(step.label for step in steps(lab, big=True) if step.label)
        print(f"`{_this_command(file)} --big` also runs this lab's cases of size and precision "
              f"({added}).")
    return reports
