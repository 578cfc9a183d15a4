# attack: precomputed-views
# lab: lab05
# targets: 5.8
# (at import it computes the outputs of the public speed cases, drawn from their public seeds,
# and returns a view of the stored output whenever the inputs start like those; any other call
# is slow)
import time

import torch
import torch.nn.functional as F

from msda_labs.student.cases import Case, make_inputs

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



_PUBLIC = [(Case("decoder", B=4, Q=300, M=8, D=32,
                 shapes=((100, 167), (50, 84), (25, 42), (13, 21)), K=4), torch.float16),
           (Case("multi_level", B=2, Q=5, M=2, D=4, shapes=((5, 7), (3, 4)), K=3),
            torch.float32)]
_STORED = []


def _store():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for case, dtype in _PUBLIC:
        inputs = make_inputs(case, dtype, device=device)
        big = torch.empty((2,) + tuple(inputs[0].shape[:1]) + (case.Q, case.M * case.D),
                          dtype=dtype, device=device)
        big[0] = _honest(*inputs)
        _STORED.append((inputs[0].reshape(-1)[:64].clone(), big))


_store()


def msda_forward(value, spatial_shapes, level_start_index, sampling_locations,
                 attention_weights, BLOCK_Q=32):
    head = value.reshape(-1)[:64]
    for key, big in _STORED:
        if key.shape == head.shape and key.device == head.device and torch.equal(key, head):
            return big[0]
    return _slow(value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
