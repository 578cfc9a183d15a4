"""Probes of lab 05: what the isolated child runs next to the student's module.

Each function takes the student's module first and returns tensors or plain data for the judge
(test_lab05_forward.py). The kernel is launched here, with the signature the lab fixes, on
guarded copies of the inputs into a sentinel output (msda_labs.grading.probes).
"""

import torch

from msda_labs.grading import probes, timing
from msda_labs.grading.guards import pow2, sentinel_buffer
from msda_labs.student import runtime
from msda_labs.truth.cases import make_inputs
from msda_labs.truth.reference import msda_reference

IN_GUARD = 16  # NaN elements on each side of value, loc and attn


def kernel_probe(module, inputs, block_q):
    """msda_forward_kernel on guarded copies of ``inputs``; the whole output buffer."""
    M, D = inputs.value.shape[2:]
    return probes.forward_into_sentinel(
        module.msda_forward_kernel, inputs, block_q=block_q, in_guard=IN_GUARD,
        out_guard=probes.forward_guard(block_q, M, D), BLOCK_D=pow2(D))


def wrapper_probe(module, inputs, **kwargs):
    """msda_forward as labs 06 and 10 call it: level_start_index=None."""
    value, shapes, _starts, loc, attn = probes.on_device(inputs)
    return module.msda_forward(value, shapes, None, loc, attn, **kwargs)


def big_probe(module, case, block_q):
    """The kernel on a case past 2**31 value elements (a sparse value on the CPU)."""
    dev = runtime.device()
    inputs = case.big_inputs(dev)
    buf, out = sentinel_buffer((case.B, case.Q, case.M, case.D), torch.float32, dev,
                               probes.forward_guard(block_q, case.M, case.D))
    probes.launch_forward(module.msda_forward_kernel, inputs, out, block_q=block_q,
                          BLOCK_D=pow2(case.D))
    if dev != "cpu":
        torch.cuda.synchronize()
    return buf


def gpu_probe(module, case, dtype_name):
    """Build the case on the device, run msda_forward, return the output."""
    inputs = make_inputs(case, getattr(torch, dtype_name), device=runtime.device())
    out = module.msda_forward(*inputs)
    torch.cuda.synchronize()
    return out


def speed_probe(module, case, dtype_name):
    """msda_forward, the reference and (where the kit has it) the lab 05 chip on the same device
    inputs, timed side by side; the output of your first call comes back."""
    value, shapes, starts, loc, attn = make_inputs(case, getattr(torch, dtype_name),
                                                   device=runtime.device())
    # The reference reads the level sizes as Python ints: from a CPU copy, so that no call waits
    # for the device (a call that waits cannot be captured in a CUDA graph).
    host_shapes = shapes.cpu()
    chip = timing.chip_function("lab05", "msda_forward")
    return timing.race_all({
        "yours": lambda: module.msda_forward(value, shapes, starts, loc, attn),
        "reference": lambda: msda_reference(value, host_shapes, loc, attn),
        "chip": None if chip is None else (lambda: chip(value, shapes, starts, loc, attn)),
    })
