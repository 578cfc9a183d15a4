"""Task 1.2: x scaled by H and y by W (x * h, y * w) with the shapes read right."""
import torch


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    out = torch.zeros(B, Q, M, D, dtype=value.dtype)
    for b in range(B):
        for q in range(Q):
            for m in range(M):
                offset = 0
                for l in range(L):
                    h = int(spatial_shapes[l][0])
                    w = int(spatial_shapes[l][1])
                    level = value[b, offset:offset + h * w, m, :].reshape(h, w, D)
                    offset += h * w
                    for k in range(K):
                        x, y = sampling_locations[b, q, m, l, k].tolist()
                        s = bilinear_sample(level, x * h - 0.5, y * w - 0.5)  # noqa: F821
                        out[b, q, m] += attention_weights[b, q, m, l, k] * s
    return out.reshape(B, Q, M * D)
