"""Ahead-of-time compilation of Triton kernels for a named GPU, without a GPU (lab 09).

Triton can lower a ``@triton.jit`` kernel all the way to PTX for any NVIDIA target on a machine
that has no GPU at all: the pip wheel carries the compiler and ``ptxas``. What it needs is the
kernel's *signature* (a type for every argument: ``"*bf16"`` for a pointer to bfloat16, ``"i64"``
for a runtime integer, ``"constexpr"`` for a compile-time constant), the values of the constexprs,
and a target such as ``GPUTarget("cuda", 80, 32)`` (SM 8.0, warps of 32 threads).

The process must have ``TRITON_INTERPRET=0`` (or unset) when triton is first imported: under the
interpreter ``@triton.jit`` builds a function that can only be interpreted, never compiled.

The compile API moved between triton releases (how constexprs are keyed, whether the signature
lists them); :func:`compile_ptx` hides that for triton 3.5 and newer. Results are cached in this
process (and triton keeps its own on-disk cache), so compiling the same variant twice is free.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from msda_labs.student import runtime  # noqa: F401 - pins TRITON_DEFAULT_FP_FUSION before triton loads

__all__ = [
    "AOTError",
    "jit_function",
    "kernel_params",
    "compile_ptx",
    "ptx_target",
    "parse_cc",
    "warm_up",
]

DTYPES = ("fp32", "fp16", "bf16", "fp64", "i64", "i32", "i16", "i8", "u8", "i1")

_CACHE: dict[tuple, str] = {}


class AOTError(RuntimeError):
    """The kernel cannot be compiled ahead of time in this process (or the request is malformed)."""


def _check_not_interpreted() -> None:
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise AOTError("ahead-of-time compilation needs the real compiler, but this process runs "
                       "Triton's interpreter (TRITON_INTERPRET=1); start Python with "
                       "TRITON_INTERPRET=0 before triton is imported")


def jit_function(kernel: Any):
    """The plain ``@triton.jit`` function under any wrappers (``@triton.autotune``,
    ``@triton.heuristics``), which keep it in their ``.fn`` attribute."""
    _check_not_interpreted()
    from triton.runtime.jit import JITFunction

    fn, seen = kernel, 0
    while not isinstance(fn, JITFunction):
        inner = getattr(fn, "fn", None)
        if inner is None or seen > 8:
            kind = type(kernel).__name__
            hint = " (it was created under TRITON_INTERPRET=1)" \
                if kind == "InterpretedFunction" else ""
            raise AOTError(f"{kind} is not a @triton.jit kernel{hint}")
        fn, seen = inner, seen + 1
    return fn


def kernel_params(kernel: Any) -> list[tuple[str, bool]]:
    """``[(argument name, is_constexpr), ...]`` of a jitted kernel, in declaration order."""
    fn = jit_function(kernel)
    params = getattr(fn, "params", None)
    if params:
        return [(p.name, bool(p.is_constexpr)) for p in params]
    constexprs = set(getattr(fn, "constexprs", ()) or ())  # pragma: no cover - older triton
    return [(name, i in constexprs) for i, name in enumerate(fn.arg_names)]


def parse_cc(cc: Any) -> int:
    """80, (8, 0), "8.0", "sm_80" and "80" all mean SM 8.0 -> 80."""
    if isinstance(cc, bool):
        raise AOTError(f"not a compute capability: {cc!r}")
    if isinstance(cc, int):
        return cc
    if isinstance(cc, (tuple, list)) and len(cc) == 2:
        return int(cc[0]) * 10 + int(cc[1])
    text = str(cc).strip().lower().removeprefix("sm_").removeprefix("sm")
    if re.fullmatch(r"\d+\.\d", text):
        major, minor = text.split(".")
        return int(major) * 10 + int(minor)
    if re.fullmatch(r"\d+a?", text):
        return int(text.rstrip("a"))
    raise AOTError(f"not a compute capability: {cc!r} (use e.g. 80 or (8, 0))")


def _check_signature(fn, signature: Mapping[str, str], constexprs: Mapping[str, Any]) -> None:
    names = list(fn.arg_names)
    unknown = [k for k in list(signature) + list(constexprs) if k not in names]
    if unknown:
        raise AOTError(f"{fn.__name__} has no argument(s) {unknown}; its arguments are {names}")
    params = dict(kernel_params(fn))
    missing = [n for n in names if n not in signature and not (params[n] and n in constexprs)]
    if missing:
        raise AOTError(f"the signature gives no type for {missing}")
    for name, kind in signature.items():
        if params[name]:
            if kind != "constexpr":
                raise AOTError(f"{name} is a tl.constexpr: its signature entry must be "
                               f"'constexpr', not {kind!r}")
            if name not in constexprs:
                raise AOTError(f"{name} is a tl.constexpr but no value is given for it")
        elif not isinstance(kind, str) or kind.lstrip("*") not in DTYPES:
            raise AOTError(f"{name}: {kind!r} is not a triton type (e.g. '*fp32', '*bf16', "
                           f"'*i64', 'i64', 'i32')")


def _sources(fn, signature: dict, constexprs: dict):
    """ASTSource objects to try, newest calling convention first."""
    from triton.compiler import ASTSource

    index = {name: i for i, name in enumerate(fn.arg_names)}
    full = {name: signature.get(name, "constexpr") for name in fn.arg_names}
    yield lambda: ASTSource(fn, full, constexprs)  # 3.3+: names, constexprs in the signature
    yield lambda: ASTSource(fn, full, {(index[k],): v for k, v in constexprs.items()})
    runtime_only = {name: kind for name, kind in full.items() if kind != "constexpr"}
    yield lambda: ASTSource(fn, {index[k]: v for k, v in runtime_only.items()},  # pre-3.2
                            {index[k]: v for k, v in constexprs.items()})


def compile_ptx(kernel: Any, signature: Mapping[str, str], constexprs: Mapping[str, Any],
                cc: Any, num_warps: int = 4) -> str:
    """Compile ``kernel`` for NVIDIA SM ``cc`` without a GPU and return its PTX.

    Args:
        kernel: a ``@triton.jit`` function (autotune/heuristics wrappers are unwrapped).
        signature: ``{argument name: type}`` for every argument: ``"*fp32"``/``"*fp16"``/
            ``"*bf16"``/``"*i64"`` for pointers, ``"i64"``/``"i32"`` for runtime integers,
            ``"constexpr"`` for ``tl.constexpr`` arguments.
        constexprs: ``{name: value}`` for every constexpr argument.
        cc: the compute capability: 80 or (8, 0) for A100, 90 for H100/H200.
        num_warps: warps per program, as a launch would pass it.

    Returns:
        The PTX text (``.version``, ``.target sm_XX``, ``.entry <kernel name>``...).

    Raises:
        AOTError: the process runs the interpreter, or the signature does not fit the kernel.
    """
    fn = jit_function(kernel)
    target_cc = parse_cc(cc)
    signature, constexprs = dict(signature), dict(constexprs)
    _check_signature(fn, signature, constexprs)
    key = (id(fn), fn.cache_key if hasattr(fn, "cache_key") else fn.__name__,
           tuple(sorted(signature.items())), tuple(sorted((k, repr(v)) for k, v in
                                                          constexprs.items())),
           target_cc, int(num_warps))
    if key in _CACHE:
        return _CACHE[key]
    import triton
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", target_cc, 32)
    errors = []
    for make in _sources(fn, signature, constexprs):
        try:
            src = make()
        except (TypeError, AssertionError, KeyError, ValueError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        try:
            compiled = triton.compile(src, target=target, options={"num_warps": int(num_warps)})
        except (TypeError, AssertionError, KeyError) as exc:
            # A calling convention this triton does not speak: try the next one.
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        ptx = compiled.asm["ptx"]
        if isinstance(ptx, bytes):  # pragma: no cover - some releases keep bytes
            ptx = ptx.decode()
        _CACHE[key] = ptx
        return ptx
    raise AOTError(f"triton {triton.__version__} could not compile {fn.__name__} for sm_"
                   f"{target_cc}: " + " | ".join(errors))


def warm_up() -> None:
    """Pay triton's once-per-process compile costs now: hashing its own compiler (about 1 s, for
    the cache key) and loading the NVIDIA backend. A worker that forks children calls this first,
    so that every child compiles (or hits triton's on-disk cache) at once. Best effort: a triton
    that keeps these elsewhere is simply not warmed."""
    _check_not_interpreted()
    for where in ("triton.runtime.cache", "triton.compiler.compiler"):
        try:
            module = __import__(where, fromlist=["triton_key"])
            module.triton_key()
            break
        except (ImportError, AttributeError):
            continue
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend

        make_backend(GPUTarget("cuda", 80, 32))
    except Exception:  # noqa: BLE001 - warming is an optimisation only
        pass


def ptx_target(ptx: str) -> str | None:
    """The ``.target`` of a PTX text, e.g. ``"sm_80"`` or ``"sm_90a"`` (None when absent)."""
    match = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, flags=re.M)
    return match.group(1) if match else None
