# attack: side-stream
# lab: lab05
# targets: 5.8
# (the work is launched on a side stream that the caller is never made to wait for, behind a
# long device sleep; without CUDA, on a thread that fills the returned tensor later)
import threading
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



_SIDE = {}


def msda_forward(value, spatial_shapes, level_start_index, sampling_locations,
                 attention_weights, BLOCK_Q=32):
    B, Q, M, D = value.shape[0], sampling_locations.shape[1], value.shape[2], value.shape[3]
    out = torch.zeros(B, Q, M * D, dtype=value.dtype, device=value.device)
    args = (value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
    if value.is_cuda:
        sizes = spatial_shapes.cpu()  # host values read now, so the side stream never syncs
        stream = _SIDE.setdefault("stream", torch.cuda.Stream())
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            torch.cuda._sleep(20_000_000)  # about 10 ms of device time
            out.copy_(_honest(value, sizes, level_start_index, sampling_locations,
                              attention_weights))
    else:
        def fill():
            time.sleep(SLOW_S)
            out.copy_(_honest(*args))
        threading.Thread(target=fill, daemon=True).start()
    return out
