"""Degenerate answers: a chip whose one graded function answers without looking at its input.

A degenerate answer carries no understanding: zeros, ones or a constant of the right shape and
dtype, the input echoed, a constant computed from the sizes alone, each constant answer of a
``bool`` or ``int``, a kernel that stores a constant wherever the chip's kernel stores, the
previous lab's answer where this lab asks for something new, the output of another function of
the same lab. Each must score 0 on its task; the kit's self-test grades every one
(``tests/mutants/degenerate.yaml`` lists the graded functions, ``tests/labs/test_degenerate.py``
grades them).

A submission is the chip with a block appended (:func:`planted`), as for the whole-submission
mutants of :mod:`msda_labs.mistakes.submissions`: :func:`plant_degenerate` below is copied after
the chip with one call on the module's namespace. It replaces one function by a wrapper that
calls the chip's function (so the answer has the right shape, dtype and, for a kernel, the same
footprint of stores) and hands back the degenerate answer instead. It imports what it needs
inside itself and uses only torch, numpy, triton and the standard library.

That block reads its own source, evaluates expressions and writes on wrappers and on Triton's
interpreter: a lab whose rules read the whole module for such things (reflection, or anything
that could reach a watch in the student's process) would refuse the block itself. In those labs
(:data:`PLAIN_LABS`) :func:`rewritten` writes the answer into the target's own body instead, as
plain code that the reading accepts as it accepts the chip, so a 0 there is the answer's.
"""

from __future__ import annotations

import inspect
import re

__all__ = ["GENERIC", "appended", "planted", "plant_degenerate"]

# The answers every function of a kind gets, whatever the lab (the yaml adds named ones).
GENERIC = {
    "tensor": ("zeros", "ones", "const", "echo"),   # torch tensors (and tuples of them)
    "module": ("zeros", "ones", "const", "echo"),   # an nn.Module class: its forward's output
    "bool": ("zeros", "ones"),                     # False, True
    "int": ("zeros", "ones", "const"),             # 0, 1, 3
    "float": ("zeros", "ones", "const"),           # 0.0, 1.0, 3.0
    "kernel": ("zeros", "ones", "const"),          # every store (and atomic) writes 0, 1, 3
    "check": ("accept", "reject"),                 # a validator: never raises, always raises
    "other": (),                                   # only the named answers of the yaml
}

_MARK = "# ---- msda_labs degenerate answer {what} (appended to the chip, not part of it)"


def plant_degenerate(space: dict, target: str, answer: str, expr=None, alias=None) -> None:
    """Make ``target`` of the module ``space`` answer ``answer`` whatever its input.

    ``target`` is a function, a Triton kernel or device function, an ``nn.Module`` class (its
    ``forward``) or ``Class.method``. ``answer``: ``zeros``, ``ones``, ``const`` (3), ``echo``
    (the first tensor argument, flattened, repeated and cut to the answer's shape and dtype),
    ``accept`` / ``reject`` (a validator that never / always raises ValueError). ``expr``: a
    Python expression of the arguments (by name), of ``real`` (the chip's answer), ``orig`` (the
    chip's functions before planting) and the module's names, evaluated instead. ``alias``: the
    name of another function of the module that takes ``target``'s place.
    """
    import inspect as _inspect
    import re

    import torch

    const = 3
    fills = {"zeros": 0, "ones": 1, "const": const}
    # Inside a degenerate answer's own call (the chip's function it runs for the shape, an
    # earlier lab's answer), every other degenerate function of the module runs as the chip's:
    # so each answer is exactly what its own function would give, whatever else is planted.
    depth = space.setdefault("_degenerate_depth", [0])
    orig = {k: v for k, v in space.items() if not k.startswith("__")}
    owner_name, _, method = target.partition(".")
    owner = space[owner_name]

    if alias is not None:
        space[target] = space[alias]
        return

    def earlier(lab, name):
        from msda_labs.student.earlier import load

        return load(lab, name).obj

    def fit(src, real):
        if src is None or src.numel() == 0:
            return torch.zeros_like(real)
        flat = src.detach().reshape(-1).to(device=real.device, dtype=real.dtype)
        reps = -(-real.numel() // flat.numel())
        return flat.repeat(reps)[: real.numel()].reshape(real.shape)

    def degenerate(real, bound):
        if expr is not None:
            names = {**space, "torch": torch, "real": real, "orig": orig, "earlier": earlier,
                     **bound}
            return eval(expr, names)  # noqa: S307 - the kit's own expressions, not input
        if isinstance(real, torch.Tensor):
            if answer == "echo":
                src = next((v for k, v in bound.items()
                            if isinstance(v, torch.Tensor) and k != "self"), None)
                return fit(src, real)
            return torch.full_like(real, fills[answer])
        if isinstance(real, bool):
            return answer == "ones"
        if isinstance(real, int):
            return fills[answer]
        if isinstance(real, float):
            return float(fills[answer])
        if isinstance(real, tuple):
            items = [None if item is None else degenerate(item, bound) for item in real]
            return type(real)(*items) if hasattr(real, "_fields") else tuple(items)
        raise TypeError(f"no {answer!r} answer for a {type(real).__name__}")

    needs_real = expr is None or re.search(r"\breal\b", expr) is not None

    def wrap(fn):
        signature = _inspect.signature(fn)

        def wrapper(*args, **kwargs):
            if depth[0]:
                return fn(*args, **kwargs)
            if answer == "reject":
                raise ValueError("invalid input")
            if answer == "accept":
                return None
            depth[0] += 1
            try:
                # The chip's answer, for the shape, only where the answer needs it: a named
                # answer that does not read ``real`` runs nothing of the chip (no kernel launch,
                # no call a spy could count).
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                given = dict(bound.arguments)
                if answer == "echo":  # the input as it came, before the chip adds into it
                    given = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v
                             for k, v in given.items()}
                real = fn(*args, **kwargs) if needs_real else None
                return degenerate(real, given)
            finally:
                depth[0] -= 1

        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        wrapper.__wrapped__ = fn
        return wrapper

    if method:
        raw = owner.__dict__[method]
        if isinstance(raw, staticmethod):
            setattr(owner, method, staticmethod(wrap(raw.__func__)))
        elif isinstance(raw, classmethod):
            setattr(owner, method, classmethod(wrap(raw.__func__)))
        else:
            setattr(owner, method, wrap(raw))
        return
    if isinstance(owner, type):  # an nn.Module class: what its forward returns
        owner.forward = wrap(owner.forward)
        return
    if hasattr(owner, "arg_names") and hasattr(owner, "fn") and hasattr(owner, "run"):
        # A Triton kernel or device function, in the interpreter: launched, it runs the chip's
        # kernel with every store and atomic writing the constant; called from a kernel, it
        # returns the constant in the shape of the chip's result.
        import numpy as np
        from triton import language as tl
        from triton.runtime import interpreter as interp

        if not hasattr(owner, "rewrite"):
            raise RuntimeError("a degenerate kernel needs Triton's interpreter "
                               "(TRITON_INTERPRET=1)")
        fill = fills[answer]
        state = {"active": 0}
        builder = interp.InterpreterBuilder
        store, rmw = builder.create_masked_store, builder.create_atomic_rmw

        def constant(handle):
            return interp.TensorHandle(np.full_like(handle.data, fill), handle.dtype)

        def masked_store(self, ptrs, value, mask, cache_policy):
            return store(self, ptrs, constant(value) if state["active"] else value, mask,
                         cache_policy)

        def atomic_rmw(self, op, ptr, val, mask, sem, scope):
            if not state["active"]:
                return rmw(self, op, ptr, val, mask, sem, scope)
            # The memory ends up holding the constant where the atomic lands (an atomic add of
            # a constant 1 would be a right histogram, not a degenerate one).
            old = self.create_masked_load(ptr, mask, None, None, False)
            store(self, ptr, constant(val), mask, None)
            return old

        builder.create_masked_store = masked_store
        builder.create_atomic_rmw = atomic_rmw
        def launch(*args, **kwargs):  # looked up at each launch: a spy on the class sees it
            return type(owner).run(owner, *args, **kwargs)

        def run(*args, **kwargs):
            if depth[0]:
                return launch(*args, **kwargs)
            state["active"] += 1
            depth[0] += 1
            try:
                return launch(*args, **kwargs)
            finally:
                state["active"] -= 1
                depth[0] -= 1

        owner.run = run

        def constant_like(out):
            if isinstance(out, tl.core.tensor):
                return tl.core.tensor(constant(out.handle), out.type)
            if isinstance(out, tuple):
                return tuple(constant_like(item) for item in out)
            return out

        class Degenerate(type(owner)):
            def __call__(self, *args, **kwargs):
                if depth[0]:
                    return super().__call__(*args, **kwargs)
                depth[0] += 1
                try:
                    return constant_like(super().__call__(*args, **kwargs))
                finally:
                    depth[0] -= 1

        owner.__class__ = Degenerate
        return
    space[target] = wrap(owner)


def appended(target: str, answer: str, expr: str | None = None, alias: str | None = None) -> str:
    """The block that makes a chip answer ``answer`` in ``target`` (:func:`plant_degenerate`)."""
    source = inspect.getsource(plant_degenerate)
    source = source.replace("def plant_degenerate(", "def _degenerate_plant(", 1)
    call = f"_degenerate_plant(globals(), {target!r}, {answer!r}, expr={expr!r}, alias={alias!r})"
    return f"\n\n{_MARK.format(what=f'{target}: {answer}')}\n{source}\n\n{call}\n"


def planted(chip_source: str, target: str, answer: str, expr: str | None = None,
            alias: str | None = None, lab: str = "") -> str:
    """``chip_source`` with ``target`` made to answer ``answer``.

    In :data:`PLAIN_LABS` the answer is written into the target's own body as plain code
    (:func:`rewritten`); elsewhere :func:`appended`'s block goes at the module's end, or just
    before its ``if __name__ == "__main__":`` block (so ``python labNN.py`` runs it too)."""
    if lab in PLAIN_LABS and alias is None:
        return rewritten(chip_source, target, answer, expr)
    return _before_main(chip_source, appended(target, answer, expr, alias))


def _before_main(source: str, block: str) -> str:
    main = '\nif __name__ == "__main__":'
    if main in source:
        head, tail = source.split(main, 1)
        return head.rstrip("\n") + "\n" + block + "\n" + main + tail
    return source.rstrip("\n") + "\n" + block


# Labs whose rules read the whole module (for reflection: getattr, globals, eval, inspect, double
# underscores, msda_labs.grading.judge.rules.indirect_uses; or for anything that could reach a
# watch: writes on objects the module did not define, functools.wraps, rules.tamper_uses): there the
# block above would cost every such test by itself, so the answer is written into the target's own
# source as plain code instead, which the reading accepts as it accepts the chip.
PLAIN_LABS = frozenset({"lab00", "lab01", "lab02", "lab06", "lab07", "lab09", "lab10"})

_PLAIN_MARK = "# ---- msda_labs degenerate answers: helpers (appended to the chip, not part of it)"

_PLAIN_HELPERS = '''
_degenerate_depth = [0]


def _degenerate_like(real, fill):
    if isinstance(real, torch.Tensor):
        return torch.full_like(real, fill)
    if isinstance(real, bool):
        return fill == 1
    if isinstance(real, (int, float)):
        return type(real)(fill)
    if isinstance(real, tuple):
        return tuple(None if item is None else _degenerate_like(item, fill) for item in real)
    raise TypeError("no constant answer of this type")


def _degenerate_fit(src, real):
    if src is None or src.numel() == 0:
        return torch.zeros_like(real)
    flat = src.detach().reshape(-1).to(device=real.device, dtype=real.dtype)
    reps = -(-real.numel() // flat.numel())
    return flat.repeat(reps)[: real.numel()].reshape(real.shape)


def _degenerate_echo(real, given):
    src = next((v for v in given if isinstance(v, torch.Tensor)), None)
    if isinstance(real, tuple):
        return tuple(None if item is None else _degenerate_fit(src, item) for item in real)
    return _degenerate_fit(src, real)


def _degenerate_earlier(lab, name):
    from msda_labs.student import earlier as _degenerate_lab

    return _degenerate_lab.load(lab, name).obj
'''


def _find_def(tree, target: str):
    """The def node of ``target`` (a module-level function, ``Class.method``, or an
    ``nn.Module`` class: its ``forward``) and its name."""
    import ast

    owner, _, method = target.partition(".")
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                 and n.name == owner), None)
    if node is None:
        raise ValueError(f"{target}: no function or class of that name in the chip")
    if isinstance(node, ast.ClassDef):
        method = method or "forward"
        node = next((n for n in node.body if isinstance(n, ast.FunctionDef)
                     and n.name == method), None)
        if node is None:
            raise ValueError(f"{target}: the class defines no method {method!r}")
    return node


def _is_kernel(node) -> bool:
    import ast

    return any("jit" in ast.unparse(d) for d in node.decorator_list)


def rewritten(chip_source: str, target: str, answer: str, expr: str | None = None) -> str:
    """``chip_source`` with the body of ``target`` rewritten to answer ``answer`` (or ``expr``),
    in plain code: no reflection, no wrapper, no write on anything the module did not define.

    A function or method first asks whether it runs inside another planted answer's call
    (``_degenerate_depth``): there it runs as the chip's. Otherwise an answer that needs no
    ``real`` returns at once; one that does runs the chip's body (other planted answers inside
    it running as the chip's) and each of its returns hands back the answer made from what the
    chip would have returned. A Triton kernel or device function has each store and atomic write
    the constant, and each of its returns the constant in the shape of the chip's result."""
    import ast

    tree = ast.parse(chip_source)
    node = _find_def(tree, target)
    name = target.replace(".", "_")
    if _is_kernel(node):
        new = _constant_kernel(node, answer)
        helper = ""
    else:
        new, helper = _answering_function(node, name, answer, expr)
    lines = chip_source.splitlines(keepends=True)
    indent = " " * node.col_offset
    body = "".join(indent + line if line.strip() else line
                   for line in ast.unparse(new).splitlines(keepends=True))
    out = "".join(lines[: node.lineno - 1]) + body.rstrip("\n") + "\n" + \
        "".join(lines[node.end_lineno:])
    block = ""
    if _PLAIN_MARK not in out:
        block += f"\n\n{_PLAIN_MARK}\n{_PLAIN_HELPERS}"
    if helper:
        block += f"\n\n{_MARK.format(what=f'{target}: {answer}')}\n{helper}"
    return _before_main(out, block) if block else out


def _answering_function(node, name: str, answer: str, expr: str | None):
    """The def ``node`` rewritten to answer, and the module-level helper that makes the answer
    from the chip's result ``real`` and the arguments as given."""
    import ast
    import copy

    args = node.args
    params = [a.arg for a in (*args.posonlyargs, *args.args)]
    if args.vararg:
        params.append(args.vararg.arg)
    params += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        params.append(args.kwarg.arg)
    helper_name = f"_degenerate_answer_{name}"
    if expr is not None:
        value = re.sub(r"\borig\[['\"](\w+)['\"]\]", r"\1", expr)
        value = value.replace("earlier(", "_degenerate_earlier(")
        needs_real = re.search(r"\breal\b", expr) is not None
    elif answer == "echo":
        value, needs_real = "_degenerate_echo(real, given)", True
    elif answer in ("accept", "reject"):
        value, needs_real = "None", False
    else:
        value = f"_degenerate_like(real, {dict(zeros=0, ones=1, const=3)[answer]})"
        needs_real = True
    unpack = f"    ({', '.join(params)},) = given\n" if params else ""
    helper = f"def {helper_name}(real, given):\n{unpack}    return {value}\n"

    clone = "a.detach().clone() if isinstance(a, torch.Tensor) else a" if answer == "echo" \
        else "a"
    given = f"[{clone} for a in ({', '.join(params)},)]" if params else "[]"
    start = ["_degenerate_outer = not _degenerate_depth[0]"]
    if answer == "reject":
        start.append("if _degenerate_outer:\n    raise ValueError('invalid input')")
    elif answer == "accept":
        start.append("if _degenerate_outer:\n    return None")
    else:
        start.append(f"_degenerate_given = {given}")
    start.append("_degenerate_depth[0] += 1")
    head = [ast.parse(s).body[0] for s in start]

    new = copy.deepcopy(node)
    new.decorator_list = []
    body = new.body
    doc = []
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        doc, body = [body[0]], body[1:]
        # unparsed at the margin and indented back as a whole: the docstring's own lines too
        cut = " " * node.col_offset
        doc[0].value.value = "\n".join(line[len(cut):] if line.startswith(cut) else line
                                       for line in doc[0].value.value.split("\n"))

    class Returns(ast.NodeTransformer):
        def visit_FunctionDef(self, inner):  # a nested function keeps its own returns
            return inner

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Lambda(self, inner):
            return inner

        def visit_Return(self, ret):
            real = ret.value or ast.Constant(None)
            made = ast.parse(f"{helper_name}(_REAL_, _degenerate_given)", mode="eval").body
            made.args[0] = real
            ret.value = ast.IfExp(test=ast.Name("_degenerate_outer"), body=made,
                                  orelse=copy.deepcopy(real))
            return ret

    if answer in ("accept", "reject"):
        inner = body
    elif needs_real:
        inner = [Returns().visit(stmt) for stmt in body]
    else:
        inner = ast.parse(f"if _degenerate_outer:\n    return {helper_name}(None, "
                          f"_degenerate_given)").body + body
    guarded = ast.parse("try:\n    pass\nfinally:\n    _degenerate_depth[0] -= 1").body[0]
    guarded.body = inner or [ast.Pass()]
    new.body = doc + head + [guarded]
    ast.fix_missing_locations(new)
    return new, (helper if answer not in ("accept", "reject") else "")


def _constant_kernel(node, answer: str):
    """The Triton kernel or device function ``node`` with every store and atomic writing the
    constant (an atomic add of a constant 1 would be a right histogram, so an atomic becomes a
    store) and every return giving the constant in the shape of the chip's result."""
    import ast
    import copy

    fill = dict(zeros=0, ones=1, const=3)[answer]

    def constant(value):
        made = ast.parse(f"tl.zeros_like(_V_) + {fill}", mode="eval").body
        made.left.args[0] = value
        return made

    class Stores(ast.NodeTransformer):
        def visit_Call(self, call):
            self.generic_visit(call)
            func = call.func
            if not isinstance(func, ast.Attribute):
                return call
            if func.attr == "store" or func.attr.startswith("atomic_"):
                if func.attr.startswith("atomic_"):
                    func.attr = "store"
                    # tl.atomic_*(ptr, val, mask=..., sem=..., scope=...): a store keeps the mask
                    call.keywords = [k for k in call.keywords if k.arg in ("mask", "val")]
                    for k in call.keywords:
                        if k.arg == "val":
                            k.arg = "value"
                    if len(call.args) > 2:
                        call.keywords.append(ast.keyword("mask", call.args[2]))
                        call.args = call.args[:2]
                if len(call.args) >= 2:
                    call.args[1] = constant(call.args[1])
                else:
                    for k in call.keywords:
                        if k.arg == "value":
                            k.value = constant(k.value)
            return call

        def visit_Return(self, ret):
            if ret.value is not None:
                ret.value = constant(ret.value)
            return ret

    new = Stores().visit(copy.deepcopy(node))
    new.decorator_list = []
    ast.fix_missing_locations(new)
    return new
