"""Task 6.2: the autotuned launch's grid hard-coded to blocks of 32 queries."""
import torch
import triton

_KERNEL = None


def msda_forward_autotuned(value, spatial_shapes, level_start_index, sampling_locations,
                           attention_weights, kernel=None):
    global _KERNEL
    if kernel is None:
        _KERNEL = _KERNEL or make_autotuned_forward()  # noqa: F821
        kernel = _KERNEL
    B, S, M, D = value.shape
    Q, L, K = sampling_locations.shape[1], sampling_locations.shape[3], sampling_locations.shape[4]
    value, shapes, starts, loc, attn = _prepare(value, spatial_shapes, level_start_index,  # noqa: F821
                                                sampling_locations, attention_weights)
    out = torch.empty(B, Q, M, D, dtype=value.dtype, device=value.device)
    chunk = triton.next_power_of_2(D)
    grid = (triton.cdiv(Q, 32), B * M, 1)
    kernel[grid](value, shapes, starts, loc, attn, out, Q, S, M=M, D=D, L=L, K=K, CHUNK_D=chunk)
    return out.view(B, Q, M * D)
