"""Task 10.3: no early return for B == 0 or Q == 0 (the kernels are launched on empty inputs)."""


def msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, *,
         fp32_grad_accum=None):
    validate_inputs(value, spatial_shapes, level_start_index, sampling_locations,  # noqa: F821
                    attention_weights)
    if fp32_grad_accum is None:
        cap = shipped.device_capability(value.device) if value.is_cuda else DEFAULT_CAPABILITY  # noqa: F821
        fp32_grad_accum = use_fp32_grad_accum(value.dtype, cap)  # noqa: F821
    return MSDAFunction.apply(value.contiguous(), spatial_shapes, level_start_index,  # noqa: F821
                              sampling_locations.contiguous(), attention_weights.contiguous(),
                              bool(fp32_grad_accum))
