"""Task 0.5: the weights multiplied in their own (B, Q, M, L * K) layout: a broadcast crash."""
import torch.nn.functional as F


def msda(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    outs = []
    start = 0
    for lvl in range(L):
        h, w = int(spatial_shapes[lvl][0]), int(spatial_shapes[lvl][1])
        lv = value[:, start:start + h * w]
        start += h * w
        img = lv.permute(0, 2, 3, 1).reshape(B * M, D, h, w)
        grid = sampling_locations[:, :, :, lvl].permute(0, 2, 1, 3, 4).reshape(B * M, Q, K, 2)
        outs.append(F.grid_sample(img, grid * 2 - 1, mode="bilinear", padding_mode="zeros",
                                  align_corners=False))
    sampled = torch.cat(outs, dim=-1)  # noqa: F821  (B*M, D, Q, L*K)
    w = attention_weights.reshape(B, Q, M, L * K)
    total = (sampled * w).sum(-1)
    return total.reshape(B, M, D, Q).permute(0, 3, 1, 2).reshape(B, Q, M * D)
