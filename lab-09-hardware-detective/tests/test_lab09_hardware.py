"""Grading tests of lab 09 (hardware detective). Run them with `nox -s lab09`.

The submission runs in an "aot" worker: TRITON_INTERPRET=0, the real compiler, no GPU. Every
verdict about PTX is reached here, in the judge, by reading the text the submission returned;
the submission's own detector is only ever the thing under test.
"""

import ast
import importlib.util
import os
import re
from pathlib import Path

import pytest
import torch

from msda_labs.grading import describe_value

LAB = "lab09"
TITLE = "Hardware detective"
MODE = "aot"
TASKS = {
    "9.1": "find_atomics",
    "9.2": "classify_atomics",
    "9.3": "use_fp32_grad_accum",
    "9.4": "backward_signature",
    "9.5": "compile_backward",
}

HERE = Path(__file__).resolve().parent
BACKWARD = "msda_backward_kernel"
# The sizes every compile here uses (the starter's AOT_SIZES): the same variants are then
# compiled once per grading run and served from triton's cache afterwards.
AOT_SIZES = {"M": 2, "D": 8, "L": 2, "K": 2, "BLOCK_Q": 16, "BLOCK_D": 8}

if os.environ.get("TRITON_INTERPRET") == "0":
    # In the aot worker (never in the judge, which does not compile): pay triton's one-off costs
    # once, before the worker forks a child per test.
    from msda_labs.student.ptx import warm_up

    warm_up()

# The judge's own reading of PTX: never the submission's.
_TOKEN = re.compile(r"\b(?:atom|red)\.[\w.:]+")


def _atomics(ptx: str) -> list[str]:
    return sorted(set(_TOKEN.findall(ptx)))


def _is_cas(token: str) -> bool:
    return "cas" in token.split(".")


# -- probes (run inside the isolated worker) ---------------------------------------------------

def _backward_kernel():
    from msda_labs.student.earlier import load

    return load(8, BACKWARD).obj


def _signature_probe(module, value_dtype, grad_value_dtype):
    return module.backward_signature(_backward_kernel(), value_dtype, grad_value_dtype)


def _compile_probe(module, value_dtype, grad_value_dtype, cc):
    return module.compile_backward(_backward_kernel(), value_dtype, grad_value_dtype, cc)


def _live_ptx_probe(module, signature, constexprs, cc):
    """Compile the lab 08 kernel with the judge's signature, then run the submission's detector
    on that PTX; returns both so that the judge can read the PTX itself."""
    from msda_labs.student.ptx import compile_ptx

    ptx = compile_ptx(_backward_kernel(), signature, constexprs, cc)
    return ptx, module.find_atomics(ptx)


def _classify_many(module, lists):
    return [module.classify_atomics(list(tokens)) for tokens in lists]


def _switch_many(module, rows):
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    return [module.use_fp32_grad_accum(dtypes[name], tuple(cap)) for name, cap in rows]


# -- judge-side knowledge of the lab 08 kernel -------------------------------------------------

def _backward_params() -> list[tuple[str, bool]]:
    """(name, is_constexpr) of the lab 08 chip's backward kernel, read from its source."""
    spec = importlib.util.find_spec("msda_labs.chips.lab08")
    if spec is None or spec.origin is None:
        raise RuntimeError("this copy of the kit carries no lab 08 chip")
    tree = ast.parse(Path(spec.origin).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == BACKWARD:
            params = []
            for arg in node.args.args:
                ann = arg.annotation
                name = getattr(ann, "attr", None) or getattr(ann, "id", None)
                params.append((arg.arg, name == "constexpr"))
            return params
    raise RuntimeError(f"the lab 08 chip defines no {BACKWARD}")


def _expected_signature(value_dtype: str, grad_value_dtype: str) -> dict[str, str]:
    sig = {}
    for name, is_constexpr in _backward_params():
        if is_constexpr:
            sig[name] = "constexpr"
        elif name in ("shapes_ptr", "starts_ptr"):
            sig[name] = "*i64"
        elif name == "grad_value_ptr":
            sig[name] = "*" + grad_value_dtype
        elif name.endswith("_ptr"):
            sig[name] = "*" + value_dtype
        else:
            sig[name] = "i64"
    return sig


# -- Task 9.1: find_atomics --------------------------------------------------------------------

SYNTHETIC_PTX = """\
.visible .entry demo(
\t.param .u64 .ptr .global .align 1 demo_param_0
)
{
\t.reg .pred \t%p<4>;
\t.reg .b32 \t%r<12>;
\tld.global.b32 \t%r1, [%rd1];
\tmov.u32 \t%r2, %tid.x;
\t@%p1 atom.global.gpu.relaxed.add.f32 \t%r3, [%rd2], %r1;
\tst.global.b32 \t[%rd3], %r3;
\t@%p2 atom.global.gpu.relaxed.add.f32 \t%r4, [%rd4], %r1;
$L__BB0_2:
\tatom.relaxed.gpu.global.cas.b32 \t%r5, [%rd5], %r6, %r7;
\tsetp.ne.b32 \t%p3, %r5, %r6;
\tmov.b32 \t%r6, %r5;
\t@%p3 bra \t$L__BB0_2;
\tred.global.add.L2::cache_hint.f32 \t[%rd6], %r8, %rd7;
\t@%p1 red.global.add.f32 \t[%rd8], %r9;
\tbar.sync \t0;
\tret;
}
"""
SYNTHETIC_EXPECTED = [
    "atom.global.gpu.relaxed.add.f32",
    "atom.relaxed.gpu.global.cas.b32",
    "red.global.add.L2::cache_hint.f32",
    "red.global.add.f32",
]

QUIET_PTX = """\
.visible .entry copy_kernel(
\t.param .u64 .ptr .global .align 1 copy_kernel_param_0
)
{
\t.reg .pred \t%pred<2>;
\tld.global.v4.b32 \t{%r1, %r2, %r3, %r4}, [%rd1];
\tmax.f32 \t%r5, %r1, %r2;
\tst.global.v4.b32 \t[%rd2], {%r1, %r2, %r3, %r4};
\tret;
}
"""


def _detector_hint(res, expected) -> str:
    if not isinstance(res, list):
        return "return a list of strings"
    if any(not isinstance(t, str) for t in res):
        return "every token is a str"
    if len(res) != len(set(res)):
        return "each distinct token once: the same instruction appears many times in real PTX"
    if sorted(res) != res:
        return "sort the tokens"
    if any(t.startswith("red.") for t in expected) and not any(t.startswith("red.") for t in res):
        return ("red. instructions are atomics too: a reduction is an atomic whose result "
                "nobody reads")
    if any(t != e and e.startswith(t) for t in res for e in expected):
        return "a token runs through all its qualifiers, up to the first space"
    return "a token starts at a word boundary with atom. or red. and runs through its qualifiers"


def _check_detector(res, expected, what):
    if res != expected:
        raise AssertionError(f"{what}: got {res!r:.300}, expected {expected!r}; "
                             f"{_detector_hint(res, expected)}")


@pytest.mark.task("9.1", points=2)
@pytest.mark.rule("atomics")
def test_find_atomics_synthetic_listing(submission):
    res = submission.call("find_atomics", SYNTHETIC_PTX)
    _check_detector(res, SYNTHETIC_EXPECTED,
                    "find_atomics on a listing with a repeated atom.add, a CAS retry loop, two "
                    "red. reductions (one with an L2::cache_hint qualifier) and plain loads/stores")


@pytest.mark.task("9.1", points=1)
def test_find_atomics_none_present(submission):
    res = submission.call("find_atomics", QUIET_PTX)
    _check_detector(res, [], "find_atomics on a listing with loads, stores and arithmetic "
                             "but no atomic")


@pytest.mark.task("9.1", points=1)
@pytest.mark.parametrize("name,expected", [
    ("scatter_add_bf16_sm80.ptx", ["atom.relaxed.gpu.global.cas.b32"]),
    ("counted_scatter_sm90.ptx", ["atom.global.gpu.acq_rel.add.f32",
                                  "red.global.gpu.relaxed.add.noftz.f16"]),
], ids=["bf16-scatter-sm80", "mixed-sm90"])
def test_find_atomics_real_ptx(submission, name, expected):
    ptx = (HERE / "ptx" / name).read_text()
    res = submission.call("find_atomics", ptx)
    _check_detector(res, expected, f"find_atomics on tests/ptx/{name} (a real compiled kernel)")


@pytest.mark.task("9.1", points=1)
@pytest.mark.rule("atomics")
def test_find_atomics_on_the_backward_kernel(submission):
    signature = _expected_signature("bf16", "bf16")
    constexprs = {n: AOT_SIZES[n] for n, kind in signature.items() if kind == "constexpr"}
    ptx, res = submission.run(_live_ptx_probe, signature, constexprs, 90)
    _check_detector(res, _atomics(ptx), "find_atomics on the lab 08 backward kernel compiled for "
                                        "sm_90 with a bf16 grad_value buffer")


# -- Task 9.2: classify_atomics ----------------------------------------------------------------

def _check_classes(submission, lists, expected, what, why):
    res = submission.run(_classify_many, lists)
    for tokens, got in zip(lists, res):
        if got != expected:
            raise AssertionError(f"classify_atomics({tokens}) returned {got!r}, expected "
                                 f"{expected!r}; {why}")


@pytest.mark.task("9.2", points=2)
@pytest.mark.rule("atomics")
def test_classify_compare_and_swap_in_any_spelling(submission):
    lists = [
        ["atom.relaxed.gpu.global.cas.b32"],
        ["atom.global.cas.b32"],
        ["atom.global.gpu.acq_rel.cas.b16"],
        ["atom.global.gpu.relaxed.add.f32", "atom.sys.global.relaxed.cas.b32"],
    ]
    _check_classes(submission, lists, "emulated", "CAS emulation",
                   "any token with a cas qualifier means a compare-and-swap retry loop, whatever "
                   "the order of the other qualifiers (it changes between compiler versions)")


@pytest.mark.task("9.2", points=1)
@pytest.mark.rule("atomics")
def test_classify_native_adds(submission):
    lists = [
        ["atom.global.gpu.relaxed.add.f32"],
        ["red.global.gpu.relaxed.add.noftz.bf16"],
        ["atom.global.gpu.acq_rel.add.noftz.f16x2", "red.global.add.v4.f32"],
    ]
    _check_classes(submission, lists, "native", "native",
                   "an atom.add returns the old value and a red.add does not, but both are one "
                   "hardware instruction: native")


@pytest.mark.task("9.2", points=1)
def test_classify_no_atomics(submission):
    _check_classes(submission, [[]], "none", "none", "an empty list means the kernel does no "
                                                     "atomic at all")


# -- Task 9.3: use_fp32_grad_accum -------------------------------------------------------------

SWITCH_ROWS = [
    ("bf16", (8, 0), True, "A100: no bf16 atomic add before SM 9.0, it is a CAS loop"),
    ("bf16", (8, 6), True, "SM 8.6 is pre-Hopper: bf16 atomics are CAS loops"),
    ("bf16", (8, 9), True, "SM 8.9 (Ada) is still major 8: the rule sends it to fp32"),
    ("bf16", (7, 5), True, "SM 7.5 has no bf16 atomic add either"),
    ("bf16", (9, 0), False, "SM 9.0 (Hopper) adds a native bf16 atomic add"),
    ("bf16", (10, 0), False, "SM 10.0 has native bf16 atomics"),
    ("bf16", (12, 0), False, "SM 12.0 has native bf16 atomics"),
    ("fp16", (8, 0), False, "fp16 atomic add is native since SM 6.0; an fp32 buffer only adds "
                            "traffic"),
    ("fp16", (7, 0), False, "fp16 atomic add is native since SM 6.0"),
    ("fp16", (9, 0), False, "fp16 atomic add is native"),
    ("fp32", (8, 0), False, "fp32 is already fp32"),
    ("fp32", (9, 0), False, "fp32 is already fp32"),
]


@pytest.mark.task("9.3", points=3)
@pytest.mark.rule("accumulator-switch")
def test_switch_truth_table(submission):
    rows = [(name, cap) for name, cap, _, _ in SWITCH_ROWS]
    res = submission.run(_switch_many, rows)
    for (name, cap, expected, why), got in zip(SWITCH_ROWS, res):
        if not isinstance(got, (bool, int)) or bool(got) != expected:
            raise AssertionError(f"use_fp32_grad_accum({name}, {cap}) returned "
                                 f"{describe_value(got)}, expected {expected}: {why}")


@pytest.mark.task("9.3", points=1)
def test_switch_returns_real_bools(submission):
    rows = [("bf16", (8, 0)), ("bf16", (9, 0)), ("fp16", (8, 0))]
    res = submission.run(_switch_many, rows)
    for (name, cap), got in zip(rows, res):
        if type(got) is not bool:
            raise AssertionError(f"use_fp32_grad_accum({name}, {cap}) returned "
                                 f"{describe_value(got)}: return True or False (a bool), not an "
                                 f"int, a tensor or None; callers test it with `is True`")


# -- Task 9.4: backward_signature --------------------------------------------------------------

_SIG_HINTS = {
    "constexpr": "tl.constexpr arguments are typed 'constexpr'",
    "*i64": "shapes_ptr and starts_ptr point to int64 tables",
    "i64": "the runtime sizes (Q, S) are 'i64'",
}


@pytest.mark.task("9.4", points=1)
@pytest.mark.parametrize("value_dtype,grad_value_dtype",
                         [("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp16"), ("fp32", "fp32")],
                         ids=["bf16", "bf16-fp32-buffer", "fp16", "fp32"])
@pytest.mark.rule("accumulator-switch")
def test_backward_signature(submission, value_dtype, grad_value_dtype):
    expected = _expected_signature(value_dtype, grad_value_dtype)
    res = submission.run(_signature_probe, value_dtype, grad_value_dtype)
    what = f"backward_signature(kernel, {value_dtype!r}, {grad_value_dtype!r})"
    if not isinstance(res, dict):
        raise AssertionError(f"{what}: expected a dict, got {describe_value(res)}")
    missing = [k for k in expected if k not in res]
    extra = [k for k in res if k not in expected]
    if missing or extra:
        raise AssertionError(f"{what}: the keys must be the kernel's argument names; missing "
                             f"{missing}, unexpected {extra}")
    for name, want in expected.items():
        got = res[name]
        if got != want:
            if name == "grad_value_ptr":
                hint = "grad_value_ptr is the accumulator: it takes grad_value_dtype"
            elif want.startswith("*") and want != "*i64":
                hint = "data pointers other than grad_value_ptr take value_dtype"
            else:
                hint = _SIG_HINTS.get(want, "")
            raise AssertionError(f"{what}: {name} is typed {got!r}, expected {want!r}; {hint}")


# -- Task 9.5: compile_backward ----------------------------------------------------------------

_SUFFIX = {"fp32": ("f32",), "fp16": ("f16", "f16x2"), "bf16": ("bf16", "bf16x2")}


@pytest.mark.task("9.5", points=1)
@pytest.mark.parametrize("cc,value_dtype,buffer", [
    (80, "bf16", "bf16"), (90, "bf16", "bf16"), (80, "bf16", "fp32"), (90, "bf16", "fp32"),
    (80, "fp16", "fp16"),
], ids=["sm80-bf16", "sm90-bf16", "sm80-bf16-fp32acc", "sm90-bf16-fp32acc", "sm80-fp16"])
@pytest.mark.rule("atomics", "accumulator-switch")
def test_compile_backward_lowering(submission, cc, value_dtype, buffer):
    what = (f"compile_backward(kernel, {value_dtype!r}, {buffer!r}, {cc}) ({value_dtype} values, "
            f"{buffer} grad_value buffer, sm_{cc})")
    ptx = submission.run(_compile_probe, value_dtype, buffer, cc)
    if not isinstance(ptx, str):
        raise AssertionError(f"{what}: expected the PTX text (a str), got {describe_value(ptx)}")
    target = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, flags=re.M)
    if target is None or not re.fullmatch(rf"sm_{cc}a?", target.group(1)):
        found = target.group(1) if target else "no .target line"
        raise AssertionError(f"{what}: the PTX targets {found}, expected sm_{cc}; pass cc to "
                             f"compile_ptx")
    if not re.search(rf"\.entry\s+{BACKWARD}\b", ptx):
        raise AssertionError(f"{what}: the PTX holds no .entry {BACKWARD}: compile the kernel "
                             f"you are given")
    tokens = _atomics(ptx)
    if not tokens:
        raise AssertionError(f"{what}: the PTX holds no atomic instruction at all")
    if cc < 90 and buffer == "bf16":
        if not any(_is_cas(t) for t in tokens):
            raise AssertionError(f"{what}: expected a compare-and-swap loop (no bf16 atomic add "
                                 f"before SM 9.0), found {tokens}; is grad_value_ptr typed "
                                 f"'*bf16'?")
        return
    if any(_is_cas(t) for t in tokens):
        raise AssertionError(f"{what}: expected native {buffer} atomic adds, found a "
                             f"compare-and-swap loop {tokens}; is grad_value_ptr typed "
                             f"'*{buffer}' and the target sm_{cc}?")
    adds = [t for t in tokens if "add" in t.split(".") and t.split(".")[-1] in _SUFFIX[buffer]]
    if not adds:
        raise AssertionError(f"{what}: expected native atomic adds on {buffer} "
                             f"(...add...{_SUFFIX[buffer][0]}), found {tokens}; is "
                             f"grad_value_ptr typed '*{buffer}'?")
