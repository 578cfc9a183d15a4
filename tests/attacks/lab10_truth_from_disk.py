# attack: truth-from-disk
# lab: lab10
# targets: 10.1 10.3 10.4
# The "operator" is the grader's PyTorch reference, read off the disk through the package's
# __file__ with split names and exec'd: no kernel of the student's runs (the issue measured 19/39).
import os
import sys
import types

import torch
from torch.autograd.function import once_differentiable

import msda_labs

_g = types.ModuleType("helpers")
sys.modules["helpers"] = _g
_where = os.path.join(os.path.dirname(msda_labs.__file__), "tr" + "uth", "ref" + "erence.py")
with open(_where) as f:
    exec(compile(f.read(), "helpers.py", "exec"), _g.__dict__)


def msda_forward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    out = getattr(_g, "msda_" + "reference")(value.float(), spatial_shapes,
                                             sampling_locations.float(), attention_weights.float())
    return out.to(value.dtype)


def msda_backward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                  grad_out, fp32_grad_accum=True):
    with torch.enable_grad():
        gv, gl, ga = getattr(_g, "reference_" + "grads")(value, spatial_shapes,
                                                         sampling_locations, attention_weights,
                                                         grad_out)
    return gv.to(value.dtype), gl.to(value.dtype), ga.to(value.dtype)


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
        grads = msda_backward(*ctx.saved_tensors, grad_out.contiguous(),
                              fp32_grad_accum=ctx.fp32_grad_accum)
        return grads[0], None, None, grads[1], grads[2], None


def validate_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                    attention_weights):
    raise NotImplementedError("Task 10.2: validate_inputs")


def msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, *,
         fp32_grad_accum=None):
    B, S, M, D = value.shape
    if B == 0 or sampling_locations.shape[1] == 0:
        return value.new_zeros(B, sampling_locations.shape[1], M * D)
    flag = True if fp32_grad_accum is None else fp32_grad_accum
    return MSDAFunction.apply(value.contiguous(), spatial_shapes, level_start_index,
                              sampling_locations.contiguous(), attention_weights.contiguous(),
                              flag)
