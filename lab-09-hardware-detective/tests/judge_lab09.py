"""The judge's own knowledge for lab 09 (test_lab09_hardware.py): its reading of PTX (never the
submission's), the argument types of the lab 08 backward kernel read from the chip's source, and
the hints that say why a detector's answer is wrong. Nothing here runs student code or compiles.
"""

import ast
import importlib.util
import re
from pathlib import Path

import probes_lab09 as probes

HERE = Path(__file__).resolve().parent
BACKWARD = probes.BACKWARD

# The judge's own reading of PTX: never the submission's. It keeps where each atomic is, so that
# the feedback can point at the line of one a detector missed.
_TOKEN = re.compile(r"\b(?:atom|red)\.[\w.:]+")


def atomic_sites(ptx: str) -> list[tuple[int, str]]:
    """Every occurrence of an atom./red. token in ``ptx``: (line number from 1, token), in the
    order of the listing. A token that occurs on many lines is listed at each of them."""
    return [(number, match.group()) for number, line in enumerate(ptx.splitlines(), 1)
            for match in _TOKEN.finditer(line)]


def is_cas(token: str) -> bool:
    """Whether ``token`` is a compare-and-swap (a cas qualifier, in any position)."""
    return "cas" in token.split(".")


# The last qualifier of a native atomic add on each grad_value dtype.
SUFFIX = {"fp32": ("f32",), "fp16": ("f16", "f16x2"), "bf16": ("bf16", "bf16x2")}
BUFFER_AS_VALUE = ("a grad_value buffer compiled with the value's dtype: the atomics are "
                   "exactly those of grad_value_ptr typed with value_dtype; compile with "
                   "backward_signature(kernel, value_dtype, grad_value_dtype), in that order")


def lowers_as(tokens, cc, dtype) -> bool:
    """Whether ``tokens`` are the atomics of a grad_value buffer of ``dtype`` on sm_``cc``: a
    compare-and-swap loop for bf16 before SM 9.0, else native adds on ``dtype`` only."""
    if cc < 90 and dtype == "bf16":
        return any(is_cas(t) for t in tokens)
    return bool(tokens) and not any(is_cas(t) for t in tokens) and all(
        "add" in t.split(".") and t.split(".")[-1] in SUFFIX[dtype] for t in tokens)


def ptx(name: str) -> str:
    """A PTX listing of tests/ptx/ (read when a test needs it, never at import)."""
    return (HERE / "ptx" / name).read_text()


# -- judge-side knowledge of the lab 08 kernel -------------------------------------------------
def backward_params() -> list[tuple[str, bool]]:
    """(name, is_constexpr) of the lab 08 chip's backward kernel, read from its source."""
    spec = importlib.util.find_spec("msda_labs.chips.lab08")
    if spec is None or spec.origin is None:
        raise RuntimeError("this copy of the kit carries no lab 08 chip")
    for node in ast.walk(ast.parse(Path(spec.origin).read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == BACKWARD:
            return [(arg.arg, arg.annotation is not None
                     and ast.unparse(arg.annotation).split(".")[-1] == "constexpr")
                    for arg in node.args.args]
    raise RuntimeError(f"the lab 08 chip defines no {BACKWARD}")


def expected_signature(value_dtype: str, grad_value_dtype: str) -> dict[str, tuple[str, str]]:
    """{argument: (type, why)} of the lab 08 backward kernel, as backward_signature must give."""
    sig = {}
    for name, is_constexpr in backward_params():
        if is_constexpr:
            sig[name] = ("constexpr", "tl.constexpr arguments are typed 'constexpr'")
        elif name in ("shapes_ptr", "starts_ptr"):
            sig[name] = ("*i64", "shapes_ptr and starts_ptr point to int64 tables")
        elif name == "grad_value_ptr":
            sig[name] = ("*" + grad_value_dtype,
                         "grad_value_ptr is the accumulator: it takes grad_value_dtype")
        elif name.endswith("_ptr"):
            sig[name] = ("*" + value_dtype,
                         "data pointers other than grad_value_ptr take value_dtype")
        else:
            sig[name] = ("i64", "the runtime sizes (Q, S) are 'i64'")
    return sig


def detector_hint(res, expected) -> str:
    """Why ``res`` differs from ``expected``, in the words a student can act on."""
    if not isinstance(res, list):
        return "return a list of strings"
    if any(not isinstance(t, str) for t in res):
        return "every token is a str"
    if len(res) != len(set(res)):
        return ("this is a list with repeats: each distinct token once, since the same "
                "instruction appears many times in real PTX")
    if sorted(res) != res:
        return "this is an unsorted list: sort the tokens"
    if any(t.startswith("red.") for t in expected) and not any(t.startswith("red.") for t in res):
        return ("this is a search for atom. only: red. instructions are atomics too, a reduction "
                "is an atomic whose result nobody reads")
    if any(t != e and e.startswith(t) for t in res for e in expected):
        return ("this is a token cut short: a token runs through all its qualifiers, up to the "
                "first space")
    return "a token starts at a word boundary with atom. or red. and runs through its qualifiers"


def check_detector(res, expected, what, sites=()):
    """``res`` (what find_atomics returned) must equal ``expected`` exactly; ``sites`` (the
    judge's :func:`atomic_sites` of the listing) lets the message point at the first line
    of a token the detector missed."""
    if res != expected:
        missed = [(n, t) for n, t in sites if not isinstance(res, list) or t not in res]
        where = f" ({missed[0][1]} is on line {missed[0][0]} of the listing)" if missed else ""
        raise AssertionError(f"{what}: got {res!r:.300}, expected {expected!r}{where}; "
                             f"{detector_hint(res, expected)}")
