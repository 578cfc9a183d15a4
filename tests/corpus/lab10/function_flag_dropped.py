"""Task 10.1: the flag is not kept: backward always accumulates in value's dtype."""
import torch
from torch.autograd.function import once_differentiable


class MSDAFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, value, spatial_shapes, level_start_index, sampling_locations,
                attention_weights, fp32_grad_accum):
        ctx.save_for_backward(value, spatial_shapes, level_start_index, sampling_locations,
                              attention_weights)
        return msda_forward(value, spatial_shapes, level_start_index, sampling_locations,  # noqa: F821
                            attention_weights)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        v, shapes, starts, loc, attn = ctx.saved_tensors
        gv, gl, ga = msda_backward(v, shapes, starts, loc, attn, grad_out.contiguous())  # noqa: F821
        return gv, None, None, gl, ga, None
