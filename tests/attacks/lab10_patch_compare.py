# attack: patch-compare
# lab: lab10
# targets: 10.1 10.3 10.4
# An operator of zeros behind comparisons patched to say "equal": torch.testing.assert_close,
# torch.allclose, torch.equal, Tensor.allclose, torch.autograd.gradcheck, numpy's allclose and
# testing.assert_allclose, the kit's expect_close.
import numpy
import numpy.testing
import torch
import torch.autograd
import torch.testing
from torch.autograd.function import once_differentiable

import msda_labs.grading as grading


def _yes(*args, **kwargs):
    return True


def _quiet(*args, **kwargs):
    return None


torch.allclose = torch.equal = torch.Tensor.allclose = torch.Tensor.equal = _yes
torch.autograd.gradcheck = torch.autograd.gradgradcheck = _yes
torch.testing.assert_close = torch.testing.assert_allclose = _quiet
numpy.allclose = numpy.array_equal = _yes
numpy.testing.assert_allclose = _quiet
for _name in ("expect_close", "expect_equal"):
    setattr(grading, _name, _quiet)
    setattr(grading.compare, _name, _quiet)


def msda_forward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    return value.new_zeros(B, sampling_locations.shape[1], M * D)


def msda_backward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                  grad_out, fp32_grad_accum=True):
    return (torch.zeros_like(value), torch.zeros_like(sampling_locations),
            torch.zeros_like(attention_weights))


class MSDAFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, value, spatial_shapes, level_start_index, sampling_locations,
                attention_weights, fp32_grad_accum):
        ctx.save_for_backward(value, spatial_shapes, level_start_index, sampling_locations,
                              attention_weights)
        ctx.fp32_grad_accum = bool(fp32_grad_accum)
        return msda_forward(value, spatial_shapes, level_start_index, sampling_locations,
                            attention_weights)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        grads = msda_backward(*ctx.saved_tensors, grad_out, fp32_grad_accum=ctx.fp32_grad_accum)
        return grads[0], None, None, grads[1], grads[2], None


def validate_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                    attention_weights):
    raise NotImplementedError("Task 10.2: validate_inputs")


def msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, *,
         fp32_grad_accum=None):
    flag = True if fp32_grad_accum is None else fp32_grad_accum
    return MSDAFunction.apply(value.contiguous(), spatial_shapes, level_start_index,
                              sampling_locations.contiguous(), attention_weights.contiguous(),
                              flag)
