"""Task 1.2: the level's start advanced inside the point loop (once per point, not per level)."""
import torch


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    out = torch.zeros(B, Q, M * D, dtype=value.dtype)
    for b in range(B):
        for q in range(Q):
            for m in range(M):
                s0 = 0
                for l in range(L):
                    H, W = int(spatial_shapes[l, 0]), int(spatial_shapes[l, 1])
                    for k in range(K):
                        img = value[b, s0:s0 + H * W, m].reshape(H, W, D)
                        x = float(sampling_locations[b, q, m, l, k, 0]) * W - 0.5
                        y = float(sampling_locations[b, q, m, l, k, 1]) * H - 0.5
                        out[b, q, m * D:(m + 1) * D] += \
                            attention_weights[b, q, m, l, k] * bilinear_sample(img, x, y)  # noqa: F821
                        s0 += H * W
    return out
