"""Probes of lab 09: what the isolated "aot" child runs. The judge is test_lab09_hardware.py.

The child has the real Triton compiler (TRITON_INTERPRET=0) and no GPU. The kernel every probe
hands the submission is the lab 08 backward kernel, loaded the way the starter loads it.
"""

import os

import torch

BACKWARD = "msda_backward_kernel"


def warm_worker() -> None:
    """In the aot grading worker only (TRITON_INTERPRET=0; a no-op in the judge, which never
    compiles): pay triton's one-off compiler costs once, before the worker forks a child per
    test."""
    if os.environ.get("TRITON_INTERPRET") != "0":
        return
    from msda_labs.student.ptx import warm_up

    warm_up()


warm_worker()  # the grading worker preloads this module: it pays once, before any fork


def _backward_kernel():
    from msda_labs.student.earlier import load

    return load(8, BACKWARD).obj


def signature_probe(module, value_dtype, grad_value_dtype):
    """The submission's backward_signature for the lab 08 kernel."""
    return module.backward_signature(_backward_kernel(), value_dtype, grad_value_dtype)


def compile_probe(module, value_dtype, grad_value_dtype, cc):
    """The PTX the submission's compile_backward makes of the lab 08 kernel."""
    return module.compile_backward(_backward_kernel(), value_dtype, grad_value_dtype, cc)


def live_ptx_probe(module, signature, constexprs, cc):
    """Compile the lab 08 kernel with the judge's signature, then run the submission's detector
    on that PTX; returns both, so that the judge can read the PTX itself."""
    from msda_labs.student.ptx import compile_ptx

    ptx = compile_ptx(_backward_kernel(), signature, constexprs, cc)
    return ptx, module.find_atomics(ptx)


def classify_many(module, lists):
    """classify_atomics on each list of tokens."""
    return [module.classify_atomics(list(tokens)) for tokens in lists]


def switch_many(module, rows):
    """use_fp32_grad_accum on each (dtype name, capability) row."""
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    return [module.use_fp32_grad_accum(dtypes[name], tuple(cap)) for name, cap in rows]


def stand_in_signature(kernel, value_dtype, grad_value_dtype):
    """Stand-in for ``backward_signature`` (Task 9.5 graded apart from Task 9.4): the grader's own
    typing, which answers no task (every data pointer but grad_value_ptr is '*fp32', whatever
    value_dtype), and types the accumulator and the tables as the rules say, which is all that
    decides how the atomics lower."""
    from msda_labs.student.ptx import kernel_params

    sig = {}
    for name, is_constexpr in kernel_params(kernel):
        if is_constexpr:
            sig[name] = "constexpr"
        elif name in ("shapes_ptr", "starts_ptr"):
            sig[name] = "*i64"
        elif name == "grad_value_ptr":
            sig[name] = "*" + grad_value_dtype
        else:
            sig[name] = "*fp32" if name.endswith("_ptr") else "i64"
    return sig


def compile_probe_stand_in(module, value_dtype, grad_value_dtype, cc):
    """:func:`compile_probe` with :func:`stand_in_signature` in place of your
    ``backward_signature``."""
    original = getattr(module, "backward_signature", None)
    module.backward_signature = stand_in_signature
    try:
        return compile_probe(module, value_dtype, grad_value_dtype, cc)
    finally:
        module.backward_signature = original
