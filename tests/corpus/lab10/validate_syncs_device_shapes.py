"""Task 10.2: the pixel count read back with .item() whatever the device (a host sync on GPU)."""


def validate_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                    attention_weights):
    if value.dim() != 4:
        raise ValueError(f"value must be 4-D (B, S, M, D); got shape {tuple(value.shape)}")
    B, S, M, D = value.shape
    ls = tuple(sampling_locations.shape)
    if len(ls) != 6 or ls[5] != 2 or ls[0] != B or ls[2] != M:
        raise ValueError(f"sampling_locations must have shape (B, Q, M, L, K, 2) with B={B} and "
                         f"M={M}; got shape {ls}")
    Q, L, K = ls[1], ls[3], ls[4]
    if tuple(attention_weights.shape) != (B, Q, M, L, K):
        raise ValueError(f"attention_weights must have shape {(B, Q, M, L, K)}; got shape "
                         f"{tuple(attention_weights.shape)}")
    if spatial_shapes.is_floating_point() or spatial_shapes.dtype == torch.bool:  # noqa: F821
        raise ValueError(f"spatial_shapes must be an integer tensor; got dtype {spatial_shapes.dtype}")
    if tuple(spatial_shapes.shape) != (L, 2):
        raise ValueError(f"spatial_shapes must have shape {(L, 2)}; got shape "
                         f"{tuple(spatial_shapes.shape)}")
    pixels = (spatial_shapes[:, 0].long() * spatial_shapes[:, 1].long()).sum().item()
    if pixels != S:
        raise ValueError(f"spatial_shapes describe S = {pixels} pixels, but value has S = {S}")
    if level_start_index is not None and tuple(level_start_index.shape) != (L,):
        raise ValueError(f"level_start_index must have shape {(L,)}; got shape "
                         f"{tuple(level_start_index.shape)}")
    for name, t in (("sampling_locations", sampling_locations),
                    ("attention_weights", attention_weights)):
        if t.dtype != value.dtype:
            raise ValueError(f"{name} must have value's dtype {value.dtype}; got {t.dtype}")
    if value.dtype not in SUPPORTED_DTYPES:  # noqa: F821
        raise ValueError(f"value has dtype {value.dtype}; supported: torch.float32, "
                         f"torch.float16, torch.bfloat16")
    for name, t in (("sampling_locations", sampling_locations),
                    ("attention_weights", attention_weights)):
        if t.device != value.device:
            raise ValueError(f"{name} must be on value's device {value.device}; got {t.device}")
