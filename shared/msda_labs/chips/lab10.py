"""Lab 10 - Ship it: the kernels become an operator that anyone can call and train through.

Goal: wrap a forward and a backward kernel in a torch.autograd.Function, put a public function in
front of it that refuses every malformed input with a message that says exactly what is wrong, and
pass the operator test suite (the final exam) with it.

The kernels (given): the operator ships the kit's tuned versions of the lab 06 forward and the lab
08 backward, ``msda_labs.student.shipped``: the same math, cut so that one tile row holds one sample point
(all sixteen points of a query in flight at once) and, on SM 9.0, with four (fp32) or eight
(fp16/bf16) channels per atomic instruction. Set MSDA_LAB10_KERNELS=labs to run your own instead:
the lab 06 autotuned forward and the lab 08 backward (my/lab06.py, my/lab08.py, else the chips).

In this lab you will:
  * connect forward and backward through torch.autograd.Function, saving the inputs the backward
    recomputes from and returning one gradient per forward input (Task 10.1);
  * validate shapes, dtypes and devices, naming the argument, what was expected and what came
    (Task 10.2);
  * handle the cases a kernel should never see: empty batches, non-contiguous tensors, an
    accumulator flag left to the operator (Task 10.3);
  * run the final exam: forward and all three gradients, every dtype, every edge (Task 10.4).

Conventions (the same in every lab):
  value               (B, S, M, D)        levels flattened row-major and concatenated along S
  spatial_shapes      (L, 2) int64        rows are (H_l, W_l), height first
  level_start_index   (L,) int64          where each level begins along S (or None: derived)
  sampling_locations  (B, Q, M, L, K, 2)  normalized (x, y); x runs along the width
  attention_weights   (B, Q, M, L, K)
  output              (B, Q, M * D)       heads concatenated: channel m * D + d

The four layers of the operator:

    msda(...)                 the public function: validate, handle the edge cases, resolve the
                              accumulator flag, make the tensors contiguous          (Task 10.2/3)
    MSDAFunction.apply(...)   autograd: forward kernel, save inputs, backward kernel   (Task 10.1)
    msda_forward / msda_backward      the launchers: msda_labs.student.shipped (or labs 06 and 08)
    the two @triton.jit kernels
"""

from msda_labs.student import runtime

# No GPU on this machine? Then Triton's interpreter runs the kernels (it must be chosen before
# triton is imported). The grader sets it for you.
runtime.auto()

import os  # noqa: E402
import weakref  # noqa: E402

import torch  # noqa: E402
from torch.autograd.function import once_differentiable  # noqa: E402, F401 - for Task 10.1

from msda_labs.student import shipped  # noqa: E402
from msda_labs.student.earlier import load  # noqa: E402

# The kernels: the kit's tuned ones (see the module docstring), or with MSDA_LAB10_KERNELS=labs
# the earlier labs' artifacts: my/lab06.py, my/lab08.py when you kept yours, else the chips. The
# switch of lab 09 is yours or the chip's (the grader always uses the shipped kernels and the
# chips, so that your grade here depends only on this file).
if os.environ.get("MSDA_LAB10_KERNELS") == "labs":
    msda_forward, FORWARD_SOURCE = load(6, "msda_forward_autotuned")
    msda_backward, BACKWARD_SOURCE = load(8, "msda_backward")
else:
    msda_forward, FORWARD_SOURCE = shipped.msda_forward, "msda_labs.student.shipped (tuned lab 06)"
    msda_backward, BACKWARD_SOURCE = shipped.msda_backward, "msda_labs.student.shipped (tuned lab 08)"
use_fp32_grad_accum, SWITCH_SOURCE = load(9, "use_fp32_grad_accum")

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Where there is no CUDA device to ask (Triton's interpreter), the switch assumes an A100.
DEFAULT_CAPABILITY = (8, 0)


class MSDAFunction(torch.autograd.Function):
    """Autograd glue: the forward kernel on the way in, the backward kernel on the way back."""

    @staticmethod
    def forward(ctx, value, spatial_shapes, level_start_index, sampling_locations,
                attention_weights, fp32_grad_accum):
        """Run the forward kernel and keep what the backward needs.

        Args:
            value: (B, S, M, D) contiguous, fp32/fp16/bf16.
            spatial_shapes: (L, 2) integer.
            level_start_index: (L,) integer, or None.
            sampling_locations: (B, Q, M, L, K, 2) contiguous, value's dtype.
            attention_weights: (B, Q, M, L, K) contiguous, value's dtype.
            fp32_grad_accum: bool, how the backward accumulates grad_value.

        Returns:
            (B, Q, M * D) in value's dtype.
        """
        # TODO(Task 10.1): save the five tensors with ctx.save_for_backward (None is allowed),
        # keep the flag on ctx, and return msda_forward(...) (about 4 lines).
        # BEGIN SOLUTION
        ctx.save_for_backward(value, spatial_shapes, level_start_index, sampling_locations,
                              attention_weights)
        ctx.fp32_grad_accum = bool(fp32_grad_accum)
        return msda_forward(value, spatial_shapes, level_start_index, sampling_locations,
                            attention_weights)
        # STARTER
        # raise NotImplementedError("Task 10.1: MSDAFunction.forward")
        # END SOLUTION

    @staticmethod
    # TODO(Task 10.1): the backward kernel is not itself differentiable: mark the method so that
    # a second derivative raises instead of silently coming out wrong (about 1 line).
    # BEGIN SOLUTION
    @once_differentiable
    # STARTER
    # END SOLUTION
    def backward(ctx, grad_out):
        """One gradient per input of forward, in forward's order (None where there is none).

        Args:
            grad_out: (B, Q, M * D), dLoss/d(output); possibly non-contiguous.

        Returns:
            (grad_value, None, None, grad_loc, grad_attn, None).
        """
        # TODO(Task 10.1): unpack ctx.saved_tensors, call msda_backward with the saved flag and a
        # contiguous grad_out, return six values (about 5 lines).
        # BEGIN SOLUTION
        value, spatial_shapes, level_start_index, sampling_locations, attention_weights = \
            ctx.saved_tensors
        grad_value, grad_loc, grad_attn = msda_backward(
            value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
            grad_out.contiguous(), fp32_grad_accum=ctx.fp32_grad_accum)
        return grad_value, None, None, grad_loc, grad_attn, None
        # STARTER
        # raise NotImplementedError("Task 10.1: MSDAFunction.backward")
        # END SOLUTION


_CHECKED_SHAPES: dict[int, tuple] = {}


def check_pixel_count_on_device(spatial_shapes, S) -> None:
    """sum(H * W) == S for a spatial_shapes tensor on a GPU, without a host sync (given).

    Reading the sizes back (``int(...)``, ``.item()``, ``.tolist()``, ``.cpu()``) would make the
    host wait for the device on every call, and a CUDA graph cannot capture that. Instead, a
    device-side assertion is queued (``torch._assert_async``): the comparison runs on the GPU,
    and a mismatch stops the program with a device-side assert naming this check. It is queued
    once per tensor and version (an in-place change queues it again), and skipped while
    torch.compile traces (the compiled graph keeps its shapes fixed).
    """
    if torch.compiler.is_compiling():
        return
    key = id(spatial_shapes)
    seen = _CHECKED_SHAPES.get(key)
    if seen is not None and seen[0]() is spatial_shapes and seen[1:] == (spatial_shapes._version,
                                                                          int(S)):
        return
    pixels = (spatial_shapes[:, 0].long() * spatial_shapes[:, 1].long()).sum()
    torch._assert_async(pixels == S, "msda: spatial_shapes describe sum(H * W) pixels, but "
                        "value has a different S (value.shape[1])")
    if len(_CHECKED_SHAPES) > 64:
        _CHECKED_SHAPES.clear()
    _CHECKED_SHAPES[key] = (weakref.ref(spatial_shapes), spatial_shapes._version, int(S))


def validate_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                    attention_weights) -> None:
    """Raise ValueError for any input the kernels cannot take; return None otherwise.

    Every message names the argument, what was expected and what came: shapes as tuples
    (``(1, 8, 2, 2, 2)``), dtypes (``torch.float16``), devices (``cpu``). The rules, in order:

    1. value is 4-D (B, S, M, D).
    2. sampling_locations is (B, Q, M, L, K, 2) with value's B and M.
    3. attention_weights is exactly (B, Q, M, L, K).
    4. spatial_shapes is an integer tensor of shape (L, 2), and sum(H * W) == S. Read the sizes
       only where they already are on the host (spatial_shapes on the CPU); for a device tensor
       call ``check_pixel_count_on_device`` (given), which never waits for the GPU.
    5. level_start_index is None or has shape (L,).
    6. sampling_locations and attention_weights have value's dtype, which is fp32, fp16 or bf16.
    7. value is on a CUDA device (unless Triton's interpreter runs the kernels), and
       sampling_locations and attention_weights are on value's device.
    """
    # TODO(Task 10.2): the seven rules above, each a ValueError whose message names the argument,
    # the expected and the actual shape/dtype/device (about 45 lines).
    # BEGIN SOLUTION
    if value.dim() != 4:
        raise ValueError(f"value must be 4-D (B, S, M, D); got shape {tuple(value.shape)}")
    B, S, M, D = value.shape
    loc_shape = tuple(sampling_locations.shape)
    if len(loc_shape) != 6 or loc_shape[5] != 2 or loc_shape[0] != B or loc_shape[2] != M:
        raise ValueError(f"sampling_locations must have shape (B, Q, M, L, K, 2) with B={B} and "
                         f"M={M} from value; got shape {loc_shape}")
    Q, L, K = loc_shape[1], loc_shape[3], loc_shape[4]
    want = (B, Q, M, L, K)
    if tuple(attention_weights.shape) != want:
        raise ValueError(f"attention_weights must have shape (B, Q, M, L, K) = {want}; got shape "
                         f"{tuple(attention_weights.shape)}")
    if spatial_shapes.dtype.is_floating_point or spatial_shapes.dtype == torch.bool or \
            spatial_shapes.dtype.is_complex:
        raise ValueError(f"spatial_shapes must be an integer tensor; got dtype "
                         f"{spatial_shapes.dtype}")
    if tuple(spatial_shapes.shape) != (L, 2):
        raise ValueError(f"spatial_shapes must have shape (L, 2) = {(L, 2)}; got shape "
                         f"{tuple(spatial_shapes.shape)}")
    if spatial_shapes.device.type == "cpu":  # the sizes are on the host already: no sync
        pixels = int((spatial_shapes[:, 0].long() * spatial_shapes[:, 1].long()).sum())
        if pixels != S:
            raise ValueError(f"spatial_shapes describe S = {pixels} pixels (sum of H * W), but "
                             f"value has S = {S} (value shape {tuple(value.shape)})")
    else:
        check_pixel_count_on_device(spatial_shapes, S)
    if level_start_index is not None and tuple(level_start_index.shape) != (L,):
        raise ValueError(f"level_start_index must be None or have shape (L,) = {(L,)}; got shape "
                         f"{tuple(level_start_index.shape)}")
    for name, tensor in (("sampling_locations", sampling_locations),
                         ("attention_weights", attention_weights)):
        if tensor.dtype != value.dtype:
            raise ValueError(f"{name} must have value's dtype {value.dtype}; got {tensor.dtype} "
                             f"(all dtypes must match)")
    if value.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"value has dtype {value.dtype}; supported: torch.float32, "
                         f"torch.float16, torch.bfloat16")
    if value.device.type != "cuda" and not runtime.interpreted():
        raise ValueError(f"value must be a CUDA tensor; got device {value.device}. This operator "
                         f"runs Triton kernels on a GPU; on a CPU use msda_labs.truth.reference (or "
                         f"TRITON_INTERPRET=1)")
    for name, tensor in (("sampling_locations", sampling_locations),
                         ("attention_weights", attention_weights)):
        if tensor.device != value.device:
            raise ValueError(f"{name} must be on value's device {value.device}; got device "
                             f"{tensor.device}")
    # STARTER
    # raise NotImplementedError("Task 10.2: validate_inputs")
    # END SOLUTION


def msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, *,
         fp32_grad_accum=None):
    """Multi-scale deformable attention, differentiable, on Triton kernels.

    The argument order is mmcv's ``MultiScaleDeformableAttnFunction`` (without ``im2col_step``).

    Args:
        value: (B, S, M, D) fp32, fp16 or bf16, on a CUDA device (or CPU under the interpreter).
        spatial_shapes: (L, 2) integer, rows (H_l, W_l).
        level_start_index: (L,) integer, or None to derive it from spatial_shapes.
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y), value's dtype and device.
        attention_weights: (B, Q, M, L, K), value's dtype and device.
        fp32_grad_accum: accumulate grad_value in fp32 (True), in value's dtype (False), or let
            ``use_fp32_grad_accum`` decide for this dtype and GPU (None).

    Returns:
        (B, Q, M * D) in value's dtype.

    Raises:
        ValueError: an input breaks one of the rules of :func:`validate_inputs`.
    """
    # TODO(Task 10.3): validate; B == 0 or Q == 0 -> zeros (B, Q, M * D) without launching
    # anything; resolve fp32_grad_accum=None with use_fp32_grad_accum(dtype, capability), the
    # capability of value's GPU or DEFAULT_CAPABILITY without one; then MSDAFunction.apply with
    # contiguous value, locations and weights (about 12 lines).
    # BEGIN SOLUTION
    validate_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                    attention_weights)
    B, S, M, D = value.shape
    Q = sampling_locations.shape[1]
    if B == 0 or Q == 0:
        return value.new_zeros(B, Q, M * D)
    if fp32_grad_accum is None:
        capability = shipped.device_capability(value.device) if value.is_cuda \
            else DEFAULT_CAPABILITY
        fp32_grad_accum = use_fp32_grad_accum(value.dtype, capability)
    return MSDAFunction.apply(value.contiguous(), spatial_shapes, level_start_index,
                              sampling_locations.contiguous(), attention_weights.contiguous(),
                              bool(fp32_grad_accum))
    # STARTER
    # raise NotImplementedError("Task 10.3: msda")
    # END SOLUTION


if __name__ == "__main__":
    # Run your functions on one small example and compare them with the student-facing spec
    # (msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not
    # the grade; `nox -s lab10` is.
    from msda_labs.student.check import run_lab

    run_lab(10, globals())
