"""Probes of lab 05: what the isolated child runs next to the student's module.

Each function takes the student's module first and returns tensors or plain data for the judge
(test_lab05_steps.py, test_lab05_forward.py). Every input arrives as an argument; nothing here
knows an expected value. The helpers of Tasks 5.1-5.3 run inside the grader's own tiny test
kernels (lab05_steps.py); the kernel is launched here, with the signature the lab fixes, on
guarded copies of the inputs into a sentinel output (msda_labs.grading.judge.probes).
"""

import os

import torch

from msda_labs.grading.judge import probes
from msda_labs.grading.judge.guards import between_guards, pow2, sentinel_buffer
from msda_labs.grading.judge.spies import KernelLaunches
from msda_labs.grading.speed import timing
from msda_labs.student import runtime
from msda_labs.student.cases import make_inputs

IN_GUARD = 16  # NaN elements on each side of value, loc and attn
STEP_GUARD = 64  # NaN elements on each side of the point tensors of Task 5.1

if os.environ.get("TRITON_INTERPRET") == "1":
    # In the interpreter worker: the test kernels are imported (and so kept in memory) before the
    # worker forks a child per test. The judge never imports triton.
    import lab05_steps  # noqa: F401


def _nan_output(n: int) -> torch.Tensor:
    return torch.full((n,), float("nan"), dtype=torch.float32, device=runtime.device())


def point_probe(module, loc, attn, p, on, shape):
    """load_point in one program of 8 lanes: (3, 8) = x_pix, y_pix and a per lane."""
    import lab05_steps

    loc, attn, p, on, shape = probes.on_device((loc, attn, p, on, shape))
    out = _nan_output(3 * p.numel())
    lab05_steps.point_kernel[(1,)](between_guards(loc, STEP_GUARD),
                                   between_guards(attn, STEP_GUARD), p, on, shape, out,
                                   helper=module.load_point, BLOCK_Q=p.numel())
    return out.view(3, p.numel())


def _tile_probe(kernel, helper, value, level, first, second, on, m):
    """One program of a step kernel on a guarded copy of ``value``: the [BLOCK_Q, BLOCK_D] tile."""
    value, level, first, second, on = probes.on_device((value, level, first, second, on))
    _, S, M, D = value.shape
    block_q, block_d = on.numel(), pow2(D)
    out = _nan_output(block_q * block_d)
    kernel[(1,)](between_guards(value, probes.value_guard(S, M, D)), level, first, second, on,
                 out, m, helper=helper, M=M, D=D, BLOCK_Q=block_q, BLOCK_D=block_d)
    return out.view(block_q, block_d)


def corner_probe(module, value, level, row, col, on, m):
    """gather_corner for 16 lanes (one corner each) of head m: the [16, BLOCK_D] tile."""
    import lab05_steps

    return _tile_probe(lab05_steps.corner_kernel, module.gather_corner, value, level, row, col,
                       on, m)


def sample_probe(module, value, level, xy, a, on, m):
    """sample_point for 16 lanes (one pixel point each) of head m: the [16, BLOCK_D] tile."""
    import lab05_steps

    return _tile_probe(lab05_steps.sample_kernel, module.sample_point, value, level, xy, a, on, m)


def kernel_probe(module, inputs, block_q):
    """msda_forward_kernel on guarded copies of ``inputs``; the whole output buffer."""
    M, D = inputs.value.shape[2:]
    return probes.forward_into_sentinel(
        module.msda_forward_kernel, inputs, block_q=block_q, in_guard=IN_GUARD,
        out_guard=probes.forward_guard(block_q, M, D), BLOCK_D=pow2(D))


@probes.guards_allocations()
def wrapper_probe(module, inputs, **kwargs):
    """msda_forward as labs 06 and 10 call it: level_start_index=None. It allocates its own
    output: in the interpreter, between guard bands (a stray store fails, every run alike)."""
    value, shapes, _starts, loc, attn = probes.on_device(inputs)
    with KernelLaunches() as launched:  # the wrapper runs the lab's kernel, not a stand-in
        out = module.msda_forward(value, shapes, None, loc, attn, **kwargs)
    return {"out": out, "launched": launched.names}


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
    dev = runtime.device()
    inputs = make_inputs(case, getattr(torch, dtype_name), device=dev)
    out = module.msda_forward(*inputs)
    if dev != "cpu":
        torch.cuda.synchronize()
    return out


def speed_probe(module, case, dtype_name):
    """msda_forward on the case's device inputs, timed; the output of your first call comes
    back. Only your call is timed here: the judge times the baselines (the PyTorch reference and,
    where the kit has it, the lab 05 chip) itself, on its own copy of the same inputs."""
    value, shapes, starts, loc, attn = make_inputs(case, getattr(torch, dtype_name),
                                                   device=runtime.device())
    return timing.race_all({"yours": lambda: module.msda_forward(value, shapes, starts, loc, attn)})
