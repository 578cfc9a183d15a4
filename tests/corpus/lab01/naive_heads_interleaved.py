"""Task 1.2: heads interleaved in the output (channel d * M + m instead of m * D + d)."""
import torch


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    out = torch.zeros(B, Q, D, M, dtype=value.dtype)
    sizes = [int(h) * int(w) for h, w in spatial_shapes]
    for b in range(B):
        for q in range(Q):
            for m in range(M):
                for l in range(L):
                    h, w = int(spatial_shapes[l, 0]), int(spatial_shapes[l, 1])
                    start = sum(sizes[:l])
                    img = value[b, start:start + sizes[l], m].reshape(h, w, D)
                    for k in range(K):
                        x = float(sampling_locations[b, q, m, l, k, 0]) * w - 0.5
                        y = float(sampling_locations[b, q, m, l, k, 1]) * h - 0.5
                        out[b, q, :, m] += attention_weights[b, q, m, l, k] \
                            * bilinear_sample(img, x, y)  # noqa: F821
    return out.reshape(B, Q, D * M)
