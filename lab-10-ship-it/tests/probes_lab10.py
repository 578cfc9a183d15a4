"""Probes of lab 10: what the isolated child runs. The judge: test_lab10_operator.py (Tasks
10.1-10.3) and test_lab10_suite.py (Task 10.4).

Inputs are seeded and built on the device under test here (msda_labs.student.cases); the judge
rebuilds them on the CPU from the same seeds for its references. Every run of the operator also
records which Triton kernels its forward and its backward launched (``"launched"``), for the final
exam's rule that the operator runs kernels (on the GPU the judge also reads the kernels Triton
compiled off the disk: ``kernel_cache_probe``). Some probes re-run the submission with recording
wrappers around its msda_forward and msda_backward (the shipped kernels while grading; see
msda_labs.grading.judge.spies): that is how the judge sees which accumulator flag reached the
backward, whether the kernels got contiguous tensors, and that an empty batch launches nothing.
"""

import functools
import os

import torch

from msda_labs.grading.judge.probes import guards_allocations
from msda_labs.grading.judge.spies import (
    KernelLaunches,
    backward_outcome,
    fresh_copy,
    outcome,
    spied,
)
from msda_labs.student import runtime
from msda_labs.student.cases import Case, make_inputs, seeded_generator

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
GRAD_SEED = 7  # the upstream gradient of every backward test


@functools.cache
def warm_worker() -> None:
    """In the interpreter's grading worker only (a no-op anywhere else, the judge included), pay
    the once-per-process costs before the worker forks a child per test: the shipped kernels and
    lab 09's chip, torch's lazy imports on the first backward with an explicit gradient (about
    1 s), triton's argument specialization and the rewriting of each kernel's source (about 1 s
    more). Nothing here runs a kernel or a parallel torch op: a thread pool started before a fork
    would hang the children. Best effort.

    Never in the GPU worker: there a backward, even on the CPU, starts autograd's device threads
    and initializes CUDA, and children forked after that cannot use it (measured on an H200:
    every GPU test failed with a CUDA initialization error). Once per process."""
    if os.environ.get("MSDA_STAGE") != "chips" or os.environ.get("TRITON_INTERPRET") != "1":
        return
    from msda_labs.student.earlier import load

    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import mangle_type

        from msda_labs.student import shipped

        load(9, "use_fp32_grad_accum")
        x = torch.ones(2, requires_grad=True)
        (x * x).backward(torch.ones(2))
        mangle_type(1)
        for obj in vars(shipped).values():
            if isinstance(obj, InterpretedFunction):
                obj.rewrite()
    except Exception:  # noqa: BLE001 - warming is an optimisation only
        pass


warm_worker()  # the grading worker preloads this module: it pays once, before any fork


def device_inputs(case: Case, dtype_name: str, requires_grad: bool = False):
    """The case's seeded inputs in ``dtype_name`` on the device under test."""
    value, shapes, starts, loc, attn = make_inputs(case, DTYPES[dtype_name], runtime.device())
    if requires_grad:
        for t in (value, loc, attn):
            t.requires_grad_(True)
    return value, shapes, starts, loc, attn


def grad_out(case: Case, dtype_name: str, device="cpu") -> torch.Tensor:
    """The seeded upstream gradient (B, Q, M * D) of every backward test."""
    g = torch.randn(case.B, case.Q, case.M * case.D, generator=seeded_generator(GRAD_SEED))
    return g.to(dtype=DTYPES[dtype_name], device=device)


@guards_allocations()
def function_probe(module, case, dtype_name, flag, backward=True):
    """MSDAFunction.apply directly (no validation, no wrapper), then its backward."""
    value, shapes, starts, loc, attn = device_inputs(case, dtype_name, requires_grad=True)
    out = module.MSDAFunction.apply(value, shapes, starts, loc, attn, flag)
    result = {"out": out.detach()}
    if backward:
        grad = grad_out(case, dtype_name, value.device)
        result.update(backward_outcome(out, grad, (value, loc, attn)))
        if any(g is None for g in result.get("grads", ())):
            result["returned"] = _returned_shapes(module, (value, shapes, starts, loc, attn, flag),
                                                  grad)
    return result


def _returned_shapes(module, inputs, grad):
    """Where a gradient came back None: the shape of what backward itself returned at each
    position (None for None), read by calling the backward node of a fresh forward directly
    (autograd drops a gradient for an input that needs none, so the leaves cannot say)."""
    try:
        out = module.MSDAFunction.apply(*inputs)
        returned = out.grad_fn.apply(grad)
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the leaves' gradients are the finding; this adds
        return f"{type(exc).__name__}"  # to it only when backward runs again
    returned = returned if isinstance(returned, tuple) else (returned,)
    return [list(t.shape) if isinstance(t, torch.Tensor) else None for t in returned]


@guards_allocations()
def double_backward_probe(module, case):
    """A second derivative through MSDAFunction: it must raise (the backward is a kernel)."""
    first = function_probe(module, case, "float32", False)  # the first derivative: right?
    value, shapes, starts, loc, attn = device_inputs(case, "float32", requires_grad=True)
    out = module.MSDAFunction.apply(value, shapes, starts, loc, attn, False)
    # The upstream gradient 2 * out depends on the inputs (so autograd records a graph through
    # backward), and the loss also depends on loc directly: without protection the second
    # derivative comes out, silently missing the MSDA term.
    loss = (out ** 2).sum() + (loc ** 2).sum()
    try:
        (grad_loc,) = torch.autograd.grad(loss, loc, create_graph=True)
        grad_loc.sum().backward()  # every node of the second graph runs, the MSDA one included
    except NotImplementedError:
        raise
    except RuntimeError as exc:
        return {"raised": str(exc).strip().splitlines()[0][:300], "first": first}
    return {"second": loc.grad, "first": first}


def _scramble(t):
    """The same values with other strides (axes 1 and 2 swapped in memory): not contiguous."""
    out = t.transpose(1, 2).contiguous().transpose(1, 2)
    assert not out.is_contiguous(), "a case with Q = 1 or M = 1 cannot be scrambled this way"
    return out


@guards_allocations()
def msda_probe(module, case, dtype_name, flag="auto", backward=True, starts_none=False,
               noncontiguous=False):
    """The public operator, forward (and backward with the seeded upstream gradient)."""
    value, shapes, starts, loc, attn = device_inputs(case, dtype_name)
    if noncontiguous:
        value, loc, attn = _scramble(value), _scramble(loc), _scramble(attn)
    for t in (value, loc, attn):
        t.requires_grad_(True)
    kwargs = {} if flag == "auto" else {"fp32_grad_accum": flag}
    with KernelLaunches() as forward:
        out = module.msda(value, shapes, None if starts_none else starts, loc, attn, **kwargs)
    result = {"out": out.detach(), "launched": {"forward": forward.names}}
    if backward:
        grad = grad_out(case, dtype_name, value.device)
        with KernelLaunches() as back:
            result.update(backward_outcome(out, _scramble(grad) if noncontiguous else grad,
                                           (value, loc, attn)))
        result["launched"]["backward"] = back.names
    return result


def validate_probe(module, cases, entry="validate_inputs", outside_interpreter=False):
    """``entry`` on the args of each (label, args) of ``cases``: the outcomes, in order.

    ``outside_interpreter``: switch the interpreter off first; ``"fresh"`` then re-runs the module
    (so that even a decision it took at import time sees the change), ``"unset"`` does the same
    with TRITON_INTERPRET set to "" rather than "0", ``"as_imported"`` keeps
    the module as it was imported under the interpreter (a decision taken at import still says
    "interpreter"). Only validation runs after this; no kernel is launched."""
    if outside_interpreter:
        # "empty": set but empty, which is no more "on" than "0" (unset, the module's
        # runtime.auto() would switch the interpreter on again when it is re-run).
        os.environ["TRITON_INTERPRET"] = "" if outside_interpreter == "empty" else "0"
        if outside_interpreter != "as_imported":
            module = fresh_copy(module)
    dev = "cpu" if outside_interpreter else runtime.device()
    moved = [[a.to(dev) if isinstance(a, torch.Tensor) else a for a in args] for _, args in cases]
    return [outcome(getattr(module, entry), *args) for args in moved]


def _spied(module):
    """The submission re-run with msda_forward and msda_backward recording each call: whether
    value, sampling_locations and attention_weights were contiguous, and the flag."""
    def forward_facts(args):
        tensors = list(args.values())
        return {"contiguous": [bool(tensors[i].is_contiguous()) for i in (0, 3, 4)]}

    def backward_facts(args):
        flag = args["fp32_grad_accum"]
        return {"flag": flag if isinstance(flag, bool) else repr(flag)}

    return spied(module, {"msda_forward": forward_facts, "msda_backward": backward_facts})


def flag_probe(module, runs):
    """msda forward + backward for each (case, dtype, flag): the flags msda_backward got."""
    module, logs = _spied(module)
    seen = []
    for case, dtype_name, flag in runs:
        before = len(logs["msda_backward"])
        try:
            msda_probe(module, case, dtype_name, flag=flag)
        except NotImplementedError:
            raise
        except Exception:  # noqa: BLE001 - e.g. bf16 atomics in the interpreter: the flag that
            pass  # reached msda_backward is already recorded, and it is what this probe reports
        seen.append([c["flag"] for c in logs["msda_backward"][before:]])
    return seen


def function_flag_probe(module, case):
    """MSDAFunction.apply with True, then False, and backward: the flags msda_backward got."""
    module, logs = _spied(module)
    seen, runs = [], []
    for flag in (True, False):
        before = len(logs["msda_backward"])
        runs.append(function_probe(module, case, "float32", flag))
        seen.append([c["flag"] for c in logs["msda_backward"][before:]])
    return {"seen": seen, "runs": runs}


@guards_allocations()
def empty_probe(module, case, sizes):
    """msda on the case cut to each (B, Q) of ``sizes``: its output and forward launches."""
    module, logs = _spied(module)
    results = []
    for B, Q in sizes:
        value, shapes, starts, loc, attn = device_inputs(case, "float32")
        before = len(logs["msda_forward"])
        out = module.msda(value[:B], shapes, starts, loc[:B, :Q], attn[:B, :Q])
        results.append({"out": out.detach() if isinstance(out, torch.Tensor) else out,
                        "launches": len(logs["msda_forward"]) - before})
    return results


def contiguity_probe(module, case):
    """msda forward on non-contiguous inputs: what msda_forward was handed."""
    module, logs = _spied(module)
    msda_probe(module, case, "float32", noncontiguous=True, backward=False)
    return logs["msda_forward"]


def paths_probe(module, case):
    """msda forward + backward with fp32_grad_accum=False, then True: grad_value and the
    kernels launched, of each."""
    runs = [msda_probe(module, case, "float32", flag=flag) for flag in (False, True)]
    return {"grads": [run.get("grads", [None])[0] for run in runs],
            "launched": [run["launched"] for run in runs]}


def kernel_cache_probe(module, case, dtype_name):
    """:func:`msda_probe` with Triton told to compile every kernel afresh
    (``TRITON_ALWAYS_COMPILE``), so that each kernel the operator launches is written to Triton's
    cache on the disk during this call, even one compiled on an earlier run. The judge reads the
    compiled kernels' names off the disk; ``"cache_dir"`` is where Triton writes, and
    ``"backward_from"`` the moment (``time.time()``) the backward started."""
    import time

    from triton import knobs

    before = os.environ.get("TRITON_ALWAYS_COMPILE")
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    try:
        value, shapes, starts, loc, attn = device_inputs(case, dtype_name, requires_grad=True)
        with KernelLaunches() as forward:
            out = module.msda(value, shapes, starts, loc, attn)
        torch.cuda.synchronize()
        backward_from = time.time()
        with KernelLaunches() as back:
            result = backward_outcome(out, grad_out(case, dtype_name, value.device),
                                      (value, loc, attn))
        torch.cuda.synchronize()
    finally:
        if before is None:
            os.environ.pop("TRITON_ALWAYS_COMPILE", None)
        else:
            os.environ["TRITON_ALWAYS_COMPILE"] = before
    return {"out": out.detach(), **result, "cache_dir": str(knobs.cache.dir),
            "backward_from": backward_from,
            "launched": {"forward": forward.names, "backward": back.names}}


def cases_probe(module, cases, dtype_name):
    """msda forward + backward on each case."""
    return [msda_probe(module, case, dtype_name) for case in cases]


def devices_probe(module, case):
    """msda on CPU tensors, then with sampling_locations on the CPU and value on the GPU."""
    value, shapes, starts, loc, attn = make_inputs(case, torch.float32)
    return [outcome(module.msda, value, shapes, starts, loc, attn),
            outcome(module.msda, value.to("cuda"), shapes, starts, loc, attn.to("cuda"))]


# -- GPU stage ----------------------------------------------------------------------------------
# Two batches of one 65 x 64 level with M = 8192 heads of D = 32: B * S * M * D = 2**31 + 2**25,
# and the last two rows of batch 1 lie past element 2**31 for every head. Only four heads carry
# values and upstream gradients (the others are zeros, so their outputs and gradients must be 0);
# the judge recomputes those four heads as a problem of their own.
FAR = Case("int64_far_end", B=2, Q=5, M=8192, D=32, shapes=((65, 64),), K=2, seed=21)
FAR_HEADS = (0, 1, FAR.M - 2, FAR.M - 1)


def far_parts(dtype_name):
    """The data of the far-end case on the CPU: value, loc, attn, grad_out of FAR_HEADS."""
    case, h = FAR, len(FAR_HEADS)
    gen = seeded_generator(case.seed)
    value = torch.randn(case.B, case.S, h, case.D, generator=gen)
    loc = torch.rand(case.B, case.Q, h, 1, case.K, 2, generator=gen)
    # Batch 1 samples the bottom rows (y_pix in [62.5, 64.5)): past element 2**31.
    loc[1, ..., 1] = (62.5 + 2 * loc[1, ..., 1] + 0.5) / case.shapes[0][0]
    attn = torch.rand(case.B, case.Q, h, 1, case.K, generator=gen)
    attn = attn / attn.sum(-1, keepdim=True)
    grad = torch.randn(case.B, case.Q, h, case.D, generator=gen)
    return tuple(t.to(DTYPES[dtype_name]) for t in (value, loc, attn, grad))


def far_probe(module, dtype_name):
    """msda forward + backward on the far-end case: FAR_HEADS' output and gradients, and how
    many nonzeros the output and each gradient hold outside those heads."""
    case, dev, dtype = FAR, runtime.device(), DTYPES[dtype_name]
    sel = torch.tensor(FAR_HEADS, device=dev)
    gen = torch.Generator(device=dev).manual_seed(case.seed)
    value = torch.zeros(case.B, case.S, case.M, case.D, dtype=dtype, device=dev)
    loc = torch.rand(case.B, case.Q, case.M, 1, case.K, 2, generator=gen, device=dev).to(dtype)
    attn = torch.rand(case.B, case.Q, case.M, 1, case.K, generator=gen, device=dev).to(dtype)
    grad = torch.zeros(case.B, case.Q, case.M, case.D, dtype=dtype, device=dev)
    for full, part in zip((value, loc, attn, grad), far_parts(dtype_name)):
        full[:, :, sel] = part.to(dev)
    for t in (value, loc, attn):
        t.requires_grad_(True)
    shapes = torch.tensor(case.shapes, dtype=torch.int64, device=dev)
    with KernelLaunches() as forward:
        out = module.msda(value, shapes, None, loc, attn)
    with KernelLaunches() as back:
        out.backward(grad.view(case.B, case.Q, case.M * case.D))
    out4 = out.detach().view(case.B, case.Q, case.M, case.D)

    def outside(t):  # nonzeros outside FAR_HEADS (axis 2)
        return int(torch.count_nonzero(t)) - int(torch.count_nonzero(t[:, :, sel]))

    grads = (value.grad, loc.grad, attn.grad)
    result = {"out": out4[:, :, sel].reshape(case.B, case.Q, -1),
              "grads": [g[:, :, sel] for g in grads],
              "outside": [outside(t) for t in (out4, *grads)],
              "launched": {"forward": forward.names, "backward": back.names}}
    if value.is_cuda:
        torch.cuda.synchronize()
    return result


def step_probe(module, case, dtype_name):
    """One training step (msda forward, then the three gradients through autograd) of yours on
    the case's device inputs, untimed: its (out, grad_value, grad_loc, grad_attn) and the kernels
    it launched come back. The step's time is the judge's clock's (speedjudge), never this
    process's."""
    value, shapes, starts, loc, attn = device_inputs(case, dtype_name, requires_grad=True)
    leaves = (value, loc, attn)
    grad = grad_out(case, dtype_name, value.device)
    with KernelLaunches() as forward:
        out = module.msda(value, shapes, starts, loc, attn)
    with KernelLaunches() as back:
        grads = torch.autograd.grad(out, leaves, grad)
    if value.is_cuda:
        torch.cuda.synchronize()
    return {"outputs": {"yours": (out.detach(), *grads)},
            "launched": {"forward": forward.names, "backward": back.names}}
