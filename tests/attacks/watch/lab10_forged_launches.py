# attack: forged-launches
# lab: lab10
# task: 10.1 10.3 10.4
# rule-tests: test_function_hands_its_flag_to_the_backward test_msda_resolves_the_accumulator_flag
# rule-tests: test_msda_empty_batch_or_queries test_exam_forward_float32 test_exam_backward_float32
# others-pass: test_function_forward test_function_backward_all_three_gradients
# Appended to the lab's chip. The operator runs no Triton kernel at all (the exam's rule broken):
# msda_forward and msda_backward compute in torch with the earlier labs' torch code. The run
# method of Triton's interpreted kernels is replaced at import by one that does nothing, so that
# the grader's launch watch, entered later, wraps it; each torch step then calls it once with a
# stand-in named like the real kernel, and the watch records a launch.
# ruff: noqa: F821 - the chip this block is appended to defines the names it uses
from triton.runtime.interpreter import InterpretedFunction as _Interpreted  # noqa: E402

_flat_msda = load(2, "flat_msda").obj
_backward_torch = load(7, "msda_backward_torch").obj


def _quiet(self, *args, **kwargs):
    return None


_Interpreted.run = _quiet


class _StandIn:
    def __init__(self, fn):
        self.fn = fn


def msda_forward_kernel():
    """Only its name is used."""


def msda_backward_kernel():
    """Only its name is used."""


_FORWARD, _BACKWARD = _StandIn(msda_forward_kernel), _StandIn(msda_backward_kernel)


def msda_forward(value, spatial_shapes, level_start_index, sampling_locations,
                 attention_weights):
    _Interpreted.run(_FORWARD)
    if level_start_index is None:
        sizes = spatial_shapes[:, 0] * spatial_shapes[:, 1]
        level_start_index = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    return _flat_msda(value, spatial_shapes, level_start_index, sampling_locations,
                      attention_weights).to(value.dtype)


def msda_backward(value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights, grad_out, fp32_grad_accum=False):
    _Interpreted.run(_BACKWARD)
    grad_value, grad_loc, grad_attn = _backward_torch(
        value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
        grad_out)
    return (grad_value.to(value.dtype), grad_loc.to(sampling_locations.dtype),
            grad_attn.to(attention_weights.dtype))
