"""Lab 00's ground truth, on the judge's side: every expected value lab 00's tests take from the
kit's truth and mistake library, and nothing else of them.

Lab 00 teaches reading a map with ``grid_sample``, the way the kit's truth reads one
(``msda_labs.truth.reference``, ``msda_labs.truth.layers``), so lab 00's template repository
carries neither this file nor those modules (nor the mistake modules built on them): the export
writes in its place a module that looks up what these functions gave on the calls the tests make
(``truth_lab00.pt``, recorded by ``python scripts/record_truth.py lab00``;
:mod:`msda_labs.grading.judge.owntruth`). Every function takes data only (tensors, cases, names).
"""

from dataclasses import replace

import torch
from probes_lab00 import smooth_msda, smooth_sample

from msda_labs.grading.judge.owntruth import judged
from msda_labs.mistakes import forward as forward_mistakes
from msda_labs.mistakes import grid_sample as grid_sample_mistakes
from msda_labs.mistakes import layers as layer_mistakes
from msda_labs.truth import layers, reference

__all__ = ["attend_variants", "bilinear_sample_grads", "bilinear_sample_variants",
           "layer_collapsed", "layer_grads", "layer_reference", "layer_variants",
           "msda_call_variants", "msda_reference", "pixel_reads", "reference_grads"]
# The kit modules that answer a task of lab 00: the export leaves them (and every module that
# imports them) out of lab 00's template.
ANSWERING_MODULES = ("msda_labs/truth/reference.py", "msda_labs/truth/layers.py")

_judged = judged(__file__, "lab00")


@_judged
def pixel_reads(img, points):
    """A correct bilinear read of ``img`` (H, W, D) at pixel points (N, 2): (N, D)."""
    return forward_mistakes.pixel_reads(img, points)


@_judged
def bilinear_sample_variants(img, points):
    """What familiar bilinear_sample mistakes give: {name: (output, why)}."""
    return grid_sample_mistakes.bilinear_sample_variants(img, points)


@_judged
def bilinear_sample_grads(img, points, grad_out):
    """Gradients of <bilinear_sample(img, points), grad_out> for img and points."""
    img, points = img.clone().requires_grad_(), points.clone().requires_grad_()
    return torch.autograd.grad(layers.bilinear_sample(img, points), [img, points], grad_out)


@_judged
def attend_variants(value, points, weights, reader):
    """What familiar deform_attend mistakes give when the points are read by ``reader``
    ("smooth": the grader's stand-in bilinear_sample; "pixel": a correct bilinear read):
    {name: (out, why)}. The reads are taken here, not passed in: a recording is keyed by the
    bytes of its arguments, and a read computed with exp and a matrix product may differ in its
    last bits from one CPU to another."""
    Q, K, _ = points.shape
    flat = points.reshape(Q * K, 2)
    read = smooth_sample if reader == "smooth" else forward_mistakes.pixel_reads
    samples = read(value, flat).reshape(Q, K, -1)
    return grid_sample_mistakes.attend_variants(value, points, weights, samples)


@_judged
def msda_reference(value, shapes, loc, attn):
    """MSDA, read with grid_sample (the reference)."""
    return reference.msda_reference(value, shapes, loc, attn)


@_judged
def reference_grads(value, shapes, loc, attn, grad_out):
    """The reference's gradients (value, locations, weights), in float32."""
    return reference.reference_grads(value, shapes, loc, attn, grad_out)


@_judged
def msda_call_variants(inputs):
    """What familiar msda mistakes give: {name: (output, why)}."""
    return grid_sample_mistakes.msda_call_variants(inputs)


# -- the layers (tasks 0.3, 0.4, 0.6), by class name ---------------------------------------------
_REFERENCES = {
    "DeformableAttention": lambda s, ly, t, steps: layers.deformable_attention(
        s, *t, ly.M, ly.K, steps),
    "DeformableCrossAttention": lambda s, ly, t, steps: layers.deformable_cross_attention(
        s, *t, ly.M, ly.K, steps),
    "MSDACrossAttention": lambda s, ly, t, steps: layers.msda_cross_attention(
        s, *t, ly.M, ly.L, ly.K, steps),
}
_COLLAPSED = {
    "DeformableAttention": lambda s, ly, t: layers.collapsed_attention(s, *t),
    "DeformableCrossAttention": lambda s, ly, t: layers.collapsed_cross_attention(s, *t),
    "MSDACrossAttention": lambda s, ly, t: layers.collapsed_msda_attention(
        s, *t, ly.M, ly.L, ly.K),
}
_MISTAKES = {"DeformableAttention": layer_mistakes.SELF_MISTAKES,
             "DeformableCrossAttention": layer_mistakes.CROSS_MISTAKES,
             "MSDACrossAttention": layer_mistakes.MSDA_LAYER_MISTAKES}


def _double(state):
    return {name: t.double() for name, t in state.items()}


def _as64(inputs):
    return [t.double() if t.is_floating_point() else t for t in inputs]


def _reference(cls: str, stand_in: bool):
    """The layer ``cls`` in float64; ``stand_in``: its points read by the child's stand-in reader
    (``probes_lab00.smooth_msda``), as the stand-in run read them."""
    def compute(s, ly, t, steps=layers.LAYER_SPEC):
        return _REFERENCES[cls](s, ly, t, replace(steps, sample=smooth_msda) if stand_in
                                else steps)

    return compute


@_judged
def layer_reference(cls, layer, state, inputs, stand_in):
    """The layer ``cls`` with the weights ``state`` on ``inputs``, in float64."""
    return _reference(cls, stand_in)(_double(state), layer, _as64(inputs))


@_judged
def layer_collapsed(cls, layer, state, inputs):
    """The layer ``cls`` with its predictors zeroed, by its simpler formula, in float64."""
    return _COLLAPSED[cls](_double(state), layer, _as64(inputs))


@_judged
def layer_variants(cls, layer, state, inputs, stand_in):
    """What the familiar mistakes of layer ``cls`` give: {name: (output, why)}."""
    return layer_mistakes.layer_variants(_reference(cls, stand_in), _MISTAKES[cls],
                                         _double(state), layer, _as64(inputs))


@_judged
def layer_grads(cls, layer, state, inputs, grad_out, stand_in):
    """Gradients of <layer(inputs), grad_out> for offset_proj.weight and the float inputs."""
    s = _double(state)
    s["offset_proj.weight"].requires_grad_()
    leaves = [t.double().requires_grad_() for t in inputs if t.is_floating_point()]
    out = _reference(cls, stand_in)(s, layer, leaves + [t for t in inputs
                                                        if not t.is_floating_point()])
    return torch.autograd.grad(out, [s["offset_proj.weight"], *leaves], grad_out.double())
