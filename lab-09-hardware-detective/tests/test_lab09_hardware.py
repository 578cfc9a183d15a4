"""Grading tests of lab 09 (hardware detective). Run them with `nox -s lab09`.

The submission runs in an "aot" worker: TRITON_INTERPRET=0, the real compiler, no GPU. Every
verdict about PTX is reached here, in the judge, by reading the text the submission returned;
the submission's own detector is only ever the thing under test. The probes (probes_lab09.py)
call the submission in the isolated child; the judge's reading of PTX and of the lab 08 kernel is
judge_lab09.py; the PTX listings the tests hand over are files in tests/ptx/.
"""

import re

import judge_lab09 as judge
import probes_lab09 as probes
import pytest

from msda_labs.grading import describe_value
from msda_labs.grading.judge.compare import Mismatch, answers_mismatch
from msda_labs.grading.judge.results import Evidence
from msda_labs.grading.judge.rules import watch_untouched
from msda_labs.grading.judge.submission import SubmissionError
from msda_labs.mistakes.plumbing import CLASSIFY, SIGNATURE, SWITCH, answers_of

TASKS = {
    "9.1": "find_atomics",
    "9.2": "classify_atomics",
    "9.3": "use_fp32_grad_accum",
    "9.4": "backward_signature",
    "9.5": "compile_backward",
}

BACKWARD = probes.BACKWARD
# The sizes every compile here uses (the starter's AOT_SIZES): the same variants are then
# compiled once per grading run and served from triton's cache afterwards.
AOT_SIZES = {"M": 2, "D": 8, "L": 2, "K": 2, "BLOCK_Q": 16, "BLOCK_D": 8}

# -- Task 9.1: find_atomics --------------------------------------------------------------------
SYNTHETIC_EXPECTED = ["atom.global.gpu.relaxed.add.f32", "atom.relaxed.gpu.global.cas.b32",
                      "red.global.add.L2::cache_hint.f32", "red.global.add.f32"]


@pytest.mark.task("9.1", points=2)
@pytest.mark.rule("atomics")
def test_find_atomics_synthetic_listing(submission):
    listing = judge.ptx("synthetic_mixed.ptx")
    res = submission.call("find_atomics", listing)
    judge.check_detector(res, SYNTHETIC_EXPECTED,
                         "find_atomics on a listing with a repeated atom.add, a CAS retry loop, "
                         "two red. reductions (one with an L2::cache_hint qualifier) and plain "
                         "loads/stores", judge.atomic_sites(listing))


@pytest.mark.task("9.1", points=1)
def test_find_atomics_none_present(submission):
    res = submission.call("find_atomics", judge.ptx("no_atomics.ptx"))
    judge.check_detector(res, [], "find_atomics on a listing with loads, stores and "
                                  "arithmetic but no atomic")
    # Finding none earns its point only from a detector that finds some where there are some
    # (an answer that is always [] is right here and nowhere else).
    listing = judge.ptx("scatter_add_bf16_sm80.ptx")
    res = submission.call("find_atomics", listing)
    judge.check_detector(res, ["atom.relaxed.gpu.global.cas.b32"],
                         "find_atomics on a real listing with a CAS loop, after the listing "
                         "without atomics", judge.atomic_sites(listing))


@pytest.mark.task("9.1", points=1)
@pytest.mark.parametrize("name,expected", [
    ("scatter_add_bf16_sm80.ptx", ["atom.relaxed.gpu.global.cas.b32"]),
    ("counted_scatter_sm90.ptx", ["atom.global.gpu.acq_rel.add.f32",
                                  "red.global.gpu.relaxed.add.noftz.f16"]),
], ids=["bf16-scatter-sm80", "mixed-sm90"])
def test_find_atomics_real_ptx(submission, name, expected):
    listing = judge.ptx(name)
    res = submission.call("find_atomics", listing)
    judge.check_detector(res, expected,
                         f"find_atomics on tests/ptx/{name} (a real compiled kernel)",
                         judge.atomic_sites(listing))


@pytest.mark.task("9.1", points=1)
@pytest.mark.rule("atomics")
def test_find_atomics_on_the_backward_kernel(submission):
    expected = judge.expected_signature("bf16", "bf16")
    signature = {name: kind for name, (kind, _why) in expected.items()}
    constexprs = {n: AOT_SIZES[n] for n, kind in signature.items() if kind == "constexpr"}
    ptx, res = submission.run(probes.live_ptx_probe, signature, constexprs, 90)
    sites = judge.atomic_sites(ptx) if isinstance(ptx, str) else []
    # The listing is compiled in your process: the judge holds it to what the compiler makes of
    # this kernel (its entry, the sm_90 target, atomic adds), so an empty or made-up text that
    # agrees with its own answer earns nothing.
    if not isinstance(ptx, str) or not re.search(rf"\.entry\s+{BACKWARD}\b", ptx) \
            or not re.search(r"^\s*\.target\s+sm_90a?\b", ptx, flags=re.M) \
            or not sites:
        raise AssertionError("the lab 08 backward kernel compiled for sm_90 came back without "
                             "its .entry, its sm_90 target or any atomic: the compilation in "
                             "your process was changed")
    judge.check_detector(res, sorted({token for _, token in sites}),
                         "find_atomics on the lab 08 backward kernel compiled for sm_90 with a "
                         "bf16 grad_value buffer", sites)
    # The listing is compiled in your process: it is believed only where the judge reads in
    # your source that nothing there can replace the compiler or what it is given.
    # Reading Triton's compiler is part of this lab's work (a write to it is still named).
    watch_untouched(submission.source, "the live listing of the lab 08 backward kernel",
                    allow=("triton.compiler", "triton.backends", "triton.runtime"))


# -- Task 9.2: classify_atomics ----------------------------------------------------------------
# One plain list of each class: every test also classifies those of the other two classes, so
# that an answer that is always the same class earns nothing.
_OF_CLASS = {"emulated": ["atom.global.cas.b32"], "native": ["atom.global.gpu.relaxed.add.f32"],
             "none": []}


def _check_classes(submission, lists, expected, why):
    others = [(tokens, cls) for cls, tokens in _OF_CLASS.items() if cls != expected]
    asked = lists + [tokens for tokens, _ in others]
    res = submission.run(probes.classify_many, asked)
    right = [expected] * len(lists) + [cls for _, cls in others]
    # A mistake is named only when its answers equal yours on every list of this test.
    variants = answers_of(CLASSIFY, [(list(tokens), cls) for tokens, cls in zip(asked, right)])
    for tokens, got in zip(lists, res):
        if got != expected:
            raise answers_mismatch(f"classify_atomics({tokens}) returned {got!r}, expected "
                                   f"{expected!r}; {why}", list(res), right, variants,
                                   function="classify_atomics")
    for (tokens, cls), got in zip(others, res[len(lists):]):
        if got != cls:
            raise answers_mismatch(f"classify_atomics({tokens}) returned {got!r}, expected "
                                   f"{cls!r} (each test also classifies one list of each other "
                                   f"class)", list(res), right, variants,
                                   function="classify_atomics")


@pytest.mark.task("9.2", points=2)
@pytest.mark.rule("atomics")
def test_classify_compare_and_swap_in_any_spelling(submission):
    lists = [
        ["atom.relaxed.gpu.global.cas.b32"],
        ["atom.global.cas.b32"],
        ["atom.global.gpu.acq_rel.cas.b16"],
        ["atom.global.gpu.relaxed.add.f32", "atom.sys.global.relaxed.cas.b32"],
    ]
    _check_classes(submission, lists, "emulated",
                   "any token with a cas qualifier means a compare-and-swap retry loop, whatever "
                   "the order of the other qualifiers (it changes between compiler versions)")


@pytest.mark.task("9.2", points=1)
@pytest.mark.rule("atomics")
def test_classify_native_adds(submission):
    lists = [
        ["atom.global.gpu.relaxed.add.f32"],
        ["red.global.gpu.relaxed.add.noftz.bf16"],
        ["atom.global.gpu.acq_rel.add.noftz.f16x2", "red.global.add.v4.f32"],
        ["red.global.gpu.relaxed.add.multicast::cluster.f32"],
    ]
    _check_classes(submission, lists, "native",
                   "an atom.add returns the old value and a red.add does not, but both are one "
                   "hardware instruction: native (and 'cas' inside another word, as in "
                   "multicast, is no cas qualifier: compare whole dot-separated parts)")


@pytest.mark.task("9.2", points=1)
def test_classify_no_atomics(submission):
    _check_classes(submission, [[]], "none", "an empty list means the kernel does no atomic at all")


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


def _switch_answers(res) -> list:
    """Your answers as the catalogue writes them: a bool, ("tensor", its truth) for a tensor of
    one element, or what else came."""
    out = []
    for got in res:
        if isinstance(got, (bool, int)):
            out.append(bool(got))
        elif getattr(got, "numel", lambda: 0)() == 1 and str(getattr(got, "dtype", "")) \
                == "torch.bool":
            out.append(("tensor", bool(got)))
        else:
            out.append(describe_value(got))
    return out


def _switch_mismatch(message, res, rows) -> AssertionError:
    """``message`` with what your answers on ``rows`` ((dtype, capability, right)) rule in."""
    variants = answers_of(SWITCH, rows)
    return answers_mismatch(message, _switch_answers(res), [want for _, _, want in rows],
                            variants, function="use_fp32_grad_accum")


@pytest.mark.task("9.3", points=3)
@pytest.mark.rule("accumulator-switch")
def test_switch_truth_table(submission):
    rows = [(name, cap) for name, cap, _, _ in SWITCH_ROWS]
    res = submission.run(probes.switch_many, rows)
    for (name, cap, expected, why), got in zip(SWITCH_ROWS, res):
        if not isinstance(got, (bool, int)) or bool(got) != expected:
            raise _switch_mismatch(f"use_fp32_grad_accum({name}, {cap}) returned "
                                   f"{describe_value(got)}, expected {expected}: {why}", res,
                                   [(n, c, want) for n, c, want, _ in SWITCH_ROWS])


@pytest.mark.task("9.3", points=1)
def test_switch_returns_real_bools(submission):
    rows = [("bf16", (8, 0)), ("bf16", (9, 0)), ("fp16", (8, 0))]
    res = submission.run(probes.switch_many, rows)
    asked = [(name, cap, want) for (name, cap), want in zip(rows, (True, False, False))]
    for (name, cap), got in zip(rows, res):
        if type(got) is not bool:
            raise _switch_mismatch(f"use_fp32_grad_accum({name}, {cap}) returned "
                                   f"{describe_value(got)}: return True or False (a bool), not "
                                   f"an int, a tensor or None; callers test it with `is True`",
                                   res, asked)
    # The type earns its point only with the right answers (True, False, False here): a
    # constant bool is a bool, but no switch.
    for (name, cap), got, want in zip(rows, res, (True, False, False)):
        if got is not want:
            raise _switch_mismatch(f"use_fp32_grad_accum({name}, {cap}) returned the bool "
                                   f"{got}, expected {want}: a real bool, but the wrong one",
                                   res, asked)


# -- Task 9.4: backward_signature --------------------------------------------------------------
@pytest.mark.task("9.4", points=1)
@pytest.mark.parametrize("value_dtype,grad_value_dtype",
                         [("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp16"), ("fp32", "fp32")],
                         ids=["bf16", "bf16-fp32-buffer", "fp16", "fp32"])
@pytest.mark.rule("accumulator-switch")
def test_backward_signature(submission, value_dtype, grad_value_dtype):
    expected = judge.expected_signature(value_dtype, grad_value_dtype)
    res = submission.run(probes.signature_probe, value_dtype, grad_value_dtype)
    what = f"backward_signature(kernel, {value_dtype!r}, {grad_value_dtype!r})"
    if not isinstance(res, dict):
        raise AssertionError(f"{what}: expected a dict, got {describe_value(res)}")
    missing = [k for k in expected if k not in res]
    extra = [k for k in res if k not in expected]
    if missing or extra:
        raise AssertionError(f"{what}: the keys must be the kernel's argument names; missing "
                             f"{missing}, unexpected {extra}")
    right = {name: want for name, (want, _why) in expected.items()}
    # A mistake is named only when the whole signature is what it gives for these dtypes.
    variants = answers_of(SIGNATURE, [(judge.backward_params(), value_dtype, grad_value_dtype)])
    for name, (want, why) in expected.items():
        if res[name] != want:
            raise answers_mismatch(f"{what}: {name} is typed {res[name]!r}, expected {want!r}; "
                                   f"{why}", [dict(res)], [right], variants,
                                   function="backward_signature")


# -- Task 9.5: compile_backward ----------------------------------------------------------------
_SUFFIX = judge.SUFFIX


@pytest.mark.task("9.5", points=1)
@pytest.mark.parametrize("cc,value_dtype,buffer", [
    (80, "bf16", "bf16"), (90, "bf16", "bf16"), (80, "bf16", "fp32"), (90, "bf16", "fp32"),
    (80, "fp16", "fp16"),
], ids=["sm80-bf16", "sm90-bf16", "sm80-bf16-fp32acc", "sm90-bf16-fp32acc", "sm80-fp16"])
@pytest.mark.rule("atomics", "accumulator-switch")
def test_compile_backward_lowering(submission, cc, value_dtype, buffer):
    what = (f"compile_backward(kernel, {value_dtype!r}, {buffer!r}, {cc}) ({value_dtype} values, "
            f"{buffer} grad_value buffer, sm_{cc})")
    try:
        _check_lowering(submission.run(probes.compile_probe, value_dtype, buffer, cc), what, cc,
                        buffer, value_dtype)
    except (AssertionError, SubmissionError) as own:
        # Task 9.5 apart from Task 9.4: compiled again with the grader's stand-in in place of
        # your backward_signature; the test passes when that run lowers right, so a wrong
        # signature (one that fails to compile, too) costs Task 9.4 only. Otherwise the feedback
        # is your own run's.
        try:
            _check_lowering(submission.run(probes.compile_probe_stand_in, value_dtype, buffer, cc),
                            what, cc, buffer, value_dtype)
        except (AssertionError, SubmissionError):
            raise own from None


def _wrong_lowering(message, tokens, cc, value_dtype, buffer) -> AssertionError:
    """``message``, naming the buffer typed with value_dtype when the atomics are exactly that
    buffer's (and cannot be the right buffer's)."""
    if buffer != value_dtype and judge.lowers_as(tokens, cc, value_dtype) \
            and not judge.lowers_as(tokens, cc, buffer):
        return Mismatch(f"{message}; this is {judge.BUFFER_AS_VALUE}",
                        Evidence(function="compile_backward", named=judge.BUFFER_AS_VALUE,
                                 matched=[judge.BUFFER_AS_VALUE]))
    return AssertionError(message)


def _check_lowering(ptx, what, cc, buffer, value_dtype):
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
    tokens = sorted({token for _, token in judge.atomic_sites(ptx)})
    if not tokens:
        raise AssertionError(f"{what}: the PTX holds no atomic instruction at all")
    if cc < 90 and buffer == "bf16":
        if not any(judge.is_cas(t) for t in tokens):
            raise _wrong_lowering(f"{what}: expected a compare-and-swap loop (no bf16 atomic add "
                                  f"before SM 9.0), found {tokens}; is grad_value_ptr typed "
                                  f"'*bf16'?", tokens, cc, value_dtype, buffer)
        return
    if any(judge.is_cas(t) for t in tokens):
        raise _wrong_lowering(f"{what}: expected native {buffer} atomic adds, found a "
                              f"compare-and-swap loop {tokens}; is grad_value_ptr typed "
                              f"'*{buffer}' and the target sm_{cc}?", tokens, cc, value_dtype,
                              buffer)
    adds = [t for t in tokens if "add" in t.split(".") and t.split(".")[-1] in _SUFFIX[buffer]]
    if not adds:
        raise _wrong_lowering(f"{what}: expected native atomic adds on {buffer} "
                              f"(...add...{_SUFFIX[buffer][0]}), found {tokens}; is "
                              f"grad_value_ptr typed '*{buffer}'?", tokens, cc, value_dtype,
                              buffer)
