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
    """``chip_source`` with ``target`` made to answer ``answer``: :func:`appended` at its end, or
    just before its ``if __name__ == "__main__":`` block (so ``python labNN.py`` runs it too)."""
    block = appended(target, answer, expr, alias)
    if lab in PLAIN_LABS and alias is None and "." not in target and \
            answer not in ("accept", "reject"):
        block = f"\n\n{_MARK.format(what=f'{target}: {answer}')}\n" + \
            plain_block(chip_source, target, answer, expr)
    main = '\nif __name__ == "__main__":'
    if main in chip_source:
        head, tail = chip_source.split(main, 1)
        return head.rstrip("\n") + "\n" + block + "\n" + main + tail
    return chip_source.rstrip("\n") + "\n" + block


# Labs whose rules read the whole module for reflection (getattr, globals, eval, inspect, double
# underscores: msda_labs.grading.rules.indirect_uses): there the block above would cost every
# test by itself, so a plain function's answer is written out as plain code instead.
PLAIN_LABS = frozenset({"lab01", "lab02"})

_PLAIN_HELPERS = '''
def _degenerate_like(real, fill):
    if isinstance(real, torch.Tensor):
        return torch.full_like(real, fill)
    if isinstance(real, bool):
        return fill == 1
    if isinstance(real, (int, float)):
        return type(real)(fill)
    raise TypeError("no constant answer of this type")


def _degenerate_echo(real, given):
    src = next((v for v in given if isinstance(v, torch.Tensor)), None)
    if src is None or src.numel() == 0:
        return torch.zeros_like(real)
    flat = src.detach().reshape(-1).to(device=real.device, dtype=real.dtype)
    reps = -(-real.numel() // flat.numel())
    return flat.repeat(reps)[: real.numel()].reshape(real.shape)


def _degenerate_earlier(lab, name):
    from msda_labs.student.earlier import load

    return load(lab, name).obj
'''


def plain_block(chip_source: str, target: str, answer: str, expr: str | None = None) -> str:
    """The answer ``answer`` (or ``expr``) of the module-level function ``target``, written out
    as a plain function of the same parameters that calls the chip's (kept under another name):
    no reflection, so a lab that reads its source for it grades the answer itself."""
    import ast

    tree = ast.parse(chip_source)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == target)
    params = ast.unparse(node.args)
    names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    call = ", ".join(names + [f"{a.arg}={a.arg}" for a in node.args.kwonlyargs])
    every = names + [a.arg for a in node.args.kwonlyargs]
    chip = f"_degenerate_chip_{target}"
    if expr is not None:
        value = expr.replace("earlier(", "_degenerate_earlier(")
        needs_real = re.search(r"\breal\b", expr) is not None
    elif answer == "echo":
        value = "_degenerate_echo(real, given)"
        needs_real = True
    else:
        value = f"_degenerate_like(real, {dict(zeros=0, ones=1, const=3)[answer]})"
        needs_real = True
    lines = [f"{chip} = {target}", "", "", f"def {target}({params}):",
             f"    given = [a.detach().clone() if isinstance(a, torch.Tensor) else a "
             f"for a in ({', '.join(every)},)]",
             f"    real = {chip}({call})" if needs_real else "    real = None",
             f"    return {value}"]
    return _PLAIN_HELPERS + "\n\n" + "\n".join(lines) + "\n"
