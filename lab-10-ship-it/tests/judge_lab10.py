"""Judge-side checks of lab 10 that both test files use: test_lab10_operator.py (Tasks
10.1-10.3) and test_lab10_suite.py (Task 10.4). The references are computed here, on the CPU,
from the seeds the probes (probes_lab10.py) build their device inputs from; nothing here runs
student code: it reads what the probes sent back.
"""

import functools

import probes_lab10 as probes
from probes_lab10 import DTYPES

from msda_labs.grading import expect_close
from msda_labs.grading.judge.compare import Mismatch, function_named
from msda_labs.grading.judge.diagnosis import label_of
from msda_labs.grading.judge.results import Evidence
from msda_labs.mistakes.plumbing import FORWARD_INPUTS, GRADIENT_ORDER
from msda_labs.truth.cases import Case, make_inputs
from msda_labs.truth.reference import msda_reference, reference_grads

# The lab as the grading plugin reads it from each test module (both import these names).
TASKS = {"10.1": "MSDAFunction", "10.2": "validate_inputs", "10.3": "msda", "10.4": "final exam"}

# Small cases for the interpreter (about a millisecond per program and (level, point) pair).
RAGGED = Case("ragged_queries", B=1, Q=37, M=1, D=3, shapes=((5, 6),), K=1, seed=3)
TWO_LEVELS = Case("two_levels", B=1, Q=6, M=2, D=4, shapes=((4, 5), (2, 3)), K=2, seed=2)
# Distinct sizes, so that a shape in a message can only mean one thing: value (2, 16, 4, 5),
# spatial_shapes (2, 2), level_start_index (2,), locations (2, 3, 4, 2, 3, 2), weights
# (2, 3, 4, 2, 3).
VCASE = Case("validation", B=2, Q=3, M=4, D=5, shapes=((3, 4), (2, 2)), K=3, seed=4)


@functools.cache
def reference(case, dtype_name):
    """fp32 reference output and gradients on the inputs as rounded to ``dtype_name``."""
    value, shapes, _, loc, attn = make_inputs(case, DTYPES[dtype_name])
    out = msda_reference(value.float(), shapes, loc.float(), attn.float())
    return out, reference_grads(value, shapes, loc, attn, probes.grad_out(case, dtype_name))


ORDER_HINT = ("backward returns one gradient per input of forward, in forward's order: "
              "(grad_value, None, None, grad_loc, grad_attn, None)")


def check_output(res, case, dtype_name, what):
    """The output the probe sent back (``res["out"]``) against the reference."""
    expect_close(res["out"], reference(case, dtype_name)[0], what=what,
                 case=f"{case.describe()} in {dtype_name}", dtype=DTYPES[dtype_name])


def check_grads(res, case, dtype_name, what):
    """The three gradients the probe sent back (``res["grads"]``) against the reference's, or
    autograd's error (``res["backward_error"]``) worded as feedback."""
    if "backward_error" in res:
        raise AssertionError(f"{what}: backward failed on {case.describe()}: "
                             f"{res['backward_error']}; {ORDER_HINT}")
    for name, got, ref in zip(("value", "sampling_locations", "attention_weights"),
                              res["grads"], reference(case, dtype_name)[1]):
        if got is None:
            message = f"{what}: {name}.grad is None after backward on {case.describe()}"
            evidence = Evidence(function=function_named(what.replace(".apply", "")),
                                case=case.describe(),
                                checked=[label_of(GRADIENT_ORDER)])
            displaced = displaced_gradients(res.get("returned"), case)
            if displaced:
                evidence.matched = [GRADIENT_ORDER]
                evidence.named = GRADIENT_ORDER
                raise Mismatch(f"{message}; your backward returned {displaced}: this is "
                               f"{GRADIENT_ORDER}", evidence)
            raise Mismatch(f"{message}; {ORDER_HINT}", evidence)
        expect_close(got, ref, what=f"{what}: the gradient of {name}",
                     case=f"{case.describe()} in {dtype_name}", dtype=DTYPES[dtype_name],
                     backward=True)


def displaced_gradients(returned, case) -> str:
    """Where backward returned a gradient at another input's position (its shape tells whose it
    is: value, sampling_locations and attention_weights have 4, 6 and 5 axes), in words; ''
    when no gradient sits elsewhere than at its own input (a gradient left None, say)."""
    if not isinstance(returned, list):
        return ""
    B, Q, M, D, L, K, S = case.B, case.Q, case.M, case.D, case.L, case.K, case.S
    shapes = {"grad_value": [B, S, M, D], "grad_loc": [B, Q, M, L, K, 2],
              "grad_attn": [B, Q, M, L, K]}
    wanted = {"grad_value": 0, "grad_loc": 3, "grad_attn": 4}
    found = {name: i for i, shape in enumerate(returned) for name, want in shapes.items()
             if shape == want}
    if not any(found.get(name, wanted[name]) != wanted[name] for name in shapes):
        return ""
    names = {i: name for name, i in found.items()}
    slots = ", ".join(names.get(i, "None" if shape is None else f"a tensor {tuple(shape)}")
                      for i, shape in enumerate(returned))
    return f"({slots}) for forward's ({', '.join(FORWARD_INPUTS)})"


def run_msda(submission, case, dtype_name, **kwargs):
    """:func:`probes_lab10.msda_probe` in the isolated child."""
    return submission.run(probes.msda_probe, case, dtype_name, **kwargs)


STANDIN_HINT = ("the operator must run the kernels (msda_forward and msda_backward as loaded at "
                "the top of lab10.py); an operator that computes MSDA some other way, a PyTorch "
                "stand-in for instance, earns nothing in the final exam")


def check_kernels_ran(submission, res, what, backward=True):
    """The final exam's rule, as watched inside the child: the operator's forward launched at
    least one Triton kernel, and so did its backward (when it ran). The record is made in the
    student's process, so it is believed only of a source that cannot reach it
    (:func:`check_records_believed`)."""
    launched = res.get("launched") if isinstance(res, dict) else None
    if not isinstance(launched, dict):
        raise AssertionError(f"{what}: no record of the kernels the operator launched")
    for part in ("forward", "backward") if backward else ("forward",):
        names = launched.get(part)
        if not isinstance(names, list) or not names:
            raise AssertionError(f"{what}: msda's {part} launched no Triton kernel; "
                                 f"{STANDIN_HINT}")
    check_records_believed(submission, f"the record of the kernels launched ({what})")


LAUNCHERS = ("msda_forward", "msda_backward")


def launcher_uses(info) -> list[tuple[int, str]]:
    """``(line, what)`` of every use of the launchers in the submission's source other than the
    starter's own: bound only by top-level assignments (in ``if``/``else`` too) from
    ``load(...)`` or ``shipped.<name>`` (or imported from ``msda_labs.student.shipped`` under
    their own names), and used only by calling them by name. The recording
    wrappers replace these globals in a copy of the module; a launcher bound some other way, or
    kept under another name, would run unrecorded (or a stand-in be recorded in its place)."""
    import ast

    tree = info.tree
    if tree is None:
        return []
    allowed: set[int] = set()

    def starter_lines(body):
        for stmt in body:
            if isinstance(stmt, ast.If):
                starter_lines(stmt.body + stmt.orelse)
            elif isinstance(stmt, ast.Assign) and _starter_value(stmt.value):
                allowed.update(id(node) for target in stmt.targets for node in ast.walk(target))
                allowed.update(id(node) for node in ast.walk(stmt.value))

    starter_lines(tree.body)
    # ``from msda_labs.student.shipped import msda_forward`` at the top binds the same launcher.
    shipped = {id(alias) for stmt in tree.body if isinstance(stmt, ast.ImportFrom)
               and stmt.module == "msda_labs.student.shipped" for alias in stmt.names
               if alias.asname in (None, alias.name)}
    calls = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.name in LAUNCHERS:
            found.append((node.lineno, f"def {node.name}"))
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and set(node.names) & set(LAUNCHERS):
            found.append((node.lineno, "global " + ", ".join(node.names)))
        elif isinstance(node, ast.alias) and ({node.asname, node.name.split(".")[-1]}
                                               & set(LAUNCHERS)) and id(node) not in shipped:
            found.append((getattr(node, "lineno", 0), f"import {node.name}"))
        elif isinstance(node, ast.Attribute) and node.attr in LAUNCHERS \
                and id(node) not in allowed:
            found.append((node.lineno, f"{ast.unparse(node)} (a launcher reached past its "
                                       f"global name)"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "load" and id(node) not in allowed \
                and not _plain_load(node):
            found.append((node.lineno, "load(...) of a launcher or kernel, or of a name "
                                       "computed at run time, outside the starter's lines that "
                                       "bind the launchers"))
        elif isinstance(node, ast.Name) and node.id in LAUNCHERS:
            if isinstance(node.ctx, ast.Load) and id(node) not in calls:
                found.append((node.lineno, f"{node.id} used but not called"))
            elif not isinstance(node.ctx, ast.Load) and id(node) not in allowed:
                found.append((node.lineno, f"{node.id} bound"))
    return sorted(set(found))


def _plain_load(call) -> bool:
    """``load(N, "name")`` of something other than a launcher or a kernel (``use_fp32_grad_accum``,
    say): it cannot run a kernel past the recording wrappers."""
    import ast

    name = call.args[1] if len(call.args) > 1 else None
    return isinstance(name, ast.Constant) and isinstance(name.value, str) \
        and not name.value.startswith("msda_") and "kernel" not in name.value


def _starter_value(value) -> bool:
    """``load(6, ...)``, ``shipped.msda_forward``, or a tuple of such and constants."""
    import ast

    if isinstance(value, ast.Tuple):
        return all(_starter_value(elt) or isinstance(elt, ast.Constant) for elt in value.elts)
    if isinstance(value, ast.Call):
        return isinstance(value.func, ast.Name) and value.func.id == "load"
    return isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) \
        and value.value.id == "shipped" and value.attr in LAUNCHERS


def check_records_believed(submission, what):
    """Raise unless the judge reads in the source that the records made in the student's
    process (kernels launched, the arguments msda_forward and msda_backward were handed) are
    out of the module's reach: nothing that reaches a watch (``rules.tamper_uses``), and the
    launchers bound and used as the starter does (:func:`launcher_uses`)."""
    from msda_labs.grading.judge.rules import watch_untouched

    watch_untouched(submission.source, what)
    uses = launcher_uses(submission.source)
    if uses:
        line, how = uses[0]
        raise AssertionError(
            f"rule: {what} is recorded while your code runs, around msda_forward and "
            f"msda_backward as the top of lab10.py binds them; line {line} of your module: {how}. "
            f"Keep the starter's lines that bind them, and call them by name (no other binding, "
            f"no alias, no def of the same name), so that the record sees every call")


def compiled_kernels(folder, since: float, until: float) -> list[str]:
    """The names of the kernels Triton compiled into its cache folder ``folder`` between the
    times ``since`` and ``until`` (``time.time()``), read from each compiled kernel's metadata
    file (``<hash>/<kernel name>.json`` beside its binary; the ``__grp__*.json`` files only group
    a kernel's files). Sorted, without duplicates; empty when there is none."""
    import json
    from pathlib import Path

    root = Path(folder) if isinstance(folder, str) and folder else None
    if root is None or not root.is_dir():
        return []
    names = set()
    for meta in root.glob("*/*.json"):
        try:
            written = meta.stat().st_mtime
            if meta.name.startswith("__grp__") or not since <= written <= until:
                continue
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        name = data.get("name") if isinstance(data, dict) else None
        binaries = (meta.with_suffix(ext) for ext in (".cubin", ".hsaco"))
        if isinstance(name, str) and name and any(b.is_file() for b in binaries):
            names.add(name)
    return sorted(names)


def run_compiled(submission, case, dtype_name):
    """:func:`probes_lab10.kernel_cache_probe` in the child, timed by the judge's clock: the
    result, with ``"compiled"``: {part: names of the kernels written to Triton's cache on the
    disk during that part of the call} (see :func:`check_compiled_kernels`)."""
    import time

    start = time.time()
    res = submission.run(probes.kernel_cache_probe, case, dtype_name)
    end = time.time()
    if isinstance(res, dict):
        split = res.get("backward_from")
        split = split if isinstance(split, float) and start <= split <= end else end
        folder = res.get("cache_dir")
        res["compiled"] = {"forward": compiled_kernels(folder, start, split),
                           "backward": compiled_kernels(folder, split, end)}
    return res


def check_compiled_kernels(res, what):
    """The final exam's rule, observed by the judge on the GPU: during msda's forward and during
    its backward, Triton wrote at least one compiled kernel (metadata and binary) to its cache
    on the disk."""
    compiled = res.get("compiled") if isinstance(res, dict) else None
    if not isinstance(compiled, dict):
        raise AssertionError(f"{what}: no record of the kernels Triton compiled")
    for part in ("forward", "backward"):
        if not compiled.get(part):
            raise AssertionError(f"{what}: Triton compiled no kernel during msda's {part} "
                                 f"(read from its cache on the disk); {STANDIN_HINT}")
