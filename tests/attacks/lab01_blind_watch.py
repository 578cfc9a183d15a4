# attack: blind-watch
# lab: lab01
# targets: 1.1 1.2
# where: both
# Reaches grid_sample by a name computed at run time, so no reading of the source names it; at
# import, replaces the run-time watch of the grader's probe module (already loaded in the worker
# the child is forked from) by one that sees nothing; and answers integer points with a plain
# read of the pixel, so that reads at exact pixel centres come out exact too.
import sys

import torch

_F = sys.modules["torch.nn.functional"]
_sample = getattr(_F, "grid" + "_sam" + "ple")


class _Blind:
    """A watch that watches nothing."""

    def __init__(self, *args, **kwargs):
        self.found = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


for _name, _module in list(sys.modules.items()):
    if _name.startswith("probes_lab") and hasattr(_module, "Forbidden" + "Ops"):
        setattr(_module, "Forbidden" + "Ops", _Blind)


def _read(image, x, y):
    """(N, D) reads of an (H, W, D) image at pixel points (x, y) (N, 2), through the library."""
    H, W, _ = image.shape
    size = torch.tensor([W, H], dtype=image.dtype)
    grid = (2 * (torch.stack([x, y], -1).to(image.dtype) + 0.5) / size - 1).view(1, -1, 1, 2)
    out = _sample(image.permute(2, 0, 1).unsqueeze(0), grid, mode="bilinear",
                  padding_mode="zeros", align_corners=False)
    return out[0, :, :, 0].t()


def bilinear_sample(img, x, y):
    if float(x).is_integer() and float(y).is_integer():
        H, W, D = img.shape
        if 0 <= x < W and 0 <= y < H:
            return img[int(y), int(x)].clone()
        return torch.zeros(D, dtype=img.dtype)
    return _read(img, torch.tensor([float(x)]), torch.tensor([float(y)]))[0]


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    out = torch.zeros(B, Q, M, D, dtype=value.dtype)
    start = 0
    for lvl, (h, w) in enumerate(spatial_shapes.tolist()):
        level = value[:, start:start + h * w].view(B, h, w, M, D)
        start += h * w
        for b in range(B):
            for m in range(M):
                loc = sampling_locations[b, :, m, lvl].reshape(-1, 2)
                reads = _read(level[b, :, :, m], loc[:, 0] * w - 0.5, loc[:, 1] * h - 0.5)
                weights = attention_weights[b, :, m, lvl].reshape(-1, 1)
                out[b, :, m] += (reads * weights).view(Q, K, D).sum(1)
    return out.view(B, Q, M * D)
