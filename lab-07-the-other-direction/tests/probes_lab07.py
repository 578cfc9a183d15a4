"""Probes of lab 07: what the isolated child runs. The judge is test_lab07_gradients.py.

Every probe sets a gradient up exactly as the lab's msda_backward_torch does (the corners from
the student's gather_corners, the upstream gradient as (B, Q, M, D), the weights in fp32), then
calls one of the three task functions: "grad_attn", "grad_loc" or "grad_value".
"""


import torch

from msda_labs.grading.judge.spies import CountLines, CountTorchCalls


def _setup(module, inputs, grad_out):
    """(corners, upstream gradient (B, Q, M, D), weights, zero rows (B*S*M, D)) for one call."""
    value, shapes, starts, loc, attn = inputs
    B, S, M, D = value.shape
    Q = loc.shape[1]
    corners = module.gather_corners(value, shapes, starts, loc)
    rows = torch.zeros(B * S * M, D)
    return corners, grad_out.float().reshape(B, Q, M, D), attn.float(), rows


def _call(module, which, corners, g, a, rows):
    if which == "grad_attn":
        return module.grad_attention_weights(corners, g)
    if which == "grad_loc":
        return module.grad_sampling_locations(corners, g, a)
    res = module.scatter_grad_value(rows, corners, g, a)
    return rows if res is None else res  # adding in place and returning nothing is fine too


def one_gradient(module, which, value, shapes, starts, loc, attn, grad_out):
    """The gradient ``which`` on the given inputs and upstream gradient."""
    inputs = (value, shapes, starts, loc, attn)
    return _call(module, which, *_setup(module, inputs, grad_out))


def torch_calls(module, which, small, big):
    """How many torch calls the task function makes, and how many lines of the submission it
    runs, on a small and on a big problem (each an (inputs, grad_out) pair), and its result on
    the big one (the rule only counts for a function that works). Returns ``([calls small,
    calls big], result, [lines small, lines big])``: a loop over elements read out as Python
    numbers (``.tolist()``) makes few torch calls, but runs more lines."""
    counts, ran, res = [], [], None
    for inputs, grad_out in (small, big):
        args = _setup(module, inputs, grad_out)
        with CountTorchCalls() as counter, CountLines(module.__file__) as lines:
            res = _call(module, which, *args)
        counts.append(counter.calls)
        ran.append(lines.lines)
    return counts, res, ran
