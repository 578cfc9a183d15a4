"""Lab 09 - Hardware detective: what one tl.atomic_add becomes on each GPU, without a GPU.

Goal: compile the lab 08 backward kernel ahead of time for an A100 (SM 8.0) and an H100 (SM 9.0),
read the PTX, and turn what you find into the rule that picks grad_value's accumulator dtype.

In this lab you will:
  * find every atomic instruction in a PTX listing (Task 9.1);
  * tell a native atomic add from a compare-and-swap retry loop that emulates one (Task 9.2);
  * write the switch that sends bfloat16 gradients through an fp32 buffer on pre-Hopper GPUs
    (Task 9.3);
  * type every argument of a Triton kernel, which is all the compiler needs to build it for a
    GPU you do not have (Task 9.4), and compile it for SM 8.0 and SM 9.0 (Task 9.5).

This module runs with TRITON_INTERPRET=0 (the real compiler; the interpreter cannot compile). The
grader and `python lab09.py` both arrange that; no GPU is needed.

The lowering you should find (the table the whole lab is about):

    grad_value buffer   SM 8.0 (A100)                 SM 9.0 (H100)
    float32             native add                    native add
    float16             native add (since SM 6.0)     native add
    bfloat16            compare-and-swap loop (CAS)   native add
"""

import os
import re  # noqa: F401 - for Task 9.1

import torch

from msda_labs.student.ptx import compile_ptx, kernel_params  # noqa: F401 - for Tasks 9.4 and 9.5

# The constexpr sizes the backward kernel is compiled with here. The lowering of the atomics does
# not depend on them, and small ones keep each compile under a second.
AOT_SIZES = {"M": 2, "D": 8, "L": 2, "K": 2, "BLOCK_Q": 16, "BLOCK_D": 8}

# Pointers that hold int64 tables rather than tensor data.
INT64_POINTERS = ("shapes_ptr", "starts_ptr")


def find_atomics(ptx: str) -> list[str]:
    """The distinct atomic instructions of a PTX listing, sorted.

    An atomic instruction starts, at a word boundary, with ``atom.`` (read-modify-write that
    returns the old value) or ``red.`` (a reduction whose result nobody reads), followed by its
    qualifiers: word characters, dots and colons, e.g. ``atom.global.gpu.relaxed.add.f32``,
    ``red.global.add.noftz.bf16``, ``atom.relaxed.gpu.global.cas.b32``.

    Args:
        ptx: PTX text, e.g. ``compile_backward(...)``'s result.

    Returns:
        Sorted list of distinct tokens (each counted once however often it occurs).
    """
    # TODO(Task 9.1): one regular expression, then deduplicate and sort (about 2 lines).
    # Hint: r"\b(?:atom|red)\.[\w.:]+" matches a whole token.
    # BEGIN SOLUTION
    return sorted(set(re.findall(r"\b(?:atom|red)\.[\w.:]+", ptx)))
    # STARTER
    # raise NotImplementedError("Task 9.1: find_atomics")
    # END SOLUTION


def classify_atomics(tokens: list[str]) -> str:
    """How a kernel's atomics are implemented: ``"emulated"``, ``"native"`` or ``"none"``.

    A GPU without an atomic add for a dtype emulates one with a compare-and-swap retry loop:
    read the word, add in registers, ``cas`` it back, retry if another thread got there first.
    The loop shows up as a token with a ``cas`` qualifier; the spelling around it (qualifier
    order, ``.b32`` or ``.b16``, ``relaxed`` or ``acq_rel``) changes with the compiler version.

    Args:
        tokens: atomic instruction tokens, as :func:`find_atomics` returns them.

    Returns:
        ``"emulated"`` if any token is a compare-and-swap, else ``"native"`` if there is any
        atomic at all (``atom.`` or ``red.``), else ``"none"``.
    """
    # TODO(Task 9.2): look for a "cas" qualifier among each token's dot-separated parts
    # (about 5 lines).
    # BEGIN SOLUTION
    if any("cas" in token.split(".") for token in tokens):
        return "emulated"
    return "native" if tokens else "none"
    # STARTER
    # raise NotImplementedError("Task 9.2: classify_atomics")
    # END SOLUTION


def use_fp32_grad_accum(dtype: torch.dtype, capability: tuple[int, int]) -> bool:
    """Whether grad_value should be accumulated in an fp32 scratch buffer.

    Only bfloat16 before Hopper needs it: SM 9.0 added a native bf16 atomic add; before that a
    bf16 add is a CAS loop. float16 has had a native atomic add since SM 6.0 (and routing it
    through fp32 measured 2-4x slower on Ampere/Ada), and float32 is native everywhere.

    Args:
        dtype: the dtype of value (and of its gradient).
        capability: (major, minor) compute capability, e.g. (8, 0) for A100, (9, 0) for H100.

    Returns:
        A real ``bool``: True iff dtype is bfloat16 and major < 9.
    """
    # TODO(Task 9.3): one line; return a real bool (about 1 line).
    # BEGIN SOLUTION
    return dtype == torch.bfloat16 and int(capability[0]) < 9
    # STARTER
    # raise NotImplementedError("Task 9.3: use_fp32_grad_accum")
    # END SOLUTION


def backward_signature(kernel, value_dtype: str, grad_value_dtype: str) -> dict[str, str]:
    """The Triton signature of the lab 08 backward kernel for one dtype combination.

    ``kernel_params(kernel)`` lists ``(name, is_constexpr)`` for every argument, in order. The
    types are:

    * a ``tl.constexpr`` argument -> ``"constexpr"``;
    * ``shapes_ptr`` and ``starts_ptr`` (int64 tables) -> ``"*i64"``;
    * ``grad_value_ptr`` -> ``"*" + grad_value_dtype`` (the accumulator);
    * every other ``*_ptr`` -> ``"*" + value_dtype`` (value, locations, weights, their grads);
    * every other argument (the runtime sizes Q, S) -> ``"i64"``.

    Args:
        kernel: the backward ``@triton.jit`` kernel.
        value_dtype: "fp32", "fp16" or "bf16".
        grad_value_dtype: the accumulator's dtype, same spellings.

    Returns:
        ``{argument name: type}`` with one entry for every argument of the kernel.
    """
    # TODO(Task 9.4): walk kernel_params(kernel) and apply the rules above (about 12 lines).
    # BEGIN SOLUTION
    signature = {}
    for name, is_constexpr in kernel_params(kernel):
        if is_constexpr:
            signature[name] = "constexpr"
        elif name in INT64_POINTERS:
            signature[name] = "*i64"
        elif name == "grad_value_ptr":
            signature[name] = "*" + grad_value_dtype
        elif name.endswith("_ptr"):
            signature[name] = "*" + value_dtype
        else:
            signature[name] = "i64"
    return signature
    # STARTER
    # raise NotImplementedError("Task 9.4: backward_signature")
    # END SOLUTION


def compile_backward(kernel, value_dtype: str, grad_value_dtype: str, cc: int) -> str:
    """Compile the backward kernel for SM ``cc`` (80 or 90) and return the PTX.

    Args:
        kernel: the backward ``@triton.jit`` kernel.
        value_dtype: "fp32", "fp16" or "bf16".
        grad_value_dtype: the accumulator's dtype.
        cc: compute capability as an int: 80 (A100) or 90 (H100).

    Returns:
        The PTX text of the kernel for that GPU.
    """
    # TODO(Task 9.5): the signature from Task 9.4, a value from AOT_SIZES for each constexpr
    # argument, then compile_ptx(kernel, signature, constexprs, cc) (about 4 lines).
    # BEGIN SOLUTION
    signature = backward_signature(kernel, value_dtype, grad_value_dtype)
    constexprs = {name: AOT_SIZES[name] for name, kind in signature.items() if kind == "constexpr"}
    return compile_ptx(kernel, signature, constexprs, cc)
    # STARTER
    # raise NotImplementedError("Task 9.5: compile_backward")
    # END SOLUTION


def atomic_report(kernel, ccs=(80, 90), value_dtype="bf16", buffers=("bf16", "fp32")) -> dict:
    """The four-way experiment: ``{(cc, grad_value dtype): (verdict, tokens)}``."""
    report = {}
    for cc in ccs:
        for buffer in buffers:
            tokens = find_atomics(compile_backward(kernel, value_dtype, buffer, cc))
            report[(cc, buffer)] = (classify_atomics(tokens), tokens)
    return report


if __name__ == "__main__":
    # Run your functions on one small example and compare them with the student-facing spec
    # (msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not
    # the grade; `nox -s lab09` is.
    os.environ.setdefault("TRITON_INTERPRET", "0")  # lab 09 compiles: no interpreter
    from msda_labs.student.check import run_lab

    run_lab(9, globals())
