"""Probes of lab 01: what the isolated child runs against your module (no test functions here).

Every call runs watched (``msda_labs.grading.judge.spies.ForbiddenOps``): the judge hears which
library interpolation operators (grid_sample and its kin) ran during it, whatever name reached them.
"""

import torch

from msda_labs.grading.judge.probes import both_runs
from msda_labs.grading.judge.spies import ForbiddenOps


def _knot_reads(module, knots):
    return [module.bilinear_sample(image, float(x), float(y)) for image, (x, y) in knots]


def sample_many(module, img, points, knots=()):
    """One bilinear_sample call per point, stacked to (N, D), then one read per (image, (x, y))
    of ``knots``: the outputs and the interpolation operators that ran."""
    with ForbiddenOps() as spy:
        out = torch.stack([module.bilinear_sample(img, float(x), float(y))
                           for x, y in points.tolist()])
        reads = _knot_reads(module, knots)
    return {"out": out, "knots": reads, "forbidden": spy.found}


def call_watched(module, name, *args, knots=()):
    """``name(*args)``, then the ``knots`` reads: the outputs and the interpolation operators
    that ran."""
    with ForbiddenOps() as spy:
        out = getattr(module, name)(*args)
        reads = _knot_reads(module, knots)
    return {"out": out, "knots": reads, "forbidden": spy.found}


# -- Task 1.2 apart from Task 1.1 ------------------------------------------------------------------
def smooth_sample(img, x, y):
    """Stand-in for ``bilinear_sample``: every pixel (row i, col j) of the (H, W, D) image weighs
    exp(-((x - j)**2 + (y - i)**2)). Smooth in (x, y), every pixel counts: no corners, no padding,
    so it answers no task, and a wrong pixel position or level still shows in what it reads."""
    H, W, D = img.shape
    cols = torch.arange(W, dtype=img.dtype, device=img.device).repeat(H)
    rows = torch.arange(H, dtype=img.dtype, device=img.device).repeat_interleave(W)
    weights = torch.exp(-((x - cols) ** 2 + (y - rows) ** 2))
    return weights @ img.reshape(H * W, D)


def smooth_msda(value, spatial_shapes, sampling_locations, attention_weights):
    """MSDA with :func:`smooth_sample` as its reader, vectorized over (b, q, m, k): what a right
    ``msda_naive_student`` returns with the stand-in in place of ``bilinear_sample``."""
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    out = torch.zeros(B, Q, M, D, dtype=value.dtype)
    start = 0
    for lvl, (h, w) in enumerate(torch.as_tensor(spatial_shapes).tolist()):
        level = value[:, start:start + h * w].permute(0, 2, 1, 3)  # [B, M, h*w, D]
        start += h * w
        cols = torch.arange(w, dtype=value.dtype).repeat(h)
        rows = torch.arange(h, dtype=value.dtype).repeat_interleave(w)
        x = sampling_locations[:, :, :, lvl, :, 0].to(value.dtype) * w - 0.5  # [B, Q, M, K]
        y = sampling_locations[:, :, :, lvl, :, 1].to(value.dtype) * h - 0.5
        weights = torch.exp(-((x[..., None] - cols) ** 2 + (y[..., None] - rows) ** 2))
        read = torch.einsum("bqmkp,bmpd->bqmkd", weights, level)
        attn = attention_weights[:, :, :, lvl].to(value.dtype)
        out += (attn[..., None] * read).sum(dim=3)
    return out.reshape(B, Q, M * D)


def naive_both_ways(module, *args):
    """``msda_naive_student(*args)`` with the stand-in reader in place of your ``bilinear_sample``,
    then with yours: ``{"stand_in": ..., "own": ...}``, each watched (:func:`call_watched`)."""
    return both_runs(module, {"bilinear_sample": smooth_sample}, call_watched,
                     "msda_naive_student", *args)
