"""Probes of lab 01: what the isolated child runs against your module (no test functions here).

Every call runs watched (``msda_labs.grading.spies.ForbiddenOps``): the judge hears which library
interpolation operators (grid_sample and its kin) ran during it, whatever name reached them.
"""

import torch

from msda_labs.grading.spies import ForbiddenOps


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
