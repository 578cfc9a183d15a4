"""Task 10.3: fp32_grad_accum=None resolved to True whatever the dtype and GPU."""


def msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, *,
         fp32_grad_accum=None):
    validate_inputs(value, spatial_shapes, level_start_index, sampling_locations,  # noqa: F821
                    attention_weights)
    B, _, M, D = value.shape
    Q = sampling_locations.shape[1]
    if B * Q == 0:
        return value.new_zeros(B, Q, M * D)
    flag = True if fp32_grad_accum is None else bool(fp32_grad_accum)
    return MSDAFunction.apply(value.contiguous(), spatial_shapes, level_start_index,  # noqa: F821
                              sampling_locations.contiguous(), attention_weights.contiguous(),
                              flag)
