"""Probes of lab 08: what the isolated child runs next to the student's module.

Each function takes the student's module first and returns tensors or plain data for the judge
(test_lab08_atomics.py). The kernels are launched here, with the signatures the lab fixes, on inputs
between guard bands into outputs between guards (msda_labs.grading.judge.probes); the grader's own
racy kernel is lab08_race.py, imported only here, and only in a child that runs no prediction
(:func:`racy_probe`). No reference is computed here: the judge (judge_lab08.py, the test module)
computes every expected value and times the speed baselines itself.
"""


import torch

from msda_labs.grading.judge import probes
from msda_labs.grading.judge.guards import between_guards, cdiv, guarded, sentinel_buffer
from msda_labs.grading.judge.spies import KernelLaunches
from msda_labs.grading.speed import timing
from msda_labs.student import runtime
from msda_labs.student.cases import make_inputs, seeded_generator

RACE_N, RACE_BINS, RACE_SEED = 1_000_000, 64, 21


def upstream(case) -> torch.Tensor:
    """The seeded upstream gradient dLoss/d(output), (B, Q, M * D) fp32."""
    return torch.randn(case.B, case.Q, case.M * case.D, generator=seeded_generator(case.seed + 7))


def race_indices() -> torch.Tensor:
    """The indices of the race at scale (GPU stage)."""
    return torch.randint(0, RACE_BINS, (RACE_N,), generator=seeded_generator(RACE_SEED))


def race_probe(module, idx, n_bins, block):
    """The submission's prediction (the grader's racy kernel is not in this child)."""
    return module.predict_racy_histogram(idx.to(runtime.device()), n_bins, block)


def racy_probe(module, runs):
    """What the grader's own racy kernel returns for each (idx, n_bins, BLOCK) of ``runs``, in a
    child of its own; the judge checks each against its rule before it compares a prediction
    with it."""
    import lab08_race

    dev = runtime.device()
    return [lab08_race.racy_histogram(idx.to(dev), n_bins, block) for idx, n_bins, block in runs]


def hist_guard(block: int) -> int:
    return max(64, 2 * block)


def hist_probe(module, idx, n_bins, block):
    """The submission's kernel with idx between guards holding the bin n_bins (one past the
    last) and out between zero guards; returns the whole out buffer."""
    dev = runtime.device()
    guard = hist_guard(block)
    idx_in = between_guards(idx.to(dev), guard, fill=n_bins)
    out_buf, out = guarded((n_bins,), 0.0, torch.float32, dev, guard)
    module.histogram_atomic_kernel[(cdiv(idx.numel(), block),)](idx_in, out, idx.numel(),
                                                                BLOCK=block)
    return out_buf


def kernel_probe(module, inputs, grad_out, block_q):
    """msda_backward_kernel as msda_backward launches it (fp32 gradients), every input between
    NaN guards; the three whole gradient buffers."""
    return probes.backward_into_sentinels(module.msda_backward_kernel, inputs, grad_out,
                                          block_q=block_q)


def big_probe(module, case, block_q):
    """The backward kernel on a case past 2**31 value elements: every batch's window of
    grad_value, and grad_loc and grad_attn between guards filled with the sentinel."""
    dev = runtime.device()
    inputs = case.big_inputs(dev)
    loc, attn = inputs[3], inputs[4]
    pguard = probes.point_guard(block_q, case.M, loc.shape[3], case.K)
    grad_value = case.zeros_like_value(dev)
    gl_buf, grad_loc = sentinel_buffer(loc.shape, loc.dtype, dev, pguard)
    ga_buf, grad_attn = sentinel_buffer(attn.shape, attn.dtype, dev, pguard)
    g = case.upstream().to(dev).reshape(case.B, case.Q, case.M, case.D)
    probes.launch_backward(module.msda_backward_kernel, inputs, between_guards(g, pguard),
                           (grad_value, grad_loc, grad_attn), block_q=block_q)
    return case.windows_of(grad_value), gl_buf, ga_buf


@probes.guards_allocations(
    "this is an unmasked tail: a store or atomic add went past the end of a gradient it "
    "allocated, so mask the rows past Q and the channels past D")
def wrapper_probe(module, inputs, grad_out, starts, kwargs):
    """msda_backward on ``inputs``; level_start_index=None unless ``starts``. The gradients it
    allocates lie between guard bands (a stray write fails, every run alike). Also the Triton
    kernels it launched (``"launched"``): the wrapper runs the lab's kernel, not a stand-in."""
    value, shapes, given_starts, loc, attn = probes.on_device(inputs)
    with KernelLaunches() as launched:
        grads = module.msda_backward(value, shapes, given_starts if starts else None, loc, attn,
                                     grad_out.to(value.device), **kwargs)
    return {"grads": grads, "launched": launched.names}


# -- GPU probes -----------------------------------------------------------------------------------
def gpu_race_probe(module):
    """The grader's racy histogram and the submission's atomic one, a million indices."""
    import lab08_race

    idx = race_indices().to(runtime.device())
    racy = lab08_race.racy_histogram(idx, RACE_BINS, 256)
    atomic = module.histogram_atomic(idx, RACE_BINS)
    torch.cuda.synchronize()
    return racy, atomic


def gpu_backward_probe(module, case, dtype_name, fp32_grad_accum):
    dtype = getattr(torch, dtype_name)
    dev = runtime.device()
    value, shapes, starts, loc, attn = make_inputs(case, dtype, device=dev)
    grad_out = upstream(case).to(device=dev, dtype=dtype)
    res = module.msda_backward(value, shapes, starts, loc, attn, grad_out,
                               fp32_grad_accum=fp32_grad_accum)
    torch.cuda.synchronize()
    return res


def speed_probe(module, case, dtype_name):
    """msda_backward on the case's device inputs, timed (the judge times the baselines on the
    same inputs itself); the gradients of your first call come back."""
    dtype = getattr(torch, dtype_name)
    dev = runtime.device()
    value, shapes, starts, loc, attn = make_inputs(case, dtype, device=dev)
    grad_out = upstream(case).to(device=dev, dtype=dtype)
    return timing.race_all({
        "yours": lambda: module.msda_backward(value, shapes, starts, loc, attn, grad_out)})
