"""Self-check examples of the labs written in plain PyTorch: 00, 01, 02, 03 and 07."""

from __future__ import annotations

import torch

from msda_labs.student import memsim, spec
from msda_labs.student.selfcheck import Case, Step, describe, small_inputs

F64 = torch.float64


def _image_and_points(seed: int, n: int):
    """A 5x7 image with D = 3 and ``n`` pixel positions, some of them outside the image."""
    gen = torch.Generator().manual_seed(seed)
    img = torch.randn(5, 7, 3, generator=gen)
    points = torch.rand(n, 2, generator=gen) * torch.tensor([9.0, 7.0]) - 1.0
    return img, points


# -- lab 00 ---------------------------------------------------------------------------------------
def _bilinear_sample_00(_ns=None) -> Case:
    img, points = _image_and_points(0, 12)
    return Case("a 5x7 image (D=3) at 12 pixel positions, some outside",
                {"img": img, "points": points}, lambda fn: fn(img, points),
                lambda: spec.bilinear_pixels(img, points))


def _deform_attend(_ns=None) -> Case:
    img, points = _image_and_points(1, 12)
    points = points.view(4, 3, 2)
    weights = torch.rand(4, 3, generator=torch.Generator().manual_seed(2))
    return Case("a 5x7 map (D=3), Q=4 queries of K=3 points",
                {"value": img, "points": points, "weights": weights},
                lambda fn: fn(img, points, weights),
                lambda: spec.deform_attend(img, points, weights))


_PROJECTIONS = ("value_proj", "offset_proj", "weight_proj", "out_proj")


def _layer(cls, *args):
    """The student's layer with fixed weights (as the grader does, so that how it initialises
    them never matters): the four projections must exist, with the spec's sizes."""
    torch.manual_seed(0)
    layer = cls(*args)
    missing = [n for n in _PROJECTIONS if not isinstance(getattr(layer, n, None), torch.nn.Linear)]
    if missing:
        raise AttributeError(f"the layer has no nn.Linear {', '.join(missing)} (the grader loads "
                             f"its weights by these names)")
    C, M, *rest = args
    points = M * rest[0] * (rest[1] if len(rest) > 1 else 1)  # heads * levels * points
    sizes = {"value_proj": (C, C), "offset_proj": (C, 2 * points), "weight_proj": (C, points),
             "out_proj": (C, C)}
    gen = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for name in _PROJECTIONS:
            proj = getattr(layer, name)
            if (proj.in_features, proj.out_features) != sizes[name] or proj.bias is None:
                raise AttributeError(
                    f"the layer's {name} maps {proj.in_features} -> {proj.out_features} features"
                    f"{'' if proj.bias is not None else ' without a bias'}; the spec's maps "
                    f"{sizes[name][0]} -> {sizes[name][1]}, with a bias (embed_dim={C}, "
                    f"num_heads={M}, and the points and levels of the handout)")
            bound = proj.in_features ** -0.5
            proj.weight.copy_((2 * torch.rand(proj.weight.shape, generator=gen) - 1) * bound)
            proj.bias.copy_((2 * torch.rand(proj.bias.shape, generator=gen) - 1) * bound)
        # Offsets of about a pixel: the points move, and most stay inside the map, so that a
        # shifted query shows in each query.
        layer.offset_proj.weight.mul_(2.0)
    return layer


def _deformable_attention(_ns=None) -> Case:
    x = torch.randn(1, 4, 5, 8, generator=torch.Generator().manual_seed(3))
    made = {}

    def call(cls):
        made["layer"] = layer = _layer(cls, 8, 2, 3)
        with torch.no_grad():
            return layer(x)

    return Case("a 4x5 map, embed_dim=8, num_heads=2, num_points=3",
                {"x": x}, call, lambda: spec.deformable_attention(made["layer"], x))


def _deformable_cross_attention(_ns=None) -> Case:
    gen = torch.Generator().manual_seed(4)
    query, ref = torch.randn(1, 6, 8, generator=gen), torch.rand(1, 6, 2, generator=gen)
    value = torch.randn(1, 4, 5, 8, generator=gen)
    made = {}

    def call(cls):
        made["layer"] = layer = _layer(cls, 8, 2, 3)
        with torch.no_grad():
            return layer(query, ref, value)

    return Case("6 queries and a 4x5 map, embed_dim=8, num_heads=2, num_points=3",
                {"query": query, "reference_points": ref, "value": value}, call,
                lambda: spec.deformable_cross_attention(made["layer"], query, ref, value))


def _msda_00(_ns=None) -> Case:
    inputs = small_inputs()
    value, shapes, _, loc, attn = inputs
    return Case(describe(inputs), {"value": value, "sampling_locations": loc},
                lambda fn: fn(value, shapes, loc, attn),
                lambda: spec.msda(value, shapes, loc, attn))


def _msda_cross_attention(_ns=None) -> Case:
    gen = torch.Generator().manual_seed(5)
    shapes = torch.tensor([[5, 7], [3, 4]])
    query, ref = torch.randn(1, 5, 8, generator=gen), torch.rand(1, 5, 2, generator=gen)
    value = torch.randn(1, 47, 8, generator=gen)
    made = {}

    def call(cls):
        made["layer"] = layer = _layer(cls, 8, 2, 2, 2)
        with torch.no_grad():
            return layer(query, ref, value, shapes)

    return Case("5 queries, levels 5x7 and 3x4, embed_dim=8, num_heads=2, num_points=2",
                {"query": query, "value": value}, call,
                lambda: spec.msda_cross_attention(made["layer"], query, ref, value, shapes))


# -- lab 01 ---------------------------------------------------------------------------------------
def _bilinear_sample_01(_ns=None) -> Case:
    img, points = _image_and_points(6, 12)
    img, points = img.to(F64), points.to(F64)

    def call(fn):
        return torch.stack([fn(img, x, y) for x, y in points.tolist()])

    return Case("a 5x7 float64 image (D=3), one call per pixel position (12, some outside)",
                {"img": img, "points": points}, call, lambda: spec.bilinear_pixels(img, points),
                dtype=F64)


def _msda_naive(_ns=None) -> Case:
    inputs = small_inputs(B=1, Q=4)
    value, shapes, _, loc, attn = (t.to(F64) if t.is_floating_point() else t for t in inputs)
    return Case(describe(inputs) + ", float64", {"value": value, "sampling_locations": loc},
                lambda fn: fn(value, shapes, loc, attn),
                lambda: spec.msda(value, shapes, loc, attn), dtype=F64)


# -- lab 02 ---------------------------------------------------------------------------------------
POSITIONS = ((0, 0, 0, 0), (1, 2, 1, 3), (3, 1_000_003, 7, 63))
SIZES = (1_048_576, 8, 64)


def _flat_index(_ns=None) -> Case:
    return Case(f"3 positions in a (B, {SIZES[0]}, {SIZES[1]}, {SIZES[2]}) tensor",
                {"positions": POSITIONS},
                lambda fn: tuple(fn(*p, *SIZES) for p in POSITIONS),
                lambda: tuple(spec.flat_offset(p, (4, *SIZES)) for p in POSITIONS),
                names=tuple(f"flat_index{p}" for p in POSITIONS))


def _flat_msda(_ns=None) -> Case:
    inputs = small_inputs()
    value, shapes, starts, loc, attn = inputs
    return Case(describe(inputs), {"value": value, "sampling_locations": loc},
                lambda fn: fn(value, shapes, starts, loc, attn),
                lambda: spec.msda(value, shapes, loc, attn))


TENSORS = ((2, 1000, 8, 32), (4, 2 ** 20, 8, 64), (1, 2 ** 25 + 1, 1, 64))


def _last_offset(B, S, M, D):
    return spec.flat_offset((B - 1, S - 1, M - 1, D - 1), (B, S, M, D))


def _max_flat_index(_ns=None) -> Case:
    return Case("three tensor sizes, small to past int32", {"sizes": TENSORS},
                lambda fn: tuple(fn(*s) for s in TENSORS),
                lambda: tuple(_last_offset(*s) for s in TENSORS),
                names=tuple(f"max_flat_index{s}" for s in TENSORS))


def _overflows_int32(_ns=None) -> Case:
    return Case("three tensor sizes, small to past int32", {"sizes": TENSORS},
                lambda fn: tuple(fn(*s) for s in TENSORS),
                lambda: tuple(_last_offset(*s) > 2 ** 31 - 1 for s in TENSORS),
                names=tuple(f"overflows_int32{s}" for s in TENSORS))


# -- lab 03 ---------------------------------------------------------------------------------------
def _patterns():
    return (memsim.strided(3, n=100, itemsize=4), memsim.random_gather(n=64, seed=3),
            memsim.msda_query_block(n_queries=8, D=8, itemsize=2, seed=1))


def _sectors_touched(_ns=None) -> Case:
    patterns = _patterns()
    return Case("three small patterns: strided, random, query-block",
                {p.name: f"{len(p.warps)} warp loads" for p in patterns},
                lambda fn: tuple(fn(p) for p in patterns),
                lambda: tuple(spec.sectors(p.warps) for p in patterns),
                names=tuple(f"sectors_touched({p.name})" for p in patterns))


def _efficiency(_ns=None) -> Case:
    patterns = _patterns()
    return Case("three small patterns: strided, random, query-block",
                {p.name: f"{p.useful_bytes} useful bytes" for p in patterns},
                lambda fn: tuple(fn(p) for p in patterns),
                lambda: tuple(p.useful_bytes / (spec.sectors(p.warps) * 32) for p in patterns),
                names=tuple(f"efficiency({p.name})" for p in patterns), exact=False)


SIZES_03 = dict(B=1, Q=3, M=2, D=4, L=2, K=2, itemsize=2)


def _forward_min_bytes(_ns=None) -> Case:
    return Case(f"a tiny forward {SIZES_03}", SIZES_03, lambda fn: fn(**SIZES_03),
                lambda: spec.forward_bytes(**SIZES_03))


def _tiling_speedup(_ns=None) -> Case:
    # D = 8: the answer (8.0) is not the defaults' (16.0), so a hard-coded one shows.
    args = dict(n_queries=64, D=8, itemsize=2, seed=1)

    def expected():
        block = memsim.msda_query_block(**args)
        point = memsim.msda_point_parallel(**args)
        eff = [p.useful_bytes / (spec.sectors(p.warps) * 32) for p in (block, point)]
        return eff[0] / eff[1]

    return Case(f"both tilings with {args}", args, lambda fn: fn(**args), expected, exact=False)


# -- lab 07 ---------------------------------------------------------------------------------------
def _backward_case(ns, which: str) -> Case:
    if ns is None or "gather_corners" not in ns:
        raise KeyError("lab 07's cases need the module's gather_corners: case(7, name, lab07)")
    inputs = small_inputs()
    value, shapes, _, loc, attn = inputs
    B, Q, M, D = value.shape[0], loc.shape[1], value.shape[2], value.shape[3]
    grad_out = torch.randn(B, Q, M * D, generator=torch.Generator().manual_seed(7))
    g = grad_out.view(B, Q, M, D)
    corners = ns["gather_corners"](value, shapes, None, loc)
    grads = {}

    def expected():
        if not grads:
            grads["v"], grads["loc"], grads["attn"] = spec.msda_grads(value, shapes, loc, attn,
                                                                      grad_out)
        return {"attn": grads["attn"], "loc": grads["loc"],
                "value": grads["v"].reshape(-1, D)}[which]

    calls = {
        "attn": lambda fn: fn(corners, g),
        "loc": lambda fn: fn(corners, g, attn),
        "value": lambda fn: fn(torch.zeros(value.numel() // D, D), corners, g, attn),
    }
    return Case(describe(inputs) + ", a random grad_out", {"value": value, "grad_out": grad_out},
                calls[which], expected, names=(f"grad_{which}",), backward=True,
                spec_name="autograd through msda_labs.student.spec.msda")


STEPS = {
    0: lambda: [Step("0.1", "bilinear_sample", _bilinear_sample_00),
                Step("0.2", "deform_attend", _deform_attend),
                Step("0.3", "DeformableAttention", _deformable_attention),
                Step("0.4", "DeformableCrossAttention", _deformable_cross_attention),
                Step("0.5", "msda", _msda_00),
                Step("0.6", "MSDACrossAttention", _msda_cross_attention)],
    1: lambda: [Step("1.1", "bilinear_sample", _bilinear_sample_01),
                Step("1.2", "msda_naive_student", _msda_naive)],
    2: lambda: [Step("2.1", "flat_index", _flat_index),
                Step("2.2", "flat_msda", _flat_msda),
                Step("2.3", "max_flat_index", _max_flat_index),
                Step("2.3", "overflows_int32", _overflows_int32)],
    3: lambda: [Step("3.1", "sectors_touched", _sectors_touched),
                Step("3.1", "efficiency", _efficiency),
                Step("3.2", "forward_min_bytes", _forward_min_bytes),
                Step("3.3", "tiling_speedup", _tiling_speedup)],
    7: lambda: [Step("7.1", "grad_attention_weights", lambda ns: _backward_case(ns, "attn")),
                Step("7.2", "grad_sampling_locations", lambda ns: _backward_case(ns, "loc")),
                Step("7.3", "scatter_grad_value", lambda ns: _backward_case(ns, "value"))],
}
