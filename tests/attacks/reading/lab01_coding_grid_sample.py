# attack: coding-grid-sample
# lab: lab01
# task: 1.2
# encoding: utf-7
# rule-tests: test_naive_matches_reference test_naive_keeps_dtype
# The lab's chip, with a msda_naive_student that calls grid_sample (below) hidden in a comment
# that a `# -*- coding: utf-7 -*-` first line turns into code: read as UTF-8 the block is one
# comment line, read as UTF-7 (as Python compiles the file) it is the module's msda_naive_student.
# The library call runs in a thread of its own, which the run-time watch of torch calls (a watch
# of its own thread) does not see: the reading of the source is what must catch it.
# ruff: noqa: F821 - the chip this block is appended to defines the names it uses
import threading

import torch.nn.functional as F


def msda_naive_student(*args):
    out = []
    worker = threading.Thread(target=lambda: out.append(_by_library(*args)))
    worker.start()
    worker.join()
    return out[0]


def _by_library(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    sizes = [int(h) * int(w) for h, w in spatial_shapes.tolist()]
    levels = value.split(sizes, dim=1)
    grids = 2 * sampling_locations - 1
    sampled = []
    for lvl, (h, w) in enumerate(spatial_shapes.tolist()):
        img = levels[lvl].permute(0, 2, 3, 1).reshape(B * M, D, int(h), int(w))
        grid = grids[:, :, :, lvl].transpose(1, 2).reshape(B * M, Q, K, 2)
        sampled.append(F.grid_sample(img, grid, mode="bilinear", padding_mode="zeros",
                                     align_corners=False))
    weights = attention_weights.transpose(1, 2).reshape(B * M, 1, Q, L * K)
    out = (torch.cat(sampled, dim=-1) * weights).sum(-1)
    return out.view(B, M, D, Q).permute(0, 3, 1, 2).reshape(B, Q, M * D)
