"""Probes of lab 01: what the isolated child runs against your module (no test functions here)."""

import torch


def sample_many(module, img, points):
    """One bilinear_sample call per point, stacked to (N, D)."""
    return torch.stack([module.bilinear_sample(img, float(x), float(y))
                        for x, y in points.tolist()])
