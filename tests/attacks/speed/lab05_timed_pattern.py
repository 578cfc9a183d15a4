# attack: timed-pattern
# lab: lab05
# targets: 5.8
# (it tells checked calls from timed ones by their pattern: the first call on a shape, which
# the judge checks, is computed; the calls that follow, which a race times, return zeros)
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


_SEEN = set()


def msda_forward(value, spatial_shapes, level_start_index, sampling_locations,
                 attention_weights, BLOCK_Q=32):
    key = (tuple(value.shape), tuple(sampling_locations.shape), value.dtype)
    if key not in _SEEN:
        _SEEN.add(key)
        return _slow(value, spatial_shapes, level_start_index, sampling_locations,
                     attention_weights)
    B, Q, M, D = value.shape[0], sampling_locations.shape[1], value.shape[2], value.shape[3]
    return torch.zeros(B, Q, M * D, dtype=value.dtype, device=value.device)
