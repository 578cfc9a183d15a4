"""The matchers that name a mistake from plain answers and from what a launch left behind never
name one on right work.

A mistake is named only when the evidence rules out the alternatives: its answers equal the
submission's on every question of a test and differ from the right ones
(:func:`compare.answers_mismatch`, with the catalogues of :mod:`msda_labs.mistakes.plumbing`),
a gradient sits at another input's position (lab 10), whole query blocks are right and the rest
was never written (lab 06), the atomics are those of a buffer typed with the value's dtype
(lab 09). Each property feeds right answers (generated) and checks that nothing is named.
"""

from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit import load_file_module

from msda_labs.grading.judge.compare import answers_mismatch
from msda_labs.grading.judge.peaked import (
    NEAR_FP16_ACC,
    fp16_corner_sum,
    fp16_running_sum,
    peaked_inputs,
)
from msda_labs.mistakes.plumbing import CLASSIFY, FLAG, SIGNATURE, SWITCH, answers_of
from msda_labs.student.cases import tolerance
from msda_labs.truth.reference import msda_reference

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = dict(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def _judge(lab_folder: str, name: str):
    return load_file_module(ROOT / lab_folder / "tests" / f"{name}.py", f"_differential_{name}",
                            beside=True)


@pytest.fixture(scope="module")
def lab09():
    return _judge("lab-09-hardware-detective", "judge_lab09")


@pytest.fixture(scope="module")
def lab10():
    return _judge("lab-10-ship-it", "judge_lab10")


@pytest.fixture(scope="module")
def lab06():
    return _judge("lab-06-make-it-fast", "judge_lab06")


# -- answers_mismatch ----------------------------------------------------------------------------
def test_answers_mismatch_names_the_one_wrong_match():
    right = [True, False, False]
    variants = {"a": ([True, True, False], "a: one"), "b": ([False, False, False], "b: two"),
                "same": (list(right), "same: right everywhere")}
    assert answers_mismatch("m", [True, True, False], right, variants).evidence.named == "a: one"
    assert answers_mismatch("m", [False, True, True], right, variants).evidence.named == ""
    assert answers_mismatch("m", list(right), right, variants).evidence.named == ""
    twins = {**variants, "a2": ([True, True, False], "a2: the same answers as a")}
    found = answers_mismatch("m", [True, True, False], right, twins).evidence
    assert found.named == "" and found.matched == ["a: one", "a2: the same answers as a"]


answers = st.lists(st.sampled_from([True, False, "native", "emulated", None]), min_size=1,
                   max_size=6)


@settings(max_examples=200, **SETTINGS)
@given(right=answers, others=st.lists(answers, max_size=5), pick=st.integers(-1, 5))
def test_answers_mismatch_names_nothing_on_right_answers(right, others, pick):
    variants = {f"v{i}": (answers, f"mistake {i}: why") for i, answers in enumerate(others)}
    # Right answers: nothing named, whatever the catalogue holds (right answers included).
    assert answers_mismatch("m", list(right), right, variants).evidence.named == ""
    # Answers of one variant: named only when that variant is wrong here and no other variant
    # gives the very same answers.
    seen = others[pick] if 0 <= pick < len(others) else right
    named = answers_mismatch("m", list(seen), right, variants).evidence.named
    if named:
        i = int(named.split(":")[0].removeprefix("mistake "))
        assert others[i] == seen != right
        assert [a for a in others if a == seen] == [seen] * len([a for a in others if a == seen])
        assert len({why for a, why in variants.values() if a == seen}) == 1


# -- the catalogues on right answers -------------------------------------------------------------
DTYPES = ("bf16", "fp16", "fp32")


def _switch_right(dtype, cap):
    """use_fp32_grad_accum as the handout states it, written here once more."""
    return dtype == "bf16" and cap[0] < 9


@settings(max_examples=60, **SETTINGS)
@given(rows=st.lists(st.tuples(st.sampled_from(DTYPES),
                               st.tuples(st.integers(5, 12), st.integers(0, 9))),
                     min_size=1, max_size=12))
def test_the_switch_catalogue_never_names_a_right_table(rows):
    asked = [(d, cap, _switch_right(d, cap)) for d, cap in rows]
    right = [want for _, _, want in asked]
    found = answers_mismatch("m", list(right), right, answers_of(SWITCH, asked)).evidence
    assert found.named == "" and found.matched == []


def test_each_switch_mistake_shows_on_the_graded_table_and_alone():
    test = load_file_module(ROOT / "lab-09-hardware-detective" / "tests" /
                            "test_lab09_hardware.py", "_differential_test_lab09", beside=True)
    asked = [(d, cap, want) for d, cap, want, _ in test.SWITCH_ROWS]
    right = [want for _, _, want in asked]
    assert right == [_switch_right(d, cap) for d, cap, _ in asked]
    tables = {name: answers for name, (answers, _) in answers_of(SWITCH, asked).items()}
    for name, table in tables.items():
        assert table != right, f"{name} cannot show on the graded table"
        assert [n for n, t in tables.items() if t == table] == [name], f"{name} has a twin"


@settings(max_examples=40, **SETTINGS)
@given(lists=st.lists(st.lists(st.sampled_from([
    "atom.global.cas.b32", "atom.relaxed.gpu.global.cas.b32", "atom.global.gpu.acq_rel.cas.b16",
    "atom.global.gpu.relaxed.add.f32", "red.global.add.f32",
    "red.global.gpu.relaxed.add.multicast::cluster.f32", "red.global.gpu.relaxed.add.noftz.bf16",
]), max_size=3), min_size=1, max_size=6))
def test_the_classification_catalogue_never_names_right_answers(lists):
    def right(tokens):
        if not tokens:
            return "none"
        return "emulated" if any("cas" in t.split(".") for t in tokens) else "native"

    want = [right(t) for t in lists]
    found = answers_mismatch("m", list(want), want,
                             answers_of(CLASSIFY, list(zip(lists, want)))).evidence
    assert found.named == ""


@pytest.mark.parametrize("value_dtype,buffer", [("bf16", "bf16"), ("bf16", "fp32"),
                                                ("fp16", "fp16"), ("fp32", "fp32"),
                                                ("fp16", "fp32")])
def test_the_signature_catalogue_names_nothing_right_and_tells_its_entries_apart(
        lab09, value_dtype, buffer):
    right = {n: t for n, (t, _) in lab09.expected_signature(value_dtype, buffer).items()}
    params = lab09.backward_params()
    variants = answers_of(SIGNATURE, [(params, value_dtype, buffer)])
    assert answers_mismatch("m", [right], [right], variants).evidence.named == ""
    shown = [answers[0] for answers, _ in variants.values() if answers[0] != right]
    assert shown, "no signature mistake shows on these dtypes"
    for name, (answers, why) in variants.items():
        if answers[0] != right:  # named when it alone gives that signature, else none is
            alone = shown.count(answers[0]) == 1
            named = answers_mismatch("m", answers, [right], variants).evidence.named
            assert named == (why if alone else ""), name


@settings(max_examples=40, **SETTINGS)
@given(rows=st.lists(st.tuples(st.sampled_from(("float32", "float16", "bfloat16")),
                               st.sampled_from(("auto", None, True, False))),
                     min_size=1, max_size=8))
def test_the_flag_catalogue_never_names_right_flags(rows):
    rule = {"float32": False, "float16": False, "bfloat16": True}
    asked = [(d, given, rule[d]) for d, given in rows]
    right = [rule[d] if given in ("auto", None) else given for d, given in rows]
    found = answers_mismatch("m", list(right), right, answers_of(FLAG, asked)).evidence
    assert found.named == ""


# -- lab 10: displaced gradients -----------------------------------------------------------------
dims = st.fixed_dictionaries({"B": st.integers(1, 3), "Q": st.integers(1, 5),
                              "M": st.integers(1, 3), "D": st.integers(1, 5),
                              "shapes": st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)),
                                                 min_size=1, max_size=3),
                              "K": st.integers(1, 3)})


@settings(max_examples=60, **SETTINGS)
@given(d=dims, order=st.permutations(range(6)))
def test_gradients_are_displaced_only_when_one_sits_at_another_inputs_place(lab10, d, order):
    from msda_labs.truth.cases import Case

    case = Case("generated", B=d["B"], Q=d["Q"], M=d["M"], D=d["D"], shapes=tuple(d["shapes"]),
                K=d["K"], seed=0)
    B, Q, M, D, L, K, S = case.B, case.Q, case.M, case.D, case.L, case.K, case.S
    right = [[B, S, M, D], None, None, [B, Q, M, L, K, 2], [B, Q, M, L, K], None]
    assert lab10.displaced_gradients(right, case) == ""
    left_out = [right[0], None, None, None, None, None]  # a gradient left None: not displaced
    assert lab10.displaced_gradients(left_out, case) == ""
    moved = [right[i] for i in order]  # position j holds what belongs at order[j]
    away = any(order[j] in (0, 3, 4) and order[j] != j for j in range(6))
    assert bool(lab10.displaced_gradients(moved, case)) == away, order


# -- lab 06: a grid too small --------------------------------------------------------------------
@settings(max_examples=40, **SETTINGS)
@given(block_q=st.sampled_from([4, 16]), blocks=st.integers(0, 5), noise=st.floats(0, 1e-7),
       tail=st.sampled_from(["right", "nan", "wrong"]))
def test_a_grid_too_small_is_named_only_for_whole_blocks_never_written(lab06, block_q, blocks,
                                                                       noise, tail):
    from msda_labs.truth.cases import Case

    # Q = 70 is ragged for both tiles, as in the graded case.
    case = Case("tune", B=1, Q=70, M=2, D=6, shapes=((4, 5), (2, 3)), K=2, seed=16)
    ref = lab06.reference(case, torch.float32).double()
    res = (ref + noise).clone().view(case.B, case.Q, -1)
    n = blocks * block_q
    if tail == "nan":
        res[:, n:] = float("nan")
    elif tail == "wrong":
        res[:, n:] += 1.0
    hint = lab06.grid_hint(res.view(ref.shape).float(), ref, case, block_q)
    assert bool(hint) == (tail == "nan" and 0 < n < case.Q), (block_q, blocks, tail)


# -- lab 09: the atomics of a buffer typed with the value's dtype --------------------------------
RIGHT_ATOMICS = {(80, "bf16"): ["atom.relaxed.gpu.global.cas.b32"],
                 (90, "bf16"): ["red.global.gpu.relaxed.add.noftz.bf16"],
                 (80, "fp32"): ["red.global.gpu.relaxed.add.f32"],
                 (90, "fp32"): ["red.global.gpu.relaxed.add.f32"],
                 (80, "fp16"): ["red.global.gpu.relaxed.add.noftz.f16"],
                 (90, "fp16"): ["red.global.gpu.relaxed.add.noftz.f16x2"]}


@pytest.mark.parametrize("cc,buffer", list(RIGHT_ATOMICS))
@pytest.mark.parametrize("value_dtype", DTYPES)
def test_a_right_lowering_never_reads_as_a_buffer_of_the_value_dtype(lab09, cc, buffer,
                                                                     value_dtype):
    tokens = RIGHT_ATOMICS[cc, buffer]
    assert lab09.lowers_as(tokens, cc, buffer)
    # The name needs atomics that the right buffer cannot give: never the right ones.
    named = buffer != value_dtype and lab09.lowers_as(tokens, cc, value_dtype) \
        and not lab09.lowers_as(tokens, cc, buffer)
    assert not named


# -- labs 05 and 06: the accumulator case tells both fp16 sums from the right one ---------------
def test_a_right_output_is_never_within_reach_of_either_fp16_running_sum():
    inputs = peaked_inputs()
    value, shapes, _starts, loc, attn = inputs
    ref = msda_reference(value.double(), shapes, loc.double(), attn.double())
    rtol, atol = tolerance(torch.float16)
    band = atol + rtol * ref.abs()  # how far a right output may lie from the reference
    for wrong in (fp16_running_sum(inputs), fp16_corner_sum(inputs)):
        assert float(((wrong - ref).abs() - band).min()) > NEAR_FP16_ACC
