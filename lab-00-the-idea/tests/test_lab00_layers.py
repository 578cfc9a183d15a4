"""Grading tests of lab 00's layers (tasks 0.3, 0.4, 0.6). Run them with `nox -s lab00`.

Each layer is built in the child from your class, loaded with the test's seeded weights and run
(``probes_lab00.probe_layer``); the judge recomputes it in float64 (``truth_lab00.py``, which a
template repository holds recorded) and names a familiar mistake when your output is exactly its
output.
The layer runs twice, with stand-ins for its parts and with yours, and passes when either run
matches the reference computed the same way (``judge_lab00``).
"""

from dataclasses import dataclass

import pytest
import torch
from judge_lab00 import expect_either
from probes_lab00 import probe_layer
from test_lab00_idea import NO_GRADIENT, TASKS, expect_grads
from truth_lab00 import layer_collapsed, layer_grads, layer_reference, layer_variants

from msda_labs.grading import expect_close, expect_tensor
from msda_labs.truth.cases import Layer, layer_state, seeded_generator

__all__ = ["TASKS"]  # the lab's tasks are declared in test_lab00_idea.py
SOLO = ("bilinear_sample", "deform_attend")  # the parts replaced by stand-ins in one run


@dataclass(frozen=True)
class Kind:
    """One graded layer class: how to build its inputs and call it (the judge's truth computes
    it by the class name, ``truth_lab00``)."""

    cls: str
    parts: tuple
    input_names: tuple
    grad_hint: str = NO_GRADIENT

    def init_args(self, layer: Layer) -> tuple:
        levels = (layer.L,) if self.cls == "MSDACrossAttention" else ()
        return (layer.C, layer.M, *levels, layer.K)


SELF = Kind("DeformableAttention", SOLO, ("x",),
            "without it the layer cannot learn where to look; " + NO_GRADIENT)
CROSS = Kind("DeformableCrossAttention", SOLO, ("query", "reference_points", "value"))
MSDA = Kind("MSDACrossAttention", (*SOLO, "msda"), ("query", "reference_points", "value"))

SELF_LAYERS = (
    Layer("two_heads", C=8, M=2, K=3, B=2, shapes=((5, 6),), seed=130),
    Layer("odd_single_point", C=9, M=3, K=1, B=1, shapes=((4, 7),), seed=131),
)
CROSS_LAYERS = (
    Layer("two_heads", C=8, M=2, K=3, B=2, Q=5, shapes=((6, 7),), seed=140),
    Layer("one_head_odd_map", C=6, M=1, K=2, B=1, Q=7, shapes=((3, 5),), seed=141),
)
MSDA_LAYERS = (
    Layer("two_levels", C=8, M=2, K=3, B=2, Q=5, shapes=((5, 7), (3, 4)), seed=160),
    Layer("three_levels_odd", C=6, M=2, K=2, B=1, Q=3, shapes=((6, 4), (3, 2), (1, 1)), seed=161),
)


def _setup(kind: Kind, layer: Layer, zero_predictors=False):
    """Seeded weights and float32 inputs of one case: (state, inputs)."""
    points = layer.M * layer.L * layer.K
    state = layer_state(layer, points * 2, points, zero_predictors)
    gen = seeded_generator(layer.seed + 1000)
    (H, W), S = layer.shapes[0], sum(h * w for h, w in layer.shapes)
    if kind is SELF:
        return state, (torch.randn(layer.B, H, W, layer.C, generator=gen),)
    query = torch.randn(layer.B, layer.Q, layer.C, generator=gen)
    ref_points = torch.rand(layer.B, layer.Q, 2, generator=gen)
    if kind is CROSS:
        return state, (query, ref_points, torch.randn(layer.B, H, W, layer.C, generator=gen))
    value = torch.randn(layer.B, S, layer.C, generator=gen)
    return state, (query, ref_points, value, torch.tensor(layer.shapes, dtype=torch.int64))


def _run(submission, kind, layer, state, inputs, **kwargs):
    return submission.run(probe_layer, kind.cls, kind.init_args(layer), state, inputs,
                          stand_ins=kind.parts, **kwargs)


def _expect_structure(result, state, what, exact=False):
    have = result.get("structure", {})
    if not isinstance(have, dict):
        raise AssertionError(f"{what}: could not read the layer's parameters")
    wrong = [f"{name} {tuple(t.shape)} (yours: {have[name] if name in have else 'missing'})"
             for name, t in state.items() if have.get(name) != tuple(t.shape)]
    if wrong:
        raise AssertionError(f"{what}: the submodules must be nn.Linear layers with bias named as "
                             f"in the docstring; expected " + ", ".join(wrong))
    extra = sorted(set(have) - set(state))
    if exact and extra:
        raise AssertionError(f"{what}: parameters beyond the four projections: "
                             f"{', '.join(extra[:4])} (the layer is exactly the four nn.Linear)")


def _expect_layer(result, ref, state, what, layer, variants):
    _expect_structure(result, state, what)
    expect_close(result.get("out"), ref, what=what, case=layer.describe(), dtype=torch.float32,
                 expect_dtype=torch.float32, variants=variants)


def _check_structure_and_shape(submission, kind):
    layer = {SELF: SELF_LAYERS, CROSS: CROSS_LAYERS, MSDA: MSDA_LAYERS}[kind][0]
    state, inputs = _setup(kind, layer)
    result = _run(submission, kind, layer, state, inputs)
    what = f"{kind.cls}({', '.join(str(n) for n in kind.init_args(layer))})"
    on = (f"x {tuple(inputs[0].shape)}" if kind is SELF else
          f"query {tuple(inputs[0].shape)}, value {tuple(inputs[2].shape)}")

    def check(run):
        _expect_structure(run, state, what, exact=True)
        expect_tensor(run.get("out"), f"{what} on {on}", shape=inputs[0].shape,
                      dtype=torch.float32)

    expect_either(result, check, check)
    # The structure earns its point on a layer that computes: an output of the right shape that
    # ignores its input (zeros, the input echoed) is not a layer.
    _expect_both_ways(result, kind, layer, state, inputs,
                      f"{what} on {on}: the right structure and shape, and the right output",
                      layer_reference(kind.cls, layer, state, inputs, False))


def _expect_both_ways(result, kind, layer, state, inputs, what, own_reference):
    """The stand-in run against the reference read the stand-in's way, or your own run against
    ``own_reference`` (the spec). Every expected value is taken before either check runs."""
    stand_in_reference = layer_reference(kind.cls, layer, state, inputs, True)
    stand_in_variants = layer_variants(kind.cls, layer, state, inputs, True)
    own_variants = layer_variants(kind.cls, layer, state, inputs, False)
    expect_either(
        result,
        lambda run: _expect_layer(run, stand_in_reference, state, what, layer,
                                  stand_in_variants),
        lambda run: _expect_layer(run, own_reference, state, what, layer, own_variants))


def _check_collapse(submission, kind, layer, what):
    state, inputs = _setup(kind, layer, zero_predictors=True)
    result = _run(submission, kind, layer, state, inputs)
    _expect_both_ways(result, kind, layer, state, inputs,
                      f"{kind.cls} with offset_proj and weight_proj zeroed ({what})",
                      layer_collapsed(kind.cls, layer, state, inputs))


def _check_random_offsets(submission, kind, layer):
    state, inputs = _setup(kind, layer)
    result = _run(submission, kind, layer, state, inputs)
    _expect_both_ways(result, kind, layer, state, inputs,
                      f"{kind.cls} with random non-zero offsets",
                      layer_reference(kind.cls, layer, state, inputs, False))


def _check_gradients(submission, kind, layer):
    state, inputs = _setup(kind, layer)
    grad_out = torch.randn(inputs[0].shape, generator=seeded_generator(layer.seed + 2000))
    result = _run(submission, kind, layer, state, inputs, grad_out=grad_out,
                  grad_params=("offset_proj.weight",))
    whats = [f"{kind.cls}: gradient reaching {n}"
             for n in ("offset_proj.weight", *kind.input_names)]

    def check(stand_in):
        refs = layer_grads(kind.cls, layer, state, inputs, grad_out, stand_in)

        def against(run):
            _expect_structure(run, state, kind.cls)
            expect_grads(run, refs, whats, kind.grad_hint, torch.float32)

        return against

    expect_either(result, check(True), check(False))


# == Task 0.3: DeformableAttention ================================================================
@pytest.mark.task("0.3", points=1)
def test_self_attention_structure_and_shape(submission):
    _check_structure_and_shape(submission, SELF)


@pytest.mark.task("0.3", points=1)
def test_self_attention_collapses_with_zero_predictors(submission):
    # Zero offsets put every point on its own pixel centre, zero logits weigh the points 1/K: the
    # layer must then be out_proj(value_proj(x)), position by position.
    _check_collapse(submission, SELF, SELF_LAYERS[0], "must reduce to out_proj(value_proj(x))")


@pytest.mark.task("0.3", points=1)
@pytest.mark.parametrize("layer", SELF_LAYERS, ids=lambda c: c.id)
def test_self_attention_random_offsets(submission, layer):
    _check_random_offsets(submission, SELF, layer)


@pytest.mark.task("0.3", points=1)
def test_self_attention_gradients(submission):
    _check_gradients(submission, SELF, SELF_LAYERS[0])


# == Task 0.4: DeformableCrossAttention ===========================================================
@pytest.mark.task("0.4", points=1)
def test_cross_attention_structure_and_shape(submission):
    _check_structure_and_shape(submission, CROSS)


@pytest.mark.task("0.4", points=1)
def test_cross_attention_collapses_to_lookup(submission):
    # Zeroed predictors: each query reads value_proj(value) at its reference point, one bilinear
    # lookup of all C channels, then out_proj.
    _check_collapse(submission, CROSS, CROSS_LAYERS[0],
                    "must reduce to a bilinear lookup at the reference points")


@pytest.mark.task("0.4", points=1)
@pytest.mark.parametrize("layer", CROSS_LAYERS, ids=lambda c: c.id)
def test_cross_attention_random_offsets(submission, layer):
    _check_random_offsets(submission, CROSS, layer)


@pytest.mark.task("0.4", points=1)
def test_cross_attention_gradients(submission):
    _check_gradients(submission, CROSS, CROSS_LAYERS[0])


# == Task 0.6: MSDACrossAttention =================================================================
@pytest.mark.task("0.6", points=1)
def test_msda_layer_structure_and_shape(submission):
    _check_structure_and_shape(submission, MSDA)


@pytest.mark.task("0.6", points=1)
def test_msda_layer_collapses_with_zero_predictors(submission):
    # Zeroed predictors: every point of every level sits on the reference point, and each of the
    # L * K points weighs 1 / (L * K).
    _check_collapse(submission, MSDA, MSDA_LAYERS[0],
                    "every point on the reference point, weights 1 / (L * K)")


@pytest.mark.task("0.6", points=1)
@pytest.mark.parametrize("layer", MSDA_LAYERS, ids=lambda c: c.id)
def test_msda_layer_random_offsets(submission, layer):
    _check_random_offsets(submission, MSDA, layer)


@pytest.mark.task("0.6", points=1)
def test_msda_layer_gradients(submission):
    _check_gradients(submission, MSDA, MSDA_LAYERS[0])
