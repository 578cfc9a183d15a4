"""Task 10.2: shapes checked, but dtypes and devices never."""


def validate_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                    attention_weights):
    if value.ndim != 4:
        raise ValueError(f"value must be 4-D (B, S, M, D), got shape {tuple(value.shape)}")
    B, S, M, D = value.shape
    if sampling_locations.ndim != 6 or sampling_locations.shape[-1] != 2 \
            or sampling_locations.shape[0] != B or sampling_locations.shape[2] != M:
        raise ValueError(f"sampling_locations must be (B, Q, M, L, K, 2) with B={B}, M={M}; "
                         f"got shape {tuple(sampling_locations.shape)}")
    _, Q, _, L, K, _ = sampling_locations.shape
    if tuple(attention_weights.shape) != (B, Q, M, L, K):
        raise ValueError(f"attention_weights must be {(B, Q, M, L, K)}; got shape "
                         f"{tuple(attention_weights.shape)}")
    if spatial_shapes.is_floating_point() or tuple(spatial_shapes.shape) != (L, 2):
        raise ValueError(f"spatial_shapes must be an integer (L, 2) = {(L, 2)} tensor; got "
                         f"{spatial_shapes.dtype} {tuple(spatial_shapes.shape)}")
    if spatial_shapes.device.type == "cpu" and int((spatial_shapes[:, 0] * spatial_shapes[:, 1]).sum()) != S:
        raise ValueError(f"spatial_shapes do not add up to S = {S}")
    if level_start_index is not None and tuple(level_start_index.shape) != (L,):
        raise ValueError(f"level_start_index must be None or (L,) = {(L,)}; got "
                         f"{tuple(level_start_index.shape)}")
