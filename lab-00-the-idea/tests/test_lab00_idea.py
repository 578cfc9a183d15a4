"""Grading tests of lab 00 (the idea). Run them with `nox -s lab00`.

How the layers are graded: the child process that runs your code builds your layer (after
``torch.manual_seed(0)``) and loads the test's own seeded random weights into its four Linear
layers, so your initialisation never matters, only the submodules' names and sizes. The offsets
those weights predict are random and non-zero (a few pixels, some reaching outside the map). The
judge recomputes the expected output from the same weights with its own reference, built on
``msda_labs.truth.reference``, and compares;
when your output is exactly what a known mistake gives, the
feedback names it.

Each task is graded on its own: while a layer is tested, the grader swaps in its own correct
``bilinear_sample``, ``deform_attend`` and ``msda`` for yours, so a bug costs points once.
"""

import math
from dataclasses import dataclass

import pytest
import torch
import torch.fx.experimental.symbolic_shapes  # noqa: F401  (see the NOTE below)
import torch.nn.functional as F

from msda_labs.grading import expect_close, expect_tensor
from msda_labs.mistakes import msda_variants, pixel_reads, pixel_variants
from msda_labs.mistakes.forward import FORWARD_MISTAKES
from msda_labs.truth.cases import MULTI_LEVEL, STANDARD_CASES, make_inputs, seeded_generator
from msda_labs.truth.reference import msda_reference, reference_grads

LAB = "lab00"
TITLE = "The idea"
MODE = "cpu"
TASKS = {
    "0.1": "bilinear_sample",
    "0.2": "deform_attend",
    "0.3": "DeformableAttention",
    "0.4": "DeformableCrossAttention",
    "0.5": "msda",
    "0.6": "MSDACrossAttention",
}

# NOTE: torch.autograd.grad imports torch.fx.experimental.symbolic_shapes (and sympy) the first
# time it is given grad_outputs: 0.7-1.6 s here, paid again by every forked child. Importing it
# above lets the grading worker, which preloads this module, pay once (a gradient test went from
# 1.3 s to 0.2 s on a loaded 2-core machine).

# Offsets the test's weights predict: about OFFSET_PIXELS * sqrt(2) pixels (standard deviation).
OFFSET_PIXELS = 1.5


# -- judge's reference parts (also swapped into the child while later tasks are graded) ----------
def _ref_bilinear_sample(img, points):
    """A correct bilinear_sample: (H, W, D) image, (N, 2) pixel points -> (N, D)."""
    H, W, D = img.shape
    size = torch.tensor([W, H], dtype=img.dtype, device=img.device)
    loc = ((points.to(img.dtype) + 0.5) / size).reshape(1, -1, 1, 1, 1, 2)
    ones = loc.new_ones(loc.shape[:-1])
    return msda_reference(img.reshape(1, H * W, 1, D), [[H, W]], loc, ones)[0]


def _ref_deform_attend(value, points, weights):
    """A correct deform_attend: (H, W, D), (Q, K, 2), (Q, K) -> (Q, D)."""
    Q, K, _ = points.shape
    samples = _ref_bilinear_sample(value, points.reshape(Q * K, 2)).reshape(Q, K, -1)
    return (weights.unsqueeze(-1) * samples).sum(dim=1)


_REFERENCE_PARTS = {"bilinear_sample": _ref_bilinear_sample, "deform_attend": _ref_deform_attend,
                    "msda": msda_reference}


# -- probes: these run inside the isolated child ----------------------------------------------
def _swap_in(module, parts):
    for name in parts:
        setattr(module, name, _REFERENCE_PARTS[name])


def _count_grid_samples(module):
    """Count every torch.grid_sampler call (where F.grid_sample ends), also through names the
    submission imported directly. Returns a one-element list that holds the count."""
    original = torch.grid_sampler
    calls = [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    torch.grid_sampler = counted
    for name, obj in list(vars(module).items()):
        if obj is original:
            setattr(module, name, counted)
    return calls


def _grads(out, grad_out, tensors):
    """Gradients of <out, grad_out> for ``tensors``; None where none flows."""
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(grad_out.shape) \
            or not out.requires_grad:
        return [None] * len(tensors)
    return list(torch.autograd.grad(out, tensors, grad_out.to(out.dtype), allow_unused=True))


def _probe_function(module, name, args, *, parts=(), count=False, grad_out=None):
    """Call ``name(*args)``; optionally count grid_sample calls and take input gradients."""
    _swap_in(module, parts)
    calls = _count_grid_samples(module) if count else None
    wants = [grad_out is not None and isinstance(a, torch.Tensor) and a.is_floating_point()
             for a in args]
    args = [a.clone().requires_grad_(True) if w else a for a, w in zip(args, wants)]
    out = getattr(module, name)(*args)
    result = {"out": out}
    if calls is not None:
        result["calls"] = calls[0]
    if grad_out is not None:
        result["grads"] = _grads(out, grad_out, [a for a, w in zip(args, wants) if w])
    return result


def _probe_layer(module, cls_name, init_args, state, inputs, *, parts=(), grad_out=None,
                 grad_params=()):
    """Build the layer, load the test's weights, run it (and optionally backward)."""
    _swap_in(module, parts)
    torch.manual_seed(0)
    layer = getattr(module, cls_name)(*init_args)
    structure = {name: tuple(t.shape) for name, t in layer.named_parameters()}
    result = {"structure": structure}
    if any(structure.get(name) != tuple(t.shape) for name, t in state.items()):
        return result
    layer.load_state_dict(state, strict=False)
    wants = [grad_out is not None and t.is_floating_point() for t in inputs]
    leaves = [t.clone().requires_grad_(w) for t, w in zip(inputs, wants)]
    out = layer(*leaves)
    result["out"] = out
    if grad_out is not None:
        params = dict(layer.named_parameters())
        targets = [params[name] for name in grad_params] + [t for t in leaves if t.requires_grad]
        result["grads"] = _grads(out, grad_out, targets)
    return result


# -- judge-side helpers ------------------------------------------------------------------------
def _expect_grad(res, ref, what, hint, dtype):
    if res is None:
        raise AssertionError(f"{what}: no gradient came back; {hint}")
    if isinstance(res, torch.Tensor) and bool((res == 0).all()) and bool((ref != 0).any()):
        raise AssertionError(f"{what}: the gradient is all zeros; {hint}")
    expect_close(res, ref, what=what, dtype=dtype, backward=True)


def _expect_grads(result, refs, whats, hint, dtype):
    """Compare the gradients a probe sent back with the judge's, in order."""
    grads = result.get("grads") or [None] * len(refs)
    for res, ref, what in zip(grads, refs, whats):
        _expect_grad(res, ref, what, hint, dtype)


NO_GRADIENT = ("is something rounded (int(), .item(), round(), .long()) or detached on the way? "
               "Bilinear reading is differentiable so that the gradient can reach the positions")


def _bilinear_variants(img, points):
    """Outputs of familiar bilinear_sample mistakes (each one is a read at other points)."""
    H, W, _ = img.shape
    size = torch.tensor([W, H], dtype=torch.float64)
    p = points.double()
    found = pixel_variants(img, points)
    found.update({
        "no_half_pixel": (pixel_reads(img, p - 0.5),
                          "a grid without the +0.5: g = 2 * (p + 0.5) / size - 1, since pixel "
                          "centres sit half a pixel inside the image edges"),
        "size_hw": (pixel_reads(img, (p + 0.5) * size / size.flip(0) - 0.5),
                    "x normalized by H and y by W: x pairs with the width W, y with the height H"),
        "align_corners": (pixel_reads(img, (p + 0.5) * (size - 1) / size),
                          "align_corners=True with the grid of align_corners=False: keep "
                          "align_corners=False"),
        "nearest": (pixel_reads(img, p.round()),
                    "mode='nearest': a bilinear read blends the four surrounding pixels"),
    })
    return found


def _reads(submission, img, points, what, dtype=torch.float64):
    res = submission.run(_probe_function, "bilinear_sample", (img, points))["out"]
    expect_close(res, pixel_reads(img, points), what=what, dtype=dtype, expect_dtype=img.dtype,
                 variants=_bilinear_variants(img, points))


# == Task 0.1: bilinear_sample ===================================================================
@pytest.mark.task("0.1", points=1)
def test_bilinear_reads_pixel_centres(submission):
    # 4 rows x 6 columns holding 0..23: x picks the column, y the row; (5, 3) is the bottom-right
    # pixel, whose right and lower neighbours are outside with weight 0.
    img = torch.arange(24, dtype=torch.float32).reshape(4, 6, 1)
    points = torch.tensor([[2.0, 1.0], [0.0, 0.0], [5.0, 3.0]])
    _reads(submission, img, points, "bilinear_sample(float32 4x6 image holding 0..23) at the "
                                    "pixel centres (x, y) = (2, 1), (0, 0), (5, 3)",
           dtype=torch.float32)


@pytest.mark.task("0.1", points=1)
def test_bilinear_zero_padding(submission):
    # Half the weight is outside at x = -0.5, all of it at x = -1; a quarter of a quarter is
    # inside at (2.75, 2.75).
    img = torch.ones(3, 3, 2, dtype=torch.float64)
    points = torch.tensor([[-0.5, 1.0], [-1.0, 1.0], [1.0, 2.5], [2.75, 2.75], [1.0, -0.25]],
                          dtype=torch.float64)
    _reads(submission, img, points, "bilinear_sample at the edges of a 3x3 image of ones "
                                    "(x = -0.5, x = -1, y = 2.5, (2.75, 2.75), y = -0.25)")


@pytest.mark.task("0.1", points=2)
def test_bilinear_matches_reference(submission):
    gen = seeded_generator(100)
    img = torch.randn(5, 7, 3, generator=gen, dtype=torch.float64)
    points = torch.rand(40, 2, generator=gen, dtype=torch.float64) * torch.tensor([10.0, 8.0]) \
        - 1.5
    _reads(submission, img, points, "bilinear_sample(float64 5x7x3 image) at 40 random points in "
                                    "x in [-1.5, 8.5), y in [-1.5, 6.5), many outside")


@pytest.mark.task("0.1", points=1)
def test_bilinear_float32(submission):
    gen = seeded_generator(101)
    img = torch.randn(6, 4, 5, generator=gen)
    points = torch.rand(25, 2, generator=gen) * torch.tensor([5.0, 7.0]) - 0.5
    _reads(submission, img, points, "bilinear_sample(float32 6x4x5 image) at 25 random points",
           dtype=torch.float32)


@pytest.mark.task("0.1", points=1)
def test_bilinear_gradients(submission):
    gen = seeded_generator(102)
    img = torch.randn(4, 5, 2, generator=gen, dtype=torch.float64)
    points = torch.rand(8, 2, generator=gen, dtype=torch.float64) * torch.tensor([5.6, 4.6]) - 0.8
    grad_out = torch.randn(8, 2, generator=gen, dtype=torch.float64)
    result = submission.run(_probe_function, "bilinear_sample", (img, points), grad_out=grad_out)
    img_ref, points_ref = img.clone().requires_grad_(), points.clone().requires_grad_()
    refs = torch.autograd.grad(_ref_bilinear_sample(img_ref, points_ref), [img_ref, points_ref],
                               grad_out)
    _expect_grads(result, refs, ["gradient of bilinear_sample (4x5x2 image, 8 points) with "
                                 "respect to img",
                                 "gradient of bilinear_sample with respect to points"],
                  NO_GRADIENT, torch.float64)


@pytest.mark.task("0.1", points=1)
def test_bilinear_one_grid_sample_no_loop(submission):
    gen = seeded_generator(103)
    img = torch.randn(5, 6, 2, generator=gen, dtype=torch.float64)
    points = torch.rand(40, 2, generator=gen, dtype=torch.float64) * 5
    calls = submission.run(_probe_function, "bilinear_sample", (img, points), count=True)["calls"]
    if calls != 1:
        raise AssertionError(f"rule: bilinear_sample must read all N points with one "
                             f"F.grid_sample call; reading 40 points made {calls} calls")
    loops = submission.source.loops("bilinear_sample")
    if loops:
        raise AssertionError(f"rule: bilinear_sample must not loop (no for/while or "
                             f"comprehension); there is one at line {loops[0].lineno}")


# == Task 0.2: deform_attend =====================================================================
def _attend_case(seed, H, W, D, Q, K, softmaxed):
    gen = seeded_generator(seed)
    value = torch.randn(H, W, D, generator=gen, dtype=torch.float64)
    points = torch.rand(Q, K, 2, generator=gen, dtype=torch.float64) \
        * torch.tensor([W + 2.0, H + 2.0]) - 1
    weights = torch.rand(Q, K, generator=gen, dtype=torch.float64)
    return value, points, (weights.softmax(-1) if softmaxed else 2 * weights)


def _expect_attend(submission, value, points, weights, what):
    Q, K, _ = points.shape
    res = submission.run(_probe_function, "deform_attend", (value, points, weights),
                         parts=("bilinear_sample",))["out"]
    samples = pixel_reads(value, points.reshape(Q * K, 2)).reshape(Q, K, -1)
    variants = {
        "unweighted": (samples.sum(1), "the attention weights left out"),
        "softmax_again": ((weights.softmax(-1).unsqueeze(-1) * samples).sum(1),
                          "a softmax inside deform_attend: the weights arrive ready to use"),
        "mean": (samples.mean(1), "a plain mean over the K points instead of the weighted sum"),
        "swap_xy": ((weights.unsqueeze(-1) * pixel_reads(value, points.reshape(Q * K, 2).flip(-1))
                     .reshape(Q, K, -1)).sum(1),
                    "x and y swapped: the last axis of points is (x, y), x along the width"),
    }
    expect_close(res, (weights.unsqueeze(-1) * samples).sum(1), what=what, dtype=torch.float64,
                 expect_dtype=torch.float64, variants=variants)


@pytest.mark.task("0.2", points=2)
def test_deform_attend_matches_reference(submission):
    value, points, weights = _attend_case(110, H=6, W=5, D=4, Q=5, K=3, softmaxed=True)
    _expect_attend(submission, value, points, weights,
                   "deform_attend(6x5x4 map, 5 queries x 3 points, some outside, softmaxed "
                   "weights)")


@pytest.mark.task("0.2", points=1)
def test_deform_attend_uses_weights_as_given(submission):
    value, points, weights = _attend_case(111, H=4, W=7, D=3, Q=4, K=2, softmaxed=False)
    _expect_attend(submission, value, points, weights,
                   "deform_attend(4x7x3 map, 4 queries x 2 points) with weights that do not sum "
                   "to 1")


@pytest.mark.task("0.2", points=1)
def test_deform_attend_one_sampling_call(submission):
    value, points, weights = _attend_case(112, H=5, W=5, D=2, Q=5, K=3, softmaxed=True)
    calls = submission.run(_probe_function, "deform_attend", (value, points, weights),
                           parts=("bilinear_sample",), count=True)["calls"]
    if calls != 1:
        raise AssertionError(f"rule: deform_attend must read all Q * K points with one "
                             f"bilinear_sample call (one grid_sample); 5 queries x 3 points made "
                             f"{calls} grid_sample calls")


# == layers: shared machinery =====================================================================
@dataclass(frozen=True)
class Layer:
    """One layer test: sizes, map, seed."""

    id: str
    C: int
    M: int
    K: int
    B: int
    Q: int = 0  # cross-attention queries (0: self-attention, every pixel is a query)
    shapes: tuple = ()  # ((H, W),) for the single-scale layers, the pyramid for MSDA
    seed: int = 0

    @property
    def L(self) -> int:
        return len(self.shapes)

    def describe(self) -> str:
        sizes = ",".join(f"{h}x{w}" for h, w in self.shapes)
        where = f"levels {sizes}" if self.L > 1 else f"map {sizes}"
        queries = f" Q={self.Q}" if self.Q else ""
        return (f"case '{self.id}' (B={self.B}{queries} C={self.C} M={self.M} D={self.C // self.M}"
                f" K={self.K}, {where})")


def _layer_state(layer: Layer, offset_rows: int, logit_rows: int, zero_predictors=False):
    """Seeded weights for the four projections; the offsets they predict are a few pixels."""
    gen = seeded_generator(layer.seed)
    C, state = layer.C, {}
    for name, rows, scale in (("value_proj", C, 1.0), ("offset_proj", offset_rows, OFFSET_PIXELS),
                              ("weight_proj", logit_rows, 1.0), ("out_proj", C, 1.0)):
        state[f"{name}.weight"] = torch.randn(rows, C, generator=gen) * (scale / math.sqrt(C))
        state[f"{name}.bias"] = torch.randn(rows, generator=gen) * scale
    if zero_predictors:
        for name in ("offset_proj", "weight_proj"):
            state[f"{name}.weight"].zero_()
            state[f"{name}.bias"].zero_()
    return state


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


def _lin(s, name, x):
    return x @ s[f"{name}.weight"].T + s[f"{name}.bias"]


def _heads(v, M, mistake):
    """(..., C) -> (..., M, D): head m owns channels m * D .. m * D + D - 1."""
    D = v.shape[-1] // M
    if mistake == "value_split_dm":
        return v.unflatten(-1, (D, M)).transpose(-1, -2)
    return v.unflatten(-1, (M, D))


def _merge(out, M, mistake):
    """(..., M * D) head-major; the mistake interleaves the heads instead."""
    if mistake == "heads_interleaved":
        return out.unflatten(-1, (M, out.shape[-1] // M)).transpose(-1, -2).flatten(-2)
    return out


def _softmax(logits, M, G, mistake):
    """(..., M * G) logits -> (..., M, G) weights, softmax over the G of each head."""
    grouped = logits.unflatten(-1, (M, G))
    if mistake == "no_softmax":
        return grouped
    if mistake == "softmax_heads":
        return grouped.softmax(-2)
    if mistake == "softmax_joint":
        return logits.softmax(-1).unflatten(-1, (M, G))
    return grouped.softmax(-1)


COMMON_MISTAKES = {
    "offsets_yx": "offsets read as (y, x): the last axis of the offsets is (x, y)",
    "softmax_heads": "the softmax taken across the heads: each head's weights sum to 1 on their "
                     "own",
    "softmax_joint": "one softmax over all heads together: each head's weights sum to 1 on their "
                     "own",
    "no_softmax": "the attention logits used without a softmax",
    "value_split_dm": "the value split into heads as (D, M): head m owns channels m * D to "
                      "m * D + D - 1, so view (..., M, D)",
    "heads_interleaved": "heads put side by side in the wrong order: channel m * D + d belongs to "
                         "head m",
}


def _ref_self(s, x, M, K, mistake=None):
    """DeformableAttention from weights ``s`` (float64 math), optionally with a mistake."""
    B, H, W, C = x.shape
    D = C // M
    value = _heads(_lin(s, "value_proj", x), M, mistake).reshape(B, H * W, M, D)
    offsets = _lin(s, "offset_proj", x).reshape(B, H * W, M, K, 2)
    if mistake == "offsets_yx":
        offsets = offsets.flip(-1)
    attn = _softmax(_lin(s, "weight_proj", x).reshape(B, H * W, M * K), M, K, mistake)
    rows, cols = torch.meshgrid(torch.arange(H, dtype=x.dtype), torch.arange(W, dtype=x.dtype),
                                indexing="ij")
    ref = torch.stack([cols, rows], dim=-1).reshape(1, H * W, 1, 1, 2)
    if mistake == "ref_half_pixel":
        ref = ref + 0.5
    elif mistake == "ref_swapped":
        ref = ref.flip(-1)
    loc = (ref + offsets + 0.5) / torch.tensor([W, H], dtype=x.dtype)
    out = msda_reference(value, [[H, W]], loc.unsqueeze(3), attn.unsqueeze(3))
    return _lin(s, "out_proj", _merge(out, M, mistake)).reshape(B, H, W, C)


SELF_MISTAKES = {
    "ref_half_pixel": "a reference grid shifted by half a pixel: the centre of pixel (row i, "
                      "col j) is (x = j, y = i), not (j + 0.5, i + 0.5)",
    "ref_swapped": "the reference grid built as (x = row, y = col): position (i, j) looks from "
                   "x = j, y = i (meshgrid with indexing='ij' gives the rows first)",
    **COMMON_MISTAKES,
}


def _ref_cross(s, query, ref_points, value, M, K, mistake=None):
    """DeformableCrossAttention from weights ``s`` (float64 math), optionally with a mistake."""
    B, Q, C = query.shape
    _, H, W, _ = value.shape
    D = C // M
    v = _heads(_lin(s, "value_proj", value), M, mistake).reshape(B, H * W, M, D)
    offsets = _lin(s, "offset_proj", query).reshape(B, Q, M, K, 2)
    if mistake == "offsets_yx":
        offsets = offsets.flip(-1)
    attn = _softmax(_lin(s, "weight_proj", query), M, K, mistake)
    size = torch.tensor([W, H], dtype=query.dtype)
    ref = ref_points[:, :, None, None, :]
    if mistake == "ref_hw":
        ref_pix = ref * size.flip(0) - 0.5
    elif mistake == "ref_no_half":
        ref_pix = ref * size
    else:
        ref_pix = ref * size - 0.5
    loc = (ref_pix + offsets + 0.5) / size
    out = msda_reference(v, [[H, W]], loc.unsqueeze(3), attn.unsqueeze(3))
    return _lin(s, "out_proj", _merge(out, M, mistake))


CROSS_MISTAKES = {
    "ref_hw": "the reference point scaled by (H, W): x pairs with the width, x_pix = x * W - 0.5",
    "ref_no_half": "a missing -0.5 on the reference point: x_pix = x * W - 0.5",
    **COMMON_MISTAKES,
}


def _ref_msda_layer(s, query, ref_points, value, shapes, M, L, K, mistake=None):
    """MSDACrossAttention from weights ``s`` (float64 math), optionally with a mistake."""
    B, Q, C = query.shape
    v = _heads(_lin(s, "value_proj", value), M, mistake)
    offsets = _lin(s, "offset_proj", query).reshape(B, Q, M, L, K, 2)
    if mistake == "offsets_yx":
        offsets = offsets.flip(-1)
    logits = _lin(s, "weight_proj", query)
    if mistake == "softmax_per_level":
        attn = logits.reshape(B, Q, M, L, K).softmax(-1)
    else:
        attn = _softmax(logits, M, L * K, mistake).reshape(B, Q, M, L, K)
    size = shapes.flip(-1).to(query.dtype)  # [L, 2] as (W_l, H_l)
    if mistake == "norm_hw":
        size = shapes.to(query.dtype)
    elif mistake == "norm_first_level":
        size = size[:1].expand(L, 2)
    elif mistake == "not_normalized":
        size = torch.ones_like(size)
    loc = ref_points[:, :, None, None, None, :] + offsets / size[:, None, :]
    out = msda_reference(v, shapes, loc, attn)
    return _lin(s, "out_proj", _merge(out, M, mistake))


MSDA_LAYER_MISTAKES = {
    "norm_hw": "offsets divided by (H_l, W_l): spatial_shapes rows are (H, W), so dx divides by "
               "W_l and dy by H_l",
    "softmax_per_level": "a softmax per level: the L * K weights of a head share one softmax",
    "norm_first_level": "every level's offsets divided by the first level's size: level l uses "
                        "its own (W_l, H_l)",
    "not_normalized": "offsets added to the normalized reference point without dividing by "
                      "(W_l, H_l)",
    **COMMON_MISTAKES,
}


def _double(state):
    return {name: t.double() for name, t in state.items()}


def _variants(fn, mistakes, *args):
    return {name: (fn(*args, mistake=name), why) for name, why in mistakes.items()}


def _expect_layer(result, ref, state, what, case, variants):
    _expect_structure(result, state, what)
    expect_close(result.get("out"), ref, what=what, case=case, dtype=torch.float32,
                 expect_dtype=torch.float32, variants=variants)


# == Task 0.3: DeformableAttention ================================================================
SELF_LAYERS = (
    Layer("two_heads", C=8, M=2, K=3, B=2, shapes=((5, 6),), seed=130),
    Layer("odd_single_point", C=9, M=3, K=1, B=1, shapes=((4, 7),), seed=131),
)


def _self_setup(layer: Layer, zero_predictors=False):
    state = _layer_state(layer, layer.M * layer.K * 2, layer.M * layer.K, zero_predictors)
    (H, W), = layer.shapes
    x = torch.randn(layer.B, H, W, layer.C, generator=seeded_generator(layer.seed + 1000))
    return state, x


def _run_self(submission, layer, state, x, **kwargs):
    return submission.run(_probe_layer, "DeformableAttention", (layer.C, layer.M, layer.K), state,
                          (x,), parts=("bilinear_sample", "deform_attend"), **kwargs)


@pytest.mark.task("0.3", points=1)
def test_self_attention_structure_and_shape(submission):
    layer = SELF_LAYERS[0]
    state, x = _self_setup(layer)
    result = _run_self(submission, layer, state, x)
    what = f"DeformableAttention({layer.C}, {layer.M}, {layer.K})"
    _expect_structure(result, state, what, exact=True)
    expect_tensor(result.get("out"), f"{what} on x {tuple(x.shape)}", shape=x.shape,
                  dtype=torch.float32)


@pytest.mark.task("0.3", points=1)
def test_self_attention_collapses_with_zero_predictors(submission):
    # Zero offsets put every point on its own pixel centre, zero logits weigh the points 1/K: the
    # layer must then be out_proj(value_proj(x)), position by position.
    layer = SELF_LAYERS[0]
    state, x = _self_setup(layer, zero_predictors=True)
    result = _run_self(submission, layer, state, x)
    s, x64 = _double(state), x.double()
    _expect_layer(result, _lin(s, "out_proj", _lin(s, "value_proj", x64)), state,
                  "DeformableAttention with offset_proj and weight_proj zeroed (must reduce to "
                  "out_proj(value_proj(x)))", layer.describe(),
                  _variants(_ref_self, SELF_MISTAKES, s, x64, layer.M, layer.K))


@pytest.mark.task("0.3", points=1)
@pytest.mark.parametrize("layer", SELF_LAYERS, ids=lambda c: c.id)
def test_self_attention_random_offsets(submission, layer):
    state, x = _self_setup(layer)
    result = _run_self(submission, layer, state, x)
    s, x64 = _double(state), x.double()
    _expect_layer(result, _ref_self(s, x64, layer.M, layer.K), state,
                  "DeformableAttention with random non-zero offsets", layer.describe(),
                  _variants(_ref_self, SELF_MISTAKES, s, x64, layer.M, layer.K))


@pytest.mark.task("0.3", points=1)
def test_self_attention_gradients(submission):
    layer = SELF_LAYERS[0]
    state, x = _self_setup(layer)
    grad_out = torch.randn(x.shape, generator=seeded_generator(layer.seed + 2000))
    result = _run_self(submission, layer, state, x, grad_out=grad_out,
                       grad_params=("offset_proj.weight",))
    _expect_structure(result, state, "DeformableAttention")
    s, x64 = _double(state), x.double().requires_grad_()
    s["offset_proj.weight"].requires_grad_()
    out = _ref_self(s, x64, layer.M, layer.K)
    refs = torch.autograd.grad(out, [s["offset_proj.weight"], x64], grad_out.double())
    _expect_grads(result, refs,
                  ["DeformableAttention: gradient reaching offset_proj.weight",
                   "DeformableAttention: gradient reaching x"],
                  "without it the layer cannot learn where to look; " + NO_GRADIENT,
                  torch.float32)


# == Task 0.4: DeformableCrossAttention ===========================================================
CROSS_LAYERS = (
    Layer("two_heads", C=8, M=2, K=3, B=2, Q=5, shapes=((6, 7),), seed=140),
    Layer("one_head_odd_map", C=6, M=1, K=2, B=1, Q=7, shapes=((3, 5),), seed=141),
)


def _cross_setup(layer: Layer, zero_predictors=False):
    state = _layer_state(layer, layer.M * layer.K * 2, layer.M * layer.K, zero_predictors)
    (H, W), = layer.shapes
    gen = seeded_generator(layer.seed + 1000)
    query = torch.randn(layer.B, layer.Q, layer.C, generator=gen)
    ref_points = torch.rand(layer.B, layer.Q, 2, generator=gen)
    value = torch.randn(layer.B, H, W, layer.C, generator=gen)
    return state, (query, ref_points, value)


def _run_cross(submission, layer, state, inputs, **kwargs):
    return submission.run(_probe_layer, "DeformableCrossAttention", (layer.C, layer.M, layer.K),
                          state, inputs, parts=("bilinear_sample", "deform_attend"), **kwargs)


def _cross_ref(layer, state, inputs, mistake=None):
    query, ref_points, value = (t.double() for t in inputs)
    return _ref_cross(_double(state), query, ref_points, value, layer.M, layer.K, mistake)


def _cross_variants(layer, state, inputs):
    return {name: (_cross_ref(layer, state, inputs, name), why)
            for name, why in CROSS_MISTAKES.items()}


@pytest.mark.task("0.4", points=1)
def test_cross_attention_structure_and_shape(submission):
    layer = CROSS_LAYERS[0]
    state, inputs = _cross_setup(layer)
    result = _run_cross(submission, layer, state, inputs)
    what = f"DeformableCrossAttention({layer.C}, {layer.M}, {layer.K})"
    _expect_structure(result, state, what, exact=True)
    expect_tensor(result.get("out"), f"{what} on query {tuple(inputs[0].shape)}, value "
                                     f"{tuple(inputs[2].shape)}",
                  shape=inputs[0].shape, dtype=torch.float32)


@pytest.mark.task("0.4", points=1)
def test_cross_attention_collapses_to_lookup(submission):
    # Zeroed predictors: each query reads value_proj(value) at its reference point, one bilinear
    # lookup of all C channels, then out_proj.
    layer = CROSS_LAYERS[0]
    state, inputs = _cross_setup(layer, zero_predictors=True)
    result = _run_cross(submission, layer, state, inputs)
    s = _double(state)
    query, ref_points, value = (t.double() for t in inputs)
    projected = _lin(s, "value_proj", value).permute(0, 3, 1, 2)  # [B, C, H, W]
    grid = (2 * ref_points - 1).unsqueeze(2)  # [B, Q, 1, 2]
    looked_up = F.grid_sample(projected, grid, mode="bilinear", padding_mode="zeros",
                              align_corners=False)[..., 0].transpose(1, 2)  # [B, Q, C]
    _expect_layer(result, _lin(s, "out_proj", looked_up), state,
                  "DeformableCrossAttention with offset_proj and weight_proj zeroed (must reduce "
                  "to a bilinear lookup at the reference points)", layer.describe(),
                  _cross_variants(layer, state, inputs))


@pytest.mark.task("0.4", points=1)
@pytest.mark.parametrize("layer", CROSS_LAYERS, ids=lambda c: c.id)
def test_cross_attention_random_offsets(submission, layer):
    state, inputs = _cross_setup(layer)
    result = _run_cross(submission, layer, state, inputs)
    _expect_layer(result, _cross_ref(layer, state, inputs), state,
                  "DeformableCrossAttention with random non-zero offsets", layer.describe(),
                  _cross_variants(layer, state, inputs))


@pytest.mark.task("0.4", points=1)
def test_cross_attention_gradients(submission):
    layer = CROSS_LAYERS[0]
    state, inputs = _cross_setup(layer)
    grad_out = torch.randn(layer.B, layer.Q, layer.C, generator=seeded_generator(layer.seed + 2000))
    result = _run_cross(submission, layer, state, inputs, grad_out=grad_out,
                        grad_params=("offset_proj.weight",))
    _expect_structure(result, state, "DeformableCrossAttention")
    s = _double(state)
    s["offset_proj.weight"].requires_grad_()
    leaves = [t.double().requires_grad_() for t in inputs]
    out = _ref_cross(s, *leaves, layer.M, layer.K)
    refs = torch.autograd.grad(out, [s["offset_proj.weight"], *leaves], grad_out.double())
    _expect_grads(result, refs,
                  ["DeformableCrossAttention: gradient reaching offset_proj.weight",
                   "DeformableCrossAttention: gradient reaching query",
                   "DeformableCrossAttention: gradient reaching reference_points",
                   "DeformableCrossAttention: gradient reaching value"],
                  NO_GRADIENT, torch.float32)


# == Task 0.5: msda ===============================================================================
def _msda_variants(inputs):
    value, shapes, _starts, loc, attn = inputs
    B, Q, M, L, K = attn.shape
    v, lc, a = value.double(), loc.double(), attn.double()
    found = msda_variants(inputs, FORWARD_MISTAKES + ("unweighted",))
    found.update({
        "grid_is_loc": (msda_reference(v, shapes, (lc + 1) / 2, a),
                        "the normalized locations handed to grid_sample as they are: its grid is "
                        "2 * loc - 1, in [-1, 1]"),
        "softmax_again": (msda_reference(v, shapes, lc, a.reshape(B, Q, M, L * K).softmax(-1)
                                         .reshape(B, Q, M, L, K)),
                          "the attention weights softmaxed again inside msda: they arrive ready "
                          "to use"),
    })
    return found


@pytest.mark.task("0.5", points=1)
@pytest.mark.parametrize("case", STANDARD_CASES, ids=lambda c: c.id)
def test_msda_standard_cases(submission, case):
    inputs = make_inputs(case, torch.float64)
    value, shapes, _starts, loc, attn = inputs
    res = submission.run(_probe_function, "msda", (value, shapes, loc, attn))["out"]
    expect_close(res, msda_reference(value, shapes, loc, attn), what="msda (float64)",
                 case=case.describe(), dtype=torch.float64, expect_dtype=torch.float64,
                 variants=_msda_variants(inputs))


@pytest.mark.task("0.5", points=1)
def test_msda_float32(submission):
    case = STANDARD_CASES[2]  # out of bounds, odd D
    inputs = make_inputs(case, torch.float32)
    value, shapes, _starts, loc, attn = inputs
    res = submission.run(_probe_function, "msda", (value, shapes, loc, attn))["out"]
    expect_close(res, msda_reference(value.double(), shapes, loc.double(), attn.double()),
                 what="msda (float32)", case=case.describe(), dtype=torch.float32,
                 expect_dtype=torch.float32, variants=_msda_variants(inputs))


@pytest.mark.task("0.5", points=1)
def test_msda_gradients(submission):
    case = MULTI_LEVEL
    value, shapes, _starts, loc, attn = make_inputs(case, torch.float32)
    grad_out = torch.randn(case.B, case.Q, case.M * case.D, generator=seeded_generator(7))
    result = submission.run(_probe_function, "msda", (value, shapes, loc, attn), grad_out=grad_out)
    refs = reference_grads(value, shapes, loc, attn, grad_out)
    names = ("value", "sampling_locations", "attention_weights")
    _expect_grads(result, refs, [f"gradient of msda with respect to {n} on {case.describe()}"
                                 for n in names], NO_GRADIENT, torch.float32)


@pytest.mark.task("0.5", points=1)
def test_msda_one_grid_sample_per_level(submission):
    case = MULTI_LEVEL  # B=2, M=2, L=2
    value, shapes, _starts, loc, attn = make_inputs(case, torch.float64)
    calls = submission.run(_probe_function, "msda", (value, shapes, loc, attn), count=True)["calls"]
    if calls != case.L:
        raise AssertionError(f"rule: msda must make one grid_sample call per level, with batch and "
                             f"heads together in the image's first axis (B * M); on "
                             f"{case.describe()} it made {calls} calls for {case.L} levels")


# == Task 0.6: MSDACrossAttention =================================================================
MSDA_LAYERS = (
    Layer("two_levels", C=8, M=2, K=3, B=2, Q=5, shapes=((5, 7), (3, 4)), seed=160),
    Layer("three_levels_odd", C=6, M=2, K=2, B=1, Q=3, shapes=((6, 4), (3, 2), (1, 1)), seed=161),
)


def _msda_setup(layer: Layer, zero_predictors=False):
    MLK = layer.M * layer.L * layer.K
    state = _layer_state(layer, MLK * 2, MLK, zero_predictors)
    S = sum(h * w for h, w in layer.shapes)
    gen = seeded_generator(layer.seed + 1000)
    query = torch.randn(layer.B, layer.Q, layer.C, generator=gen)
    ref_points = torch.rand(layer.B, layer.Q, 2, generator=gen)
    value = torch.randn(layer.B, S, layer.C, generator=gen)
    shapes = torch.tensor(layer.shapes, dtype=torch.int64)
    return state, (query, ref_points, value, shapes)


def _run_msda_layer(submission, layer, state, inputs, **kwargs):
    return submission.run(_probe_layer, "MSDACrossAttention", (layer.C, layer.M, layer.L, layer.K),
                          state, inputs, parts=("bilinear_sample", "deform_attend", "msda"),
                          **kwargs)


def _msda_layer_ref(layer, state, inputs, mistake=None):
    query, ref_points, value, shapes = inputs
    return _ref_msda_layer(_double(state), query.double(), ref_points.double(), value.double(),
                           shapes, layer.M, layer.L, layer.K, mistake)


def _msda_layer_variants(layer, state, inputs):
    return {name: (_msda_layer_ref(layer, state, inputs, name), why)
            for name, why in MSDA_LAYER_MISTAKES.items()}


@pytest.mark.task("0.6", points=1)
def test_msda_layer_structure_and_shape(submission):
    layer = MSDA_LAYERS[0]
    state, inputs = _msda_setup(layer)
    result = _run_msda_layer(submission, layer, state, inputs)
    what = f"MSDACrossAttention({layer.C}, {layer.M}, {layer.L}, {layer.K})"
    _expect_structure(result, state, what, exact=True)
    expect_tensor(result.get("out"), f"{what} on query {tuple(inputs[0].shape)}, value "
                                     f"{tuple(inputs[2].shape)}",
                  shape=inputs[0].shape, dtype=torch.float32)


@pytest.mark.task("0.6", points=1)
def test_msda_layer_collapses_with_zero_predictors(submission):
    # Zeroed predictors: every point of every level sits on the reference point, and each of the
    # L * K points weighs 1 / (L * K).
    layer = MSDA_LAYERS[0]
    state, inputs = _msda_setup(layer, zero_predictors=True)
    result = _run_msda_layer(submission, layer, state, inputs)
    s = _double(state)
    query, ref_points, value, shapes = inputs
    B, Q, M, L, K = layer.B, layer.Q, layer.M, layer.L, layer.K
    projected = _lin(s, "value_proj", value.double()).reshape(B, -1, M, layer.C // M)
    loc = ref_points.double()[:, :, None, None, None, :].expand(B, Q, M, L, K, 2)
    uniform = torch.full((B, Q, M, L, K), 1.0 / (L * K), dtype=torch.float64)
    expected = _lin(s, "out_proj", msda_reference(projected, shapes, loc, uniform))
    _expect_layer(result, expected, state,
                  "MSDACrossAttention with offset_proj and weight_proj zeroed (every point on "
                  "the reference point, weights 1 / (L * K))", layer.describe(),
                  _msda_layer_variants(layer, state, inputs))


@pytest.mark.task("0.6", points=1)
@pytest.mark.parametrize("layer", MSDA_LAYERS, ids=lambda c: c.id)
def test_msda_layer_random_offsets(submission, layer):
    state, inputs = _msda_setup(layer)
    result = _run_msda_layer(submission, layer, state, inputs)
    _expect_layer(result, _msda_layer_ref(layer, state, inputs), state,
                  "MSDACrossAttention with random non-zero offsets", layer.describe(),
                  _msda_layer_variants(layer, state, inputs))


@pytest.mark.task("0.6", points=1)
def test_msda_layer_gradients(submission):
    layer = MSDA_LAYERS[0]
    state, inputs = _msda_setup(layer)
    grad_out = torch.randn(layer.B, layer.Q, layer.C, generator=seeded_generator(layer.seed + 2000))
    result = _run_msda_layer(submission, layer, state, inputs, grad_out=grad_out,
                             grad_params=("offset_proj.weight",))
    _expect_structure(result, state, "MSDACrossAttention")
    s = _double(state)
    s["offset_proj.weight"].requires_grad_()
    leaves = [t.double().requires_grad_() for t in inputs[:3]]
    out = _ref_msda_layer(s, *leaves, inputs[3], layer.M, layer.L, layer.K)
    refs = torch.autograd.grad(out, [s["offset_proj.weight"], *leaves], grad_out.double())
    _expect_grads(result, refs,
                  ["MSDACrossAttention: gradient reaching offset_proj.weight",
                   "MSDACrossAttention: gradient reaching query",
                   "MSDACrossAttention: gradient reaching reference_points",
                   "MSDACrossAttention: gradient reaching value"],
                  NO_GRADIENT, torch.float32)
