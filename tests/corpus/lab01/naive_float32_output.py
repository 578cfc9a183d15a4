"""Task 1.2: the output allocated as float32 whatever value's dtype (float64 expected)."""
import torch


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    Q, L, K = sampling_locations.shape[1], sampling_locations.shape[3], sampling_locations.shape[4]
    starts = [0]
    for h, w in spatial_shapes.tolist():
        starts.append(starts[-1] + h * w)
    result = torch.zeros(B, Q, M * D, dtype=torch.float32)
    for b in range(B):
        for q in range(Q):
            for m in range(M):
                acc = torch.zeros(D, dtype=value.dtype)
                for l in range(L):
                    h, w = spatial_shapes[l].tolist()
                    img = value[b, starts[l]:starts[l + 1], m].view(h, w, D)
                    for k in range(K):
                        px = sampling_locations[b, q, m, l, k, 0].item() * w - 0.5
                        py = sampling_locations[b, q, m, l, k, 1].item() * h - 0.5
                        acc += attention_weights[b, q, m, l, k] * bilinear_sample(img, px, py)  # noqa: F821
                result[b, q, m * D:(m + 1) * D] = acc
    return result
