"""The shipped operator as one ``torch.library`` op, for models that are compiled or graphed.

    from msda_labs.student.shipped_op import msda
    out = msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights)

Two ops are registered, both on the kernels of :mod:`msda_labs.student.shipped`:

* ``msda_labs::msda`` - the forward, with a fake implementation (the output's shape from the
  inputs' shapes alone) and an autograd formula (:func:`torch.library.register_autograd`) whose
  backward is the second op;
* ``msda_labs::msda_backward`` - the three gradients, with a fake implementation.

``torch.compile`` therefore sees the operator whole: the forward and the backward are each one
node of the graph, nothing in them breaks it, and Inductor schedules around them. Neither op
reads a device value on the host (the launchers read only shapes, dtypes and devices; the level
starts are derived on the device when they are not given), so a CUDA graph captures them
(``mode="reduce-overhead"``). Off SM 9.0 the forward's first call for a new shape class runs
Triton's autotuner, which synchronizes: the warm-up that precedes any capture takes it.

Called eagerly, :func:`msda` skips the dispatcher: the same kernels run through a plain
``torch.autograd.Function``, whose host path is shorter than the custom op's (the dispatcher's
boxing of the arguments and the Python autograd kernel that ``register_autograd`` installs).
While ``torch.compile`` traces, it calls ``torch.ops.msda_labs.msda``. Both paths launch the same
kernels with the same arguments.

Unlike lab 10's ``msda`` this function does not validate its inputs: it is the operator a model
calls once its shapes are known to be right (as the CUDA extension of Deformable DETR does). On
the CPU the kernels run under Triton's interpreter (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import torch

from msda_labs.student import shipped

__all__ = ["msda", "msda_op", "msda_backward_op"]


@torch.library.custom_op("msda_labs::msda", mutates_args=())
def msda_op(value: torch.Tensor, spatial_shapes: torch.Tensor,
            level_start_index: torch.Tensor | None, sampling_locations: torch.Tensor,
            attention_weights: torch.Tensor, fp32_grad_accum: bool = False) -> torch.Tensor:
    """MSDA forward: (B, S, M, D) value -> (B, Q, M * D); see :func:`msda`."""
    return shipped._forward_launch(value, spatial_shapes, level_start_index, sampling_locations,
                                   attention_weights)


@msda_op.register_fake
def _msda_fake(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
               fp32_grad_accum=False):
    B, _, M, D = value.shape
    return value.new_empty(B, sampling_locations.shape[1], M * D)


@torch.library.custom_op("msda_labs::msda_backward", mutates_args=())
def msda_backward_op(value: torch.Tensor, spatial_shapes: torch.Tensor,
                     level_start_index: torch.Tensor | None, sampling_locations: torch.Tensor,
                     attention_weights: torch.Tensor, grad_out: torch.Tensor,
                     fp32_grad_accum: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad_value, grad_loc, grad_attn), each contiguous, in its input's dtype."""
    return shipped._backward_launch(value, spatial_shapes, level_start_index,
                                    sampling_locations, attention_weights, grad_out,
                                    fp32_grad_accum)


@msda_backward_op.register_fake
def _msda_backward_fake(value, spatial_shapes, level_start_index, sampling_locations,
                        attention_weights, grad_out, fp32_grad_accum):
    # The launcher returns contiguous gradients whatever the inputs' strides: so does the fake.
    return (value.new_empty(value.shape), sampling_locations.new_empty(sampling_locations.shape),
            attention_weights.new_empty(attention_weights.shape))


def _setup_context(ctx, inputs, output):
    value, spatial_shapes, level_start_index, sampling_locations, attention_weights, flag = inputs
    ctx.save_for_backward(value, spatial_shapes, level_start_index, sampling_locations,
                          attention_weights)
    ctx.fp32_grad_accum = bool(flag)


def _op_backward(ctx, grad_out):
    value, spatial_shapes, level_start_index, sampling_locations, attention_weights = \
        ctx.saved_tensors
    grad_value, grad_loc, grad_attn = msda_backward_op(
        value, spatial_shapes, level_start_index, sampling_locations, attention_weights, grad_out,
        ctx.fp32_grad_accum)
    return grad_value, None, None, grad_loc, grad_attn, None


msda_op.register_autograd(_op_backward, setup_context=_setup_context)


class _EagerMSDA(torch.autograd.Function):
    """The same kernels as the ops, called without the dispatcher (eager mode only)."""

    @staticmethod
    def forward(ctx, value, spatial_shapes, level_start_index, sampling_locations,
                attention_weights, fp32_grad_accum):
        ctx.save_for_backward(value, spatial_shapes, level_start_index, sampling_locations,
                              attention_weights)
        ctx.fp32_grad_accum = fp32_grad_accum
        return shipped._forward_launch(value, spatial_shapes, level_start_index,
                                       sampling_locations, attention_weights)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        value, spatial_shapes, level_start_index, sampling_locations, attention_weights = \
            ctx.saved_tensors
        grad_value, grad_loc, grad_attn = shipped._backward_launch(
            value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
            grad_out, ctx.fp32_grad_accum)
        return grad_value, None, None, grad_loc, grad_attn, None


def msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
         fp32_grad_accum: bool = False):
    """Multi-scale deformable attention, differentiable, in mmcv's argument order.

    Args:
        value: (B, S, M, D) fp32, fp16 or bf16.
        spatial_shapes: (L, 2) integer rows (H_l, W_l), on value's device.
        level_start_index: (L,) integer, or None to derive it on the device.
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y), value's dtype and device.
        attention_weights: (B, Q, M, L, K), value's dtype and device.
        fp32_grad_accum: accumulate grad_value in fp32 (then cast) rather than in value's dtype;
            it changes nothing for fp32 values.

    Returns:
        (B, Q, M * D) in value's dtype.
    """
    if torch.compiler.is_compiling():
        return msda_op(value, spatial_shapes, level_start_index, sampling_locations,
                       attention_weights, fp32_grad_accum)
    return _EagerMSDA.apply(value, spatial_shapes, level_start_index, sampling_locations,
                            attention_weights, fp32_grad_accum)
