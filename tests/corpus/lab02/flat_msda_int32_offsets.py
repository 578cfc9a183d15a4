"""Task 2.2: right output, but the offsets computed in int32."""
import torch


def flat_msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    acc = torch.float64 if value.dtype == torch.float64 else torch.float32
    vflat = value.reshape(-1)
    loc = sampling_locations.reshape(-1).to(acc)
    att = attention_weights.reshape(-1).to(acc)
    bi = torch.arange(B, dtype=torch.int32)[:, None, None]
    qi = torch.arange(Q, dtype=torch.int32)[None, :, None]
    mi = torch.arange(M, dtype=torch.int32)[None, None, :]
    di = torch.arange(D, dtype=torch.int32)
    res = torch.zeros(B, Q, M, D, dtype=acc)
    for l in range(L):
        H, W = int(spatial_shapes[l][0]), int(spatial_shapes[l][1])
        st = int(level_start_index[l])
        for k in range(K):
            slot = ((bi * Q + qi) * M + mi) * (L * K) + l * K + k
            px = loc[(2 * slot).long()] * W - 0.5
            py = loc[(2 * slot + 1).long()] * H - 0.5
            a = att[slot.long()]
            fx, fy = torch.floor(px), torch.floor(py)
            for cy, cx, wt in ((fy, fx, (1 - (px - fx)) * (1 - (py - fy))),
                               (fy, fx + 1, (px - fx) * (1 - (py - fy))),
                               (fy + 1, fx, (1 - (px - fx)) * (py - fy)),
                               (fy + 1, fx + 1, (px - fx) * (py - fy))):
                inside = (cx >= 0) & (cx < W) & (cy >= 0) & (cy < H)
                r, c = cy.int().clamp(0, H - 1), cx.int().clamp(0, W - 1)
                base = ((bi * S + st + r * W + c) * M + mi) * D
                got = vflat[(base[..., None] + di).long()].to(acc)
                res += (a * wt * inside)[..., None] * got
    return res.reshape(B, Q, M * D).to(value.dtype)
