"""Probes of lab 06: what the isolated child runs next to the student's module.

Each function takes the student's module first and returns tensors or plain data for the judge
(test_lab06_fast.py). The interpreter probes launch the chunked kernel themselves on guarded
inputs (value between NaN guards, loc and attn between zero guards) into an output pre-filled
with a NaN sentinel, whose guards come back too. The GPU probes run your launches on the
device for the judge to check; every time that is graded is the judge's clock's (speedjudge).
"""

import torch

from msda_labs.grading.judge import probes
from msda_labs.grading.judge.guards import cdiv, sentinel_buffer
from msda_labs.grading.judge.spies import KernelLaunches
from msda_labs.student import runtime
from msda_labs.student.cases import make_inputs

GUARD = 4096  # elements of padding around the buffers the grader launches on
NAN = float("nan")


def _split(buf, shape):
    """The output of ``shape`` (as (B, Q, M * D)) and the two guards of a flat buffer."""
    B, Q, M, D = shape
    n = B * Q * M * D
    return {"out": buf[GUARD:GUARD + n].reshape(B, Q, M * D), "guard_lo": buf[:GUARD],
            "guard_hi": buf[GUARD + n:]}


def launch_chunked(module, inputs, block_q, chunk_d, grid=None):
    """The chunked kernel on guarded inputs; ``grid`` defaults to the wrapper's
    (cdiv(Q, BLOCK_Q), B * M, cdiv(D, CHUNK_D))."""
    B, _, M, D = inputs[0].shape
    Q = inputs[3].shape[1]
    grid = grid or (cdiv(Q, block_q), B * M, cdiv(D, chunk_d))
    buf = probes.forward_into_sentinel(
        module.msda_forward_chunked_kernel, inputs, block_q=block_q, in_guard=GUARD,
        out_guard=GUARD, fills=(NAN, 0.0, 0.0), grid=grid, CHUNK_D=chunk_d)
    return _split(buf, (B, Q, M, D))


def launch_each(module, runs):
    """:func:`launch_chunked` for each (inputs, block_q, chunk_d) of ``runs``, in one child."""
    return [launch_chunked(module, inputs, block_q, chunk_d) for inputs, block_q, chunk_d in runs]


@probes.guards_allocations()
def wrapper_defaults(module, inputs):
    """The given wrapper with its defaults (BLOCK_Q=32, CHUNK_D=next pow2 of D); the output it
    allocates lies between guard bands (a stray store fails, every run alike). Also the Triton
    kernels it launched: the wrapper runs the lab's kernel, not a stand-in."""
    with KernelLaunches() as launched:
        out = module.msda_forward_chunked(*probes.on_device(inputs))
    return {"out": out, "launched": launched.names}


def big_probe(module, case, block_q, chunks):
    """The chunked kernel at each CHUNK_D on a case past 2**31 value elements."""
    dev = runtime.device()
    inputs = case.big_inputs(dev)
    shape = (case.B, case.Q, case.M, case.D)
    results = {}
    for chunk_d in chunks:
        buf, out = sentinel_buffer(shape, torch.float32, dev, GUARD)
        probes.launch_forward(module.msda_forward_chunked_kernel, inputs, out, block_q=block_q,
                              grid=(cdiv(case.Q, block_q), case.B * case.M, cdiv(case.D, chunk_d)),
                              CHUNK_D=chunk_d)
        results[str(chunk_d)] = _split(buf, shape)
    return results


def describe_config(cfg):
    return {"kwargs": {str(k): v for k, v in dict(cfg.kwargs).items()},
            "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def _base_function(fn):
    """The Python function under any number of Triton wrappers (JIT, interpreter, autotune)."""
    seen = 0
    while hasattr(fn, "fn") and seen < 10:
        fn, seen = fn.fn, seen + 1
    return fn


def _class_name(obj) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def config_space(module):
    """What forward_configs() and make_autotuned_forward() declare; ``"type"`` is "Autotuner"
    only for Triton's own class (not a subclass, not a class of the same name), and
    ``"foreign_configs"`` names whatever forward_configs() returned that is not a triton.Config."""
    from triton import Config
    from triton.runtime.autotuner import Autotuner

    configs = module.forward_configs()
    tuned = module.make_autotuned_forward()
    return {
        "type": "Autotuner" if type(tuned) is Autotuner else _class_name(tuned),
        "foreign_configs": sorted({_class_name(c) for c in configs if type(c) is not Config}),
        "configs": [describe_config(c) for c in configs],
        "tuned_configs": [describe_config(c) for c in getattr(tuned, "configs", [])],
        "keys": [str(k) for k in getattr(tuned, "keys", [])],
        "arg_names": [str(a) for a in getattr(tuned, "arg_names", [])],
        "wraps_chunked": _base_function(tuned) is _base_function(
            module.msda_forward_chunked_kernel),
    }


@probes.guards_allocations()
def autotuned_run(module, inputs, block_q):
    """The launcher through a one-config autotuned kernel (a single config needs no
    benchmarking, which the interpreter cannot do)."""
    import triton

    kernel = module.make_autotuned_forward([triton.Config({"BLOCK_Q": block_q}, num_warps=1)])
    try:
        with KernelLaunches() as launched:  # the launcher runs the lab's kernel, not a stand-in
            out = module.msda_forward_autotuned(*probes.on_device(inputs), kernel=kernel)
        return {"out": out, "launched": launched.names}
    except RuntimeError as exc:
        if "active drivers" not in str(exc):
            raise
        # The autotuner benchmarked several configs: which function dropped the one config the
        # grader passed is read off the kernel make_autotuned_forward returned.
        configs = getattr(kernel, "configs", None)
        kept = isinstance(configs, list) and len(configs) == 1 \
            and getattr(configs[0], "kwargs", {}).get("BLOCK_Q") == block_q
        return {"benchmarked": True, "kernel_kept_configs": bool(kept),
                "kernel_configs": len(configs) if isinstance(configs, list) else None}


# -- GPU probes -----------------------------------------------------------------------------------
def _poisoned(call, shape, dtype):
    """``call()`` right after freeing a NaN-filled block of ``shape``: the caching allocator
    hands it to the next same-sized allocation, so an element a kernel forgets shows as NaN."""
    junk = torch.full(shape, NAN, dtype=dtype, device="cuda")
    del junk
    return call()


def gpu_outputs(module, case, dtype, chunks, inputs=None):
    """The wrapper at each CHUNK_D on the case's inputs, built on the device."""
    inputs = inputs if inputs is not None else make_inputs(case, dtype, device="cuda")
    shape = (case.B, case.Q, case.M, case.D)
    outs = {str(chunk): _poisoned(lambda c=chunk: module.msda_forward_chunked(*inputs, CHUNK_D=c),
                                  shape, dtype) for chunk in chunks}
    torch.cuda.synchronize()
    return outs


def gpu_speed(module, case):
    """Your wide launch (the wrapper's defaults) on the case's device inputs: its output, checked
    by the judge before the judge's clock times it (speedjudge)."""
    inputs = make_inputs(case, torch.float16, device="cuda")
    shape = (case.B, case.Q, case.M, case.D)
    out = _poisoned(lambda: module.msda_forward_chunked(*inputs), shape, torch.float16)
    torch.cuda.synchronize()
    return {"out": out}


def gpu_autotune(module, case):
    """The default-config autotuned launcher (it tunes on this first call): its output, the
    config it chose and the number of configs it holds. Its time is the judge's clock's."""
    inputs = make_inputs(case, torch.float16, device="cuda")
    kernel = module.make_autotuned_forward()
    out = _poisoned(lambda: module.msda_forward_autotuned(*inputs, kernel=kernel),
                    (case.B, case.Q, case.M, case.D), torch.float16)
    torch.cuda.synchronize()
    best = getattr(kernel, "best_config", None)
    return {"out": out, "best_config": describe_config(best) if best is not None else None,
            "n_configs": len(getattr(kernel, "configs", []))}


def gpu_config(module, case, index):
    """The autotuned launcher through a kernel of the ``index``-th of forward_configs() alone
    (one config: no tuning), on the case's device inputs; nothing when there is no such config.
    For compiling ahead: each config's kernel is the one the autotuner launches with it."""
    configs = module.forward_configs()
    if index >= len(configs):
        return None
    inputs = make_inputs(case, torch.float16, device="cuda")
    kernel = module.make_autotuned_forward([configs[index]])
    module.msda_forward_autotuned(*inputs, kernel=kernel)
    torch.cuda.synchronize()
    return None
