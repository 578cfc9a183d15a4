# attack: truth-computed-import
# lab: lab10
# targets: 10.1 10.3 10.4
# The operator answers with the grader's PyTorch reference, imported under a name computed at run
# time (importlib with a joined string): no import statement names it, no kernel of the student's
# runs.
import importlib

import torch
from torch.autograd.function import once_differentiable

_g = importlib.import_module(".".join(["msda_labs", "tr" + "uth", "ref" + "erence"]))


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
