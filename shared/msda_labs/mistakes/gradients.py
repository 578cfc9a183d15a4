"""Known backward mistakes: what a wrong gradient looks like, for feedback (labs 07, 08).

:func:`msda_backward_variant` is an independent float64 implementation of the three MSDA gradients
(checked against autograd of the reference by the kit's self-test). Each known mistake is a small
function registered in :data:`GRAD`, explained once per output it shows in, that rebuilds only the
outputs it changes from the same parts (:class:`Parts`); :func:`grad_variants` turns them into the
``variants=`` argument of ``expect_close``. Lost updates (a scatter that keeps one of several writes
to the same element) depend on which write wins, so they are recognised by
:func:`lost_update_grad_value` on inputs built so that every write to an element is the same number.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from msda_labs.mistakes.registry import Catalogue
from msda_labs.truth.reference import level_starts

__all__ = [
    "GRAD",
    "GRAD_MISTAKES",
    "GRAD_OUTPUTS",
    "Parts",
    "msda_backward_variant",
    "grad_variants",
    "lost_update_grad_value",
    "LOST_UPDATES",
]

# The three outputs, in the order every backward returns them.
GRAD_OUTPUTS = ("grad_value", "grad_loc", "grad_attn")

# Each mistake explains itself per output it shows in: {output: 'what: why'}. An output that a
# mistake leaves unchanged has no entry, so feedback never names a mistake where it cannot be seen.
GRAD = Catalogue("backward")

LOST_UPDATES = (
    "lost updates: of several writes racing into the same grad_value element, a "
    "non-accumulating scatter keeps one and drops the rest; a scatter must accumulate "
    "(index_add_ or index_put_(accumulate=True) in torch, tl.atomic_add in a kernel)"
)

_CORNERS = ((0, 0), (0, 1), (1, 0), (1, 1))  # (dy, dx), row first: 00, 01, 10, 11


@dataclass
class Parts:
    """What the three gradients are made of, for one input case (float64, CPU).

    Attributes:
        g: upstream gradient, [B, Q, M, 1, 1, D].
        attn: attention weights, [B, Q, M, L, K].
        fx, fy: the fractional pixel coordinates, [B, Q, M, L, K].
        w, h: each level's width and height as float64, [L, 1].
        reads: the four corner values (0 where a corner does not count), each [B, Q, M, L, K, D].
        weights: the four bilinear weights, each [B, Q, M, L, K].
        rows: each corner's row of value viewed as (B * S * M, D), clamped into the image.
        raw_rows: the same rows unchecked (what an unmasked address points at).
        valid: whether each corner counts.
        shape: (B, S, M, D) of value.
    """

    g: torch.Tensor
    attn: torch.Tensor
    fx: torch.Tensor
    fy: torch.Tensor
    w: torch.Tensor
    h: torch.Tensor
    reads: list
    weights: list
    rows: list
    raw_rows: list
    valid: list
    shape: tuple


def gather_parts(inputs, grad_out, *, clamp_reads: bool = False) -> Parts:
    """The parts of the gradients; ``clamp_reads`` makes an outside corner read its border pixel."""
    value, shapes, starts, loc, attn = inputs
    v = value.detach().to("cpu", torch.float64)
    loc = loc.detach().to("cpu", torch.float64)
    attn = attn.detach().to("cpu", torch.float64)
    shapes = torch.as_tensor(shapes).to("cpu", torch.int64)
    starts = (
        level_starts(shapes) if starts is None else torch.as_tensor(starts).to("cpu", torch.int64)
    )
    B, S, M, D = v.shape
    _, Q, _, L, K, _ = loc.shape
    g = grad_out.detach().to("cpu", torch.float64).reshape(B, Q, M, 1, 1, D)
    rows_all = v.reshape(B * S * M, D)
    hi, wi = shapes[:, 0].view(L, 1), shapes[:, 1].view(L, 1)
    h, w = hi.double(), wi.double()
    px = loc[..., 0] * w - 0.5  # [B, Q, M, L, K]
    py = loc[..., 1] * h - 0.5
    fx0, fy0 = torch.floor(px), torch.floor(py)
    x0, y0 = fx0.long(), fy0.long()
    fx, fy = px - fx0, py - fy0
    b_idx = torch.arange(B).view(B, 1, 1, 1, 1)
    m_idx = torch.arange(M).view(1, 1, M, 1, 1)
    start = starts.view(L, 1)
    parts = Parts(g, attn, fx, fy, w, h, [], [], [], [], [], (B, S, M, D))
    for dy, dx in _CORNERS:
        xc, yc = x0 + dx, y0 + dy
        inside = (xc >= 0) & (xc < wi) & (yc >= 0) & (yc < hi)
        xcl = torch.minimum(torch.clamp(xc, min=0), wi - 1)
        ycl = torch.minimum(torch.clamp(yc, min=0), hi - 1)
        row = (b_idx * S + start + ycl * wi + xcl) * M + m_idx
        valid = torch.ones_like(inside) if clamp_reads else inside
        parts.reads.append(rows_all[row] * valid[..., None])
        parts.weights.append((fx if dx else 1 - fx) * (fy if dy else 1 - fy))
        parts.rows.append(row)
        parts.raw_rows.append((b_idx * S + start + yc * wi + xc) * M + m_idx)
        parts.valid.append(valid)
    return parts


def attn_gradient(parts: Parts, weights=None) -> torch.Tensor:
    """grad_attn = <g, sampled>, sampled the weighted sum of the four corners."""
    weights = parts.weights if weights is None else weights
    sampled = sum(wt[..., None] * r for wt, r in zip(weights, parts.reads))
    return (parts.g * sampled).sum(-1)


def loc_gradient(parts: Parts, scale=None, factors=None) -> torch.Tensor:
    """grad_loc = A * (W, H) * <g, d sampled / d (x_pix, y_pix)>: ``scale`` A, ``factors`` W, H."""
    scale = parts.attn if scale is None else scale
    fac_x, fac_y = (parts.w, parts.h) if factors is None else factors
    v00, v01, v10, v11 = parts.reads
    lx, ly = parts.fx[..., None], parts.fy[..., None]
    d_x = (v01 - v00) * (1 - ly) + (v11 - v10) * ly
    d_y = (v10 - v00) * (1 - lx) + (v11 - v01) * lx
    gx = scale * fac_x * (parts.g * d_x).sum(-1)
    gy = scale * fac_y * (parts.g * d_y).sum(-1)
    return torch.stack((gx, gy), dim=-1)


def value_gradient(parts: Parts, share=None, weights=None, targets=None, keeps=None):
    """grad_value: each corner's row receives ``share`` (A) * w_c * g, if the corner counts."""
    B, S, M, D = parts.shape
    share = parts.attn[..., None] if share is None else share
    weights = parts.weights if weights is None else weights
    targets = parts.rows if targets is None else targets
    keeps = parts.valid if keeps is None else keeps
    grad_rows = torch.zeros(B * S * M, D, dtype=torch.float64)
    for wt, target, keep in zip(weights, targets, keeps):
        contrib = share * wt[..., None] * parts.g * keep[..., None]
        grad_rows.index_add_(0, target.reshape(-1), contrib.reshape(-1, D))
    return grad_rows.view(B, S, M, D)


def _ones(tensors):
    return [torch.ones_like(t) for t in tensors]


@GRAD.register("no_wh", {
    "grad_loc": "a missing W/H chain factor: x_pix = x * W - 0.5, so dL/dx = W * dL/dx_pix "
    "(and H for y)",
})
def no_wh(parts: Parts) -> dict:
    return {"grad_loc": loc_gradient(parts, factors=(1.0, 1.0))}


@GRAD.register("swap_wh", {
    "grad_loc": "W and H swapped in the chain factor: the x gradient carries the width W, "
    "the y gradient the height H",
})
def swap_wh(parts: Parts) -> dict:
    return {"grad_loc": loc_gradient(parts, factors=(parts.h, parts.w))}


@GRAD.register("swap_xy", {
    "grad_loc": "x and y swapped in grad_loc: the last axis is (x, y), x first",
})
def swap_xy(parts: Parts) -> dict:
    return {"grad_loc": loc_gradient(parts).flip(-1)}


@GRAD.register("flipped_difference", {
    "grad_loc": "a corner difference taken the wrong way round: d/dx_pix is right minus left "
    "(v01 - v00, v11 - v10), d/dy_pix is bottom minus top (v10 - v00, v11 - v01)",
})
def flipped_difference(parts: Parts) -> dict:
    return {"grad_loc": -loc_gradient(parts)}


@GRAD.register("no_attn", {
    "grad_loc": "the attention weight left out of grad_loc: the sample enters the output "
    "scaled by A, so its location's gradient is too",
    "grad_value": "the attention weight left out of grad_value: each corner receives "
    "A * w_c * g, not w_c * g",
})
def no_attn(parts: Parts) -> dict:
    return {"grad_loc": loc_gradient(parts, scale=1.0),
            "grad_value": value_gradient(parts, share=torch.ones_like(parts.attn[..., None]))}


@GRAD.register("times_attn", {
    "grad_attn": "grad_attn multiplied by the attention weight: the output is linear in A, "
    "so dL/dA = <g, sampled> with no A in it",
})
def times_attn(parts: Parts) -> dict:
    return {"grad_attn": attn_gradient(parts) * parts.attn}


@GRAD.register("unweighted", {
    "grad_attn": "the bilinear weights left out of grad_attn: <g, sampled> needs the "
    "weighted sum of the four corners, not their plain sum",
    "grad_value": "the bilinear weights left out of grad_value: corner c receives A * w_c * g",
})
def unweighted(parts: Parts) -> dict:
    ones = _ones(parts.weights)
    return {"grad_attn": attn_gradient(parts, weights=ones),
            "grad_value": value_gradient(parts, weights=ones)}


@GRAD.register("clamp", {
    "grad_attn": "clamping to the border instead of zero padding: a corner outside the image "
    "reads 0, not the nearest border pixel",
    "grad_loc": "clamping to the border instead of zero padding: a corner outside the image "
    "reads 0, not the nearest border pixel",
    "grad_value": "out-of-bounds corners scattered onto the clamped border pixels: a corner "
    "outside the image must receive nothing (multiply its share by its "
    "validity, or mask it)",
})
def clamp(parts: Parts) -> dict:
    # gather_parts(clamp_reads=True) has already made every corner count.
    return {"grad_attn": attn_gradient(parts), "grad_loc": loc_gradient(parts),
            "grad_value": value_gradient(parts)}


@GRAD.register("oob_unmasked", {
    "grad_value": "unmasked out-of-bounds corners: a corner outside the image still added "
    "its share at its unchecked flat address (the wrong row, level or batch); "
    "mask every corner's update with its validity",
})
def oob_unmasked(parts: Parts) -> dict:
    B, S, M, _ = parts.shape
    keeps = [(raw >= 0) & (raw < B * S * M) for raw in parts.raw_rows]
    targets = [torch.where(keep, raw, torch.zeros_like(raw))
               for keep, raw in zip(keeps, parts.raw_rows)]
    return {"grad_value": value_gradient(parts, targets=targets, keeps=keeps)}


# mistake -> {output it shows in: 'what: why'}
GRAD_MISTAKES: dict[str, dict[str, str]] = GRAD.explanations()


def _planted(inputs, grad_out, mistake: str) -> dict:
    parts = gather_parts(inputs, grad_out, clamp_reads=mistake == "clamp")
    return GRAD[mistake].plant(parts)


def msda_backward_variant(inputs, grad_out, mistake: str | None = None):
    """The three MSDA gradients in float64 with one known mistake planted (None: correct).

    Args:
        inputs: ``MSDAInputs`` (value, spatial_shapes, level_start_index, sampling_locations,
            attention_weights); any float dtype, any device (moved to the CPU).
        grad_out: (B, Q, M * D) upstream gradient.
        mistake: a key of :data:`GRAD_MISTAKES`, or None.

    Returns:
        (grad_value (B, S, M, D), grad_loc (B, Q, M, L, K, 2), grad_attn (B, Q, M, L, K)), float64
        on the CPU.
    """
    wrong = {} if mistake is None else _planted(inputs, grad_out, mistake)
    parts = gather_parts(inputs, grad_out)
    right = {"grad_value": value_gradient, "grad_loc": loc_gradient, "grad_attn": attn_gradient}
    return tuple(wrong[name] if name in wrong else right[name](parts) for name in GRAD_OUTPUTS)


def grad_variants(
    inputs, grad_out, output: str, mistakes=None
) -> dict[str, tuple[torch.Tensor, str]]:
    """``{mistake: (that output with the mistake, explanation)}`` for ``expect_close``.

    Args:
        inputs, grad_out: as for :func:`msda_backward_variant`.
        output: ``"grad_value"``, ``"grad_loc"`` or ``"grad_attn"``.
        mistakes: which mistakes to consider (default: every one that shows in ``output``).
    """
    if output not in GRAD_OUTPUTS:
        raise ValueError(f"output must be one of {GRAD_OUTPUTS}, got {output!r}")
    names = [m for m in (mistakes or GRAD) if output in GRAD[m].why]
    return {name: (_planted(inputs, grad_out, name)[output], GRAD[name].why[output])
            for name in names}


def lost_update_grad_value(
    ref_grad_value: torch.Tensor, writes: torch.Tensor, survivors: torch.Tensor
) -> tuple[torch.Tensor, str]:
    """The grad_value a lost-update scatter produces when all writes to an element are equal.

    Args:
        ref_grad_value: the correct gradient.
        writes: per element, how many equal contributions it should receive (same shape).
        survivors: per element, how many of them a racing scatter keeps (same shape).

    Returns:
        (that wrong grad_value, the explanation), ready for ``variants=``.
    """
    ref = ref_grad_value.detach().to(torch.float64)
    scale = torch.where(
        writes > 0, survivors.to(torch.float64) / writes.clamp(min=1).double(), torch.ones_like(ref)
    )
    return ref * scale, LOST_UPDATES
