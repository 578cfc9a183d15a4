"""Known backward mistakes as data: what a wrong gradient looks like, for feedback (labs 07, 08).

:func:`msda_backward_variant` is an independent float64 implementation of the three MSDA gradients
(checked against autograd of the reference by the kit's self-test) in which one known mistake can
be planted; :func:`grad_variants` turns it into the ``variants=`` argument of ``expect_close``.
Lost updates (a scatter that keeps one of several writes to the same element) depend on which
write wins, so they are recognised by :func:`lost_update_grad_value` on inputs built so that every
write to an element is the same number.
"""

from __future__ import annotations

import torch

from msda_labs.truth.reference import level_starts

__all__ = [
    "GRAD_MISTAKES",
    "GRAD_OUTPUTS",
    "msda_backward_variant",
    "grad_variants",
    "lost_update_grad_value",
    "LOST_UPDATES",
]

# The three outputs, in the order every backward returns them.
GRAD_OUTPUTS = ("grad_value", "grad_loc", "grad_attn")

# mistake -> {output it shows in: 'what: why'}. An output that a mistake leaves unchanged has no
# entry, so feedback never names a mistake where it cannot be seen.
GRAD_MISTAKES: dict[str, dict[str, str]] = {
    "no_wh": {
        "grad_loc": "a missing W/H chain factor: x_pix = x * W - 0.5, so dL/dx = W * dL/dx_pix "
        "(and H for y)",
    },
    "swap_wh": {
        "grad_loc": "W and H swapped in the chain factor: the x gradient carries the width W, "
        "the y gradient the height H",
    },
    "swap_xy": {
        "grad_loc": "x and y swapped in grad_loc: the last axis is (x, y), x first",
    },
    "flipped_difference": {
        "grad_loc": "a corner difference taken the wrong way round: d/dx_pix is right minus left "
        "(v01 - v00, v11 - v10), d/dy_pix is bottom minus top (v10 - v00, v11 - v01)",
    },
    "no_attn": {
        "grad_loc": "the attention weight left out of grad_loc: the sample enters the output "
        "scaled by A, so its location's gradient is too",
        "grad_value": "the attention weight left out of grad_value: each corner receives "
        "A * w_c * g, not w_c * g",
    },
    "times_attn": {
        "grad_attn": "grad_attn multiplied by the attention weight: the output is linear in A, "
        "so dL/dA = <g, sampled> with no A in it",
    },
    "unweighted": {
        "grad_attn": "the bilinear weights left out of grad_attn: <g, sampled> needs the "
        "weighted sum of the four corners, not their plain sum",
        "grad_value": "the bilinear weights left out of grad_value: corner c receives A * w_c * g",
    },
    "clamp": {
        "grad_attn": "clamping to the border instead of zero padding: a corner outside the image "
        "reads 0, not the nearest border pixel",
        "grad_loc": "clamping to the border instead of zero padding: a corner outside the image "
        "reads 0, not the nearest border pixel",
        "grad_value": "out-of-bounds corners scattered onto the clamped border pixels: a corner "
        "outside the image must receive nothing (multiply its share by its "
        "validity, or mask it)",
    },
    "oob_unmasked": {
        "grad_value": "unmasked out-of-bounds corners: a corner outside the image still added "
        "its share at its unchecked flat address (the wrong row, level or batch); "
        "mask every corner's update with its validity",
    },
}

LOST_UPDATES = (
    "lost updates: of several writes racing into the same grad_value element, a "
    "non-accumulating scatter keeps one and drops the rest; a scatter must accumulate "
    "(index_add_ or index_put_(accumulate=True) in torch, tl.atomic_add in a kernel)"
)

_CORNERS = ((0, 0), (0, 1), (1, 0), (1, 1))  # (dy, dx), row first: 00, 01, 10, 11


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
    if mistake is not None and mistake not in GRAD_MISTAKES:
        raise ValueError(f"unknown backward mistake {mistake!r}; known: {sorted(GRAD_MISTAKES)}")
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
    grad_rows = torch.zeros(B * S * M, D, dtype=torch.float64)
    hi = shapes[:, 0].view(L, 1)
    wi = shapes[:, 1].view(L, 1)
    h, w = hi.double(), wi.double()
    px = loc[..., 0] * w - 0.5  # [B, Q, M, L, K]
    py = loc[..., 1] * h - 0.5
    fx0, fy0 = torch.floor(px), torch.floor(py)
    fx, fy = px - fx0, py - fy0
    x0, y0 = fx0.long(), fy0.long()
    b_idx = torch.arange(B).view(B, 1, 1, 1, 1)
    m_idx = torch.arange(M).view(1, 1, M, 1, 1)
    start = starts.view(L, 1)
    reads, weights, rows, valids = [], [], [], []
    for dy, dx in _CORNERS:
        xc, yc = x0 + dx, y0 + dy
        inside = (xc >= 0) & (xc < wi) & (yc >= 0) & (yc < hi)
        xcl = torch.minimum(torch.clamp(xc, min=0), wi - 1)
        ycl = torch.minimum(torch.clamp(yc, min=0), hi - 1)
        row = (b_idx * S + start + ycl * wi + xcl) * M + m_idx
        raw_row = (b_idx * S + start + yc * wi + xc) * M + m_idx
        read_valid = torch.ones_like(inside) if mistake == "clamp" else inside
        reads.append(rows_all[row] * read_valid[..., None])
        weights.append((fx if dx else 1 - fx) * (fy if dy else 1 - fy))
        rows.append((row, raw_row))
        valids.append((inside, read_valid))
    v00, v01, v10, v11 = reads
    a = attn[..., None]
    # grad_attn: <g, sampled>
    if mistake == "unweighted":
        sampled = v00 + v01 + v10 + v11
    else:
        sampled = sum(wt[..., None] * r for wt, r in zip(weights, reads))
    grad_attn = (g * sampled).sum(-1)
    if mistake == "times_attn":
        grad_attn = grad_attn * attn
    # grad_loc: A * (W, H) * <g, d sampled / d (x_pix, y_pix)>
    lx, ly = fx[..., None], fy[..., None]
    d_x = (v01 - v00) * (1 - ly) + (v11 - v10) * ly
    d_y = (v10 - v00) * (1 - lx) + (v11 - v01) * lx
    if mistake == "flipped_difference":
        d_x, d_y = -d_x, -d_y
    scale = 1.0 if mistake == "no_attn" else attn
    fac_x, fac_y = (h, w) if mistake == "swap_wh" else (w, h)
    if mistake == "no_wh":
        fac_x = fac_y = 1.0
    gx = scale * fac_x * (g * d_x).sum(-1)
    gy = scale * fac_y * (g * d_y).sum(-1)
    grad_loc = torch.stack((gy, gx) if mistake == "swap_xy" else (gx, gy), dim=-1)
    # grad_value: each corner's row receives A * w_c * g
    share_a = torch.ones_like(a) if mistake == "no_attn" else a
    for wt, (row, raw_row), (_inside, read_valid) in zip(weights, rows, valids):
        wt = torch.ones_like(wt) if mistake == "unweighted" else wt
        contrib = share_a * wt[..., None] * g
        if mistake == "oob_unmasked":
            target = raw_row
            keep = (raw_row >= 0) & (raw_row < B * S * M)
            target = torch.where(keep, raw_row, torch.zeros_like(raw_row))
        else:
            target, keep = row, read_valid
        contrib = contrib * keep[..., None]
        grad_rows.index_add_(0, target.reshape(-1), contrib.reshape(-1, D))
    return grad_rows.view(B, S, M, D), grad_loc, grad_attn


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
    which = GRAD_OUTPUTS.index(output)
    names = [m for m in (mistakes or GRAD_MISTAKES) if output in GRAD_MISTAKES[m]]
    return {
        name: (msda_backward_variant(inputs, grad_out, name)[which], GRAD_MISTAKES[name][output])
        for name in names
    }


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
