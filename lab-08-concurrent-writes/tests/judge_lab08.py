"""Judge-side rules of lab 08 that the test file (test_lab08_atomics.py) states in one line each:
the racy histogram's graded cases and its known wrong answers (the rule itself is in
truth_lab08.py, which the template carries as a recording), what each guarded buffer must hold,
and the gradients' comparisons. Nothing here runs student code: it reads what the probes
(probes_lab08.py) sent back, and the submission's source.
"""

import ast
import math

import torch
from truth_lab08 import racy_rule, wrong_models

from msda_labs.grading import expect_close, expect_tensor
from msda_labs.grading.judge.guards import cdiv, check_sentinel_buffer
from msda_labs.grading.judge.plugin import SubmissionError
from msda_labs.grading.judge.probes import point_guard, timed_output, value_guard
from msda_labs.mistakes import grad_variants, lost_update_grad_value
from msda_labs.truth.cases import MSDAInputs, make_inputs, seeded_generator
from msda_labs.truth.reference import reference_grads

NAMES = ("grad_value", "grad_loc", "grad_attn")
CRASH_HINT = ("in the interpreter a crash is almost always a load, store or atomic at a wild "
              "address: an unmasked lane")


# -- Task 8.1 -------------------------------------------------------------------------------------
def seeded_indices(n: int, n_bins: int, seed: int, skew: bool = False) -> torch.Tensor:
    """``n`` seeded bin indices; ``skew``: most of them in the first two bins."""
    gen = seeded_generator(seed)
    if skew:
        return (torch.rand(n, generator=gen) ** 4 * n_bins).long()
    return torch.randint(0, n_bins, (n,), generator=gen)


def separating_indices(n: int, n_bins: int, block: int, seed: int,
                       skew: bool = False) -> torch.Tensor:
    """Seeded indices for a graded case of Task 8.1 on which the racy histogram is not the same
    count in every bin (so no answer computed from the sizes alone is right) and differs from
    every known wrong model of the race: the first of the seeds ``seed``, ``seed + 1000``, ...
    that draws such indices (with the run's salt, the draw changes; the property does not)."""
    for attempt in range(64):
        idx = seeded_indices(n, n_bins, seed + 1000 * attempt, skew)
        rule = racy_rule(idx, n_bins, block)
        if bool((rule == rule[0]).all()):
            continue
        if all(not torch.equal(model, rule) for model in wrong_models(idx, n_bins, block).values()):
            return idx
    raise RuntimeError(f"grader self-check: no seed gives {n} indices into {n_bins} bins with "
                       f"BLOCK={block} that tell the race from its wrong models")


def racy_variants(idx: torch.Tensor, n_bins: int, block: int) -> dict:
    exact = torch.bincount(idx, minlength=n_bins).float()
    programs = cdiv(idx.numel(), block)
    models = wrong_models(idx, n_bins, block)
    return {
        "strided": (models["strided"], f"elements dealt out to the {programs} programs in turn "
                    f"(element i to program i % {programs}); program pid holds the contiguous "
                    f"block of elements pid * BLOCK to pid * BLOCK + BLOCK - 1"),
        "clamped": (models["clamped"], f"the exact histogram capped at the {programs} programs: "
                    f"a bin counts one +1 per program that holds it, however many of its "
                    f"elements a program holds and whichever programs hold none"),
        "programs_everywhere": (torch.full((n_bins,), float(programs)),
                                f"{programs} (the number of programs) in every bin: that is only "
                                f"right when every program holds every bin; count the programs "
                                f"that hold each bin in idx"),
        "exact": (exact, "an exact histogram: the interpreter runs one program after another, "
                  "but the lanes of one program load, add and store together, so lanes of one "
                  "block that share a bin collapse into a single +1"),
        "one_block": ((exact > 0).float(), "one +1 per bin for the whole input, as if it were a "
                      "single block: the programs run one after another, so each program's "
                      "updates survive"),
    }


def racy_target(measured, idx, n_bins, block, where):
    """(what the prediction must equal, what is compared): the grader's racy kernel's output
    when it ran (it must follow the rule, or this Triton differs), else the rule itself."""
    rule = racy_rule(idx, n_bins, block)
    if measured is None:
        return rule, "predict_racy_histogram (no kernel can run with this BLOCK)"
    measured = expect_tensor(measured, "the grader's racy kernel", shape=(n_bins,))
    if not torch.equal(measured.float(), rule):
        raise RuntimeError(
            f"the racy kernel returned {measured.tolist()} on {where}, which the grader's rule "
            f"{rule.tolist()} does not predict: this Triton's interpreter behaves differently; "
            f"tell your instructor")
    return measured.float(), "predict_racy_histogram vs the racy kernel's real output"


def rule_no_kernels(submission):
    """predict_racy_histogram must not launch a kernel (or the lab's launchers) to find out:
    read in every def bound to it, wherever it stands, and in the module's functions it reaches
    (a def the judge cannot find or read fails the rule: ``SourceInfo.definitions``)."""
    found = []
    subs = (sub for node in submission.source.definitions("predict_racy_histogram")
            for sub in ast.walk(node))
    for sub in subs:
        if isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Subscript):
                found.append(f"line {sub.lineno}: a kernel launch")
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called in ("histogram_racy", "histogram_atomic"):
                found.append(f"line {sub.lineno}: {called}()")
    if found:
        raise AssertionError("rule: predict_racy_histogram must compute its answer, not run a "
                             "kernel to find it (" + "; ".join(found) + ")")


# -- Task 8.2 -------------------------------------------------------------------------------------
def check_histogram(buf, idx, n_bins, block, guard, where):
    """The atomic histogram's guarded buffer: exact counts, nothing added outside out."""
    what = "histogram_atomic_kernel"
    n = idx.numel()
    buf = expect_tensor(buf, f"{what} on {where}", shape=(n_bins + 2 * guard,))
    exact = torch.bincount(idx, minlength=n_bins).float()
    pad = cdiv(n, block) * block - n
    tail = exact.clone()
    tail[0] += pad
    variants = {
        "racy": (racy_rule(idx, n_bins, block), "lost updates: a load, +1 and store is not "
                 "atomic, so lanes that share a bin keep one +1 between them; use tl.atomic_add"),
        "unmasked_tail": (tail, f"an unmasked tail: the {pad} lanes past n of the last block "
                          f"each added 1 to bin 0 (their masked load returned other=0); give "
                          f"the atomic the mask too"),
    }
    expect_close(buf[guard : guard + n_bins], exact, what=what, case=where, rtol=0, atol=0,
                 variants=variants)
    if bool((buf[guard + n_bins :] != 0).any()):
        raise AssertionError(
            f"{what} on {where}: the kernel added into memory past the end of out: an unmasked "
            f"lane past n read a bin from beyond idx; mask the load and the atomic")
    if bool((buf[:guard] != 0).any()):
        raise AssertionError(f"{what} on {where}: the kernel added into memory before out")


# -- Task 8.3 -------------------------------------------------------------------------------------
def shared_pixels(case, grad_row, block_q):
    """Every query samples the very same point with the same weight and upstream gradient:
    (inputs, grad_out, variants), the lost updates of lanes that collapse named first."""
    base = make_inputs(case)
    loc = torch.tensor([0.43, 0.61]).expand(1, case.Q, 1, 1, 1, 2).contiguous()
    attn = torch.full((1, case.Q, 1, 1, 1), 0.75)
    grad_out = grad_row[:, :1].expand(1, case.Q, case.D).contiguous()
    inputs = MSDAInputs(base.value, base.spatial_shapes, base.level_start_index, loc, attn)
    ref = reference_grads(base.value, base.spatial_shapes, loc, attn, grad_out)[0]
    writes = (ref != 0).long() * case.Q
    survivors = (writes > 0).long() * cdiv(case.Q, block_q)  # one per program: lanes collapse
    variants = {"lost_updates": lost_update_grad_value(ref, writes, survivors)}
    variants.update(grad_variants(inputs, grad_out, "grad_value"))
    return inputs, grad_out, variants


def check_point_buffer(buf, shape, dtype, guard, *, what, where):
    """grad_loc or grad_attn: guards intact and every element written; the output of ``shape``."""
    return check_sentinel_buffer(
        buf, shape, dtype, guard, label=f"{what} on {where}",
        past_end="the kernel wrote {count} elements past its end (from {distance} element(s) "
        "after its last one); this is an unmasked tail: the rows q >= Q of the last query "
        "block; store under mask_q",
        before_start="the kernel wrote before its start",
        unwritten="{count} of {n} elements were never written (first at {at}); the wrapper "
        "allocates it with torch.empty, so every element must be stored by the program that "
        "owns it")


def _check_grad_value_buffer(buf, shape, guard, ref, *, what, where, variants):
    n = math.prod(shape)
    buf = expect_tensor(buf, f"{what} on {where}", shape=(n + 2 * guard,), dtype=torch.float32)
    expect_close(buf[guard : guard + n].view(shape), ref, what=what, case=where,
                 dtype=torch.float32, backward=True, variants=variants)
    for name, part in (("before its start", buf[:guard]), ("past its end", buf[guard + n :])):
        touched = int((part != 0).sum())
        if touched:
            raise AssertionError(
                f"{what} on {where}: the kernel added into {touched} elements {name}: an atomic "
                f"whose mask lets an out-of-bounds corner through; use the corner's mask")


def check_gradient_buffer(buffers, output, inputs, grad_out, block_q, *, where, variants):
    """One of the backward kernel's three guarded buffers against fp32 autograd of the
    reference."""
    which = NAMES.index(output)
    buf = buffers[which]
    ref = reference_grads(inputs.value, inputs.spatial_shapes, inputs.sampling_locations,
                          inputs.attention_weights, grad_out)[which]
    value, loc = inputs.value, inputs.sampling_locations
    B, S, M, D = value.shape
    what = f"msda_backward_kernel ({output})"
    if output == "grad_value":
        _check_grad_value_buffer(buf, value.shape, value_guard(S, M, D), ref, what=what,
                                 where=where, variants=variants)
        return
    shape = loc.shape if output == "grad_loc" else inputs.attention_weights.shape
    res = check_point_buffer(buf, shape, torch.float32,
                             point_guard(block_q, M, loc.shape[3], loc.shape[4]), what=what,
                             where=where)
    expect_close(res, ref, what=what, case=where, dtype=torch.float32, backward=True,
                 variants=variants)


def check_big_gradients(res, case, block_q):
    """The big case: grad_value's windows, grad_loc (scaled: d small / d big location) and
    grad_attn against the equivalent small case's gradients."""
    windows, gl_buf, ga_buf = res
    small = case.small_inputs()
    refs = reference_grads(small.value, small.spatial_shapes, small.sampling_locations,
                           small.attention_weights, case.upstream())
    window_shape = (case.B, case.window, case.window, case.M, case.D)
    where = case.describe()
    expect_close(expect_tensor(windows, "grad_value's windows", shape=window_shape),
                 refs[0].view(window_shape),
                 what="msda_backward_kernel (grad_value, the pixels the points touch)",
                 case=where, dtype=torch.float32, backward=True)
    pguard = point_guard(block_q, case.M, 1, case.K)
    for name, buf, ref, scale in (("grad_loc", gl_buf, refs[1], case.scale),
                                  ("grad_attn", ga_buf, refs[2], 1.0)):
        what = f"msda_backward_kernel ({name})"
        out = check_point_buffer(buf, ref.shape, torch.float32, pguard, what=what, where=where)
        expect_close(out, ref * scale, what=what, case=where, dtype=torch.float32,
                     backward=True)


def bf16_atomics_hint(dtype, call):
    """``call()``; a bf16 run that fails on the interpreter's missing bf16 atomic add says why."""
    try:
        return call()
    except SubmissionError as exc:
        if dtype == torch.bfloat16 and "Unsupported data type" in str(exc):
            raise SubmissionError(
                f"{exc}; the interpreter has no bf16 atomic add: with fp32_grad_accum=True "
                f"grad_value must be accumulated in an fp32 buffer (and atomics must add in the "
                f"buffer's own dtype)") from None
        raise


def launched_backward_kernel(res, what):
    """The gradients of a wrapper probe's result, once it is clear that the given wrapper ran
    the lab's kernel (an earlier lab's PyTorch backward in its place earns nothing here)."""
    launched = res.get("launched") if isinstance(res, dict) else None
    if launched is None:
        raise AssertionError(f"{what}: the probe returned no result")
    if "msda_backward_kernel" not in launched:
        raise AssertionError(f"{what} launched {launched or 'no Triton kernel'}, not "
                             f"msda_backward_kernel: the given wrapper runs your kernel; a "
                             f"stand-in for it earns nothing here")
    return res["grads"]


def check_three_gradients(res, inputs, grad_out, dtype, *, what, where, suffix="",
                          named=False):
    """msda_backward's (grad_value, grad_loc, grad_attn) against fp32 autograd of the reference
    on the same inputs; ``named``: known mistakes are named."""
    if not isinstance(res, (tuple, list)) or len(res) != 3:
        raise AssertionError(f"{what} on {where}: expected a tuple of three tensors")
    refs = reference_grads(inputs.value, inputs.spatial_shapes, inputs.sampling_locations,
                           inputs.attention_weights, grad_out)
    for name, got, ref in zip(NAMES, res, refs):
        expect_close(got, ref, what=f"{what} {name}{suffix}", case=where, dtype=dtype,
                     backward=True, expect_dtype=dtype,
                     variants=grad_variants(inputs, grad_out, name) if named else None)


def check_timed_gradients(measured, refs, dtype, where):
    """The gradients of the call that was timed (a fast wrong answer earns nothing)."""
    res = timed_output(measured)
    if not isinstance(res, (tuple, list)) or len(res) != 3:
        raise AssertionError(
            f"msda_backward (the call that is timed) on {where}: expected a tuple of three tensors")
    for name, got, ref in zip(NAMES, res, refs):
        expect_close(got, ref, what=f"msda_backward {name} (the call that is timed) on the GPU",
                     case=where, dtype=dtype, backward=True, expect_dtype=dtype)


def speed_baselines(case, dtype_name: str) -> dict:
    """The baselines of the speed test, on the judge's own copy of the inputs the speed probe
    builds (same seeds, same device): the reference's forward + backward, its forward alone,
    and the lab 08 chip's msda_backward where this copy of the kit carries it."""
    from probes_lab08 import upstream

    from msda_labs.grading.judge.baseline import chip_function
    from msda_labs.truth.reference import msda_reference

    dtype = getattr(torch, dtype_name)
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: the kit's plumbing tests
    value, shapes, starts, loc, attn = make_inputs(case, dtype, device=dev)
    grad_out = upstream(case).to(device=dev, dtype=dtype)
    # The reference reads the level sizes as Python ints: from a CPU copy, so that no call waits
    # for the device (a call that waits cannot be captured in a CUDA graph).
    host_shapes = shapes.cpu()
    leaves = tuple(t.detach().requires_grad_() for t in (value, loc, attn))

    def reference_forward_backward():
        out = msda_reference(leaves[0], host_shapes, leaves[1], leaves[2])
        return torch.autograd.grad(out, leaves, grad_out)

    def reference_forward():
        with torch.no_grad():
            return msda_reference(leaves[0], host_shapes, leaves[1], leaves[2])

    chip = chip_function("lab08", "msda_backward")
    return {"reference": reference_forward_backward, "reference_forward": reference_forward,
            "chip": None if chip is None else (lambda: chip(value, shapes, starts, loc, attn,
                                                            grad_out))}
