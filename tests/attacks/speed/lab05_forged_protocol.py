# attack: forged-protocol
# lab: lab05
# targets: 5.8
# (at import it rewrites the speed trial's own child half: every timed round answers at once,
# with checksums of zeros and zeros kept as the outputs, without calling the operator at all)
import time

import torch
import torch.nn.functional as F

SLOW_S = 0.02  # the real work of this copy is slow: it sleeps this long on every computed call


def _honest(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    """MSDA forward in plain torch: one grid_sample per level, weighted and summed in fp32."""
    B, S, M, D = value.shape
    Q, K = sampling_locations.shape[1], sampling_locations.shape[4]
    out = torch.zeros(B, M, D, Q, dtype=torch.float32, device=value.device)
    sizes = [(int(h), int(w)) for h, w in spatial_shapes.tolist()]
    first = 0
    for level, (h, w) in enumerate(sizes):
        image = value[:, first:first + h * w].float().permute(0, 2, 3, 1).reshape(B * M, D, h, w)
        first += h * w
        grid = sampling_locations[:, :, :, level].float().permute(0, 2, 1, 3, 4)
        grid = grid.reshape(B * M, Q, K, 2) * 2 - 1
        picked = F.grid_sample(image, grid, mode="bilinear", padding_mode="zeros",
                               align_corners=False)  # (B*M, D, Q, K)
        weight = attention_weights[:, :, :, level].float().permute(0, 2, 1, 3)
        out += (picked.reshape(B, M, D, Q, K) * weight.reshape(B, M, 1, Q, K)).sum(-1)
    return out.permute(0, 3, 1, 2).reshape(B, Q, M * D).to(value.dtype)


def _slow(*args):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    time.sleep(SLOW_S)
    return _honest(*args)

import msda_labs.grading.speed.speedtrial as _trial  # noqa: E402


def _answer_at_once(call, spec, seed, device):
    n, total = int(spec["n"]), _trial.out_numel(spec)
    meta = [[list(shape), spec["dtype"]] for shape in spec["out_shapes"]]
    return [0.0] * n, [torch.zeros(total) for _ in range(n)], [meta] * n


_trial._timed = _answer_at_once


def msda_forward(value, spatial_shapes, level_start_index, sampling_locations,
                 attention_weights, BLOCK_Q=32):
    return _slow(value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
