"""Self-check examples of the Triton kernel labs: 04, 05, 06 and 08.

Each kernel is launched the way the grader launches it: on copies of its inputs between guard
bands (NaN, so a read past an edge shows up as NaN) into outputs between guard bands, filled with
the sentinel beforehand (so a write past an edge or an element never written shows up); see
:mod:`msda_labs.student.guards` and :mod:`msda_labs.student.launch`.
"""

from __future__ import annotations

import torch

from msda_labs.student import launch, runtime, spec
from msda_labs.student.guards import between_guards, cdiv, guarded, pow2, sentinel_buffer
from msda_labs.student.selfcheck import Case, Launch, Part, Step, describe, small_inputs

IN_GUARD = 16  # NaN elements around each input of labs 04 and 05
WIDE_GUARD = 4096  # lab 06's band around every buffer, as its grader lays them out (value's
# guards NaN, those of the locations and weights 0): a wrong chunk offset can reach far
NAN = float("nan")


def _device(*tensors):
    dev = runtime.device()
    return tuple(t.to(dev) for t in tensors)


# -- lab 04 ---------------------------------------------------------------------------------------
def _copy2d(_ns=None) -> Case:
    x = torch.randn(21, 13, generator=torch.Generator().manual_seed(40))
    br, bc = 8, 8
    guard = max(64, 2 * br * bc)

    def call(kernel):
        (xd,) = _device(x)
        buf, out = sentinel_buffer(x.shape, x.dtype, xd.device, guard)
        kernel[(cdiv(21, br), cdiv(13, bc))](between_guards(xd, IN_GUARD), out, 21, 13,
                                             BLOCK_R=br, BLOCK_C=bc)
        return Launch([Part("out", buf, tuple(x.shape), guard)])

    return Case("a 21x13 matrix in 8x8 tiles (ragged on both axes)", {"x": x}, call,
                lambda: x.to(torch.float64), spec_name="the input itself")


def _gather(_ns=None) -> Case:
    gen = torch.Generator().manual_seed(41)
    src = torch.randn(50, generator=gen)
    idx = torch.randint(0, 50, (37,), generator=gen)
    block, guard = 16, 64

    def call(kernel):
        s, i = _device(src, idx)
        buf, out = sentinel_buffer((37,), src.dtype, s.device, guard)
        # Past idx's ends lie -1s: read through, they land in src's NaN guard band.
        kernel[(cdiv(37, block),)](between_guards(s, IN_GUARD), between_guards(i, IN_GUARD, -1),
                                   out, 37, BLOCK=block)
        return Launch([Part("out", buf, (37,), guard)])

    return Case("37 indices into 50 values, BLOCK=16 (ragged last block)",
                {"src": src, "idx": idx}, call, lambda: src[idx].to(torch.float64),
                spec_name="src[idx] in torch")


def _bilinear(_ns=None) -> Case:
    gen = torch.Generator().manual_seed(42)
    img = torch.randn(5, 7, 5, generator=gen)
    loc = torch.rand(13, 2, generator=gen) * 1.4 - 0.2
    bq = 8
    guard = max(64, 2 * bq * pow2(5))

    def call(kernel):
        value, ld = _device(img.reshape(35, 5), loc)
        buf, out = sentinel_buffer((13, 5), img.dtype, value.device, guard)
        kernel[(cdiv(13, bq),)](between_guards(value, IN_GUARD), between_guards(ld, IN_GUARD),
                                out, 13, 5, 7, D=5, BLOCK_Q=bq, BLOCK_D=pow2(5))
        return Launch([Part("out", buf, (13, 5), guard)])

    return Case("a 5x7 image with D=5 (BLOCK_D=8) at 13 locations, some outside, BLOCK_Q=8",
                {"value": img, "loc": loc}, call, lambda: spec.bilinear_image(img, loc))


# -- labs 05 and 06: the forward kernel ------------------------------------------------------------
def _forward(what_extra: str, launch_it, guard: int = 0) -> Case:
    inputs = small_inputs()
    value, shapes, _, loc, attn = inputs
    B, S, M, D = value.shape
    Q = loc.shape[1]
    guard = guard or launch.forward_guard(8, M, D)

    def call(kernel):
        buf = launch_it(kernel, inputs, guard)
        return Launch([Part("out", buf, (B, Q, M, D), guard)])

    return Case(f"{describe(inputs)}, {what_extra}", {"value": value, "sampling_locations": loc},
                call, lambda: spec.msda(value, shapes, loc, attn).view(B, Q, M, D))


def _msda_forward_kernel(_ns=None) -> Case:
    return _forward("BLOCK_Q=8, BLOCK_D=8", lambda kernel, inputs, guard: (
        launch.forward_into_sentinel(kernel, inputs, block_q=8, in_guard=IN_GUARD,
                                     out_guard=guard, BLOCK_D=pow2(inputs.value.shape[3]))))


def _chunked_kernel(_ns=None) -> Case:
    def run(kernel, inputs, guard):
        B, _, M, D = inputs.value.shape
        Q = inputs.sampling_locations.shape[1]
        return launch.forward_into_sentinel(
            kernel, inputs, block_q=8, in_guard=WIDE_GUARD, out_guard=guard,
            fills=(NAN, 0.0, 0.0), grid=(cdiv(Q, 8), B * M, cdiv(D, 2)), CHUNK_D=2)

    return _forward("BLOCK_Q=8, CHUNK_D=2 (three channel chunks, the last one ragged)", run,
                    guard=WIDE_GUARD)


def _forward_configs(_ns=None) -> Case:
    def call(fn):
        return sorted((c.kwargs.get("BLOCK_Q"), c.num_warps) for c in fn())

    return Case("the search space", {}, call,
                lambda: sorted((bq, w) for bq in (16, 32, 64) for w in (2, 4)),
                names=("(BLOCK_Q, num_warps) of each config",))


def _make_autotuned(ns=None) -> Case:
    keys = list((ns or {}).get("AUTOTUNE_KEY", ["Q", "M", "D", "L", "K"]))

    def call(fn):
        tuned = fn()
        return type(tuned).__name__, [str(k) for k in getattr(tuned, "keys", [])]

    return Case("the default configs", {}, call, lambda: ("Autotuner", keys),
                names=("the kernel's type", "the keys it tunes again for"))


def _autotuned(ns=None) -> Case:
    if ns is None or "make_autotuned_forward" not in ns:
        raise KeyError("this case needs the lab module: case(6, 'msda_forward_autotuned', lab06)")
    inputs = small_inputs()
    value, shapes, starts, loc, attn = inputs

    def call(fn):
        import triton

        # One config: the interpreter cannot benchmark several (on a GPU, all of them tune).
        one = [triton.Config({"BLOCK_Q": 8}, num_warps=1)] if runtime.interpreted() else None
        kernel = ns["make_autotuned_forward"](one)
        return fn(*_device(value, shapes, starts, loc, attn), kernel=kernel)

    return Case(f"{describe(inputs)}, one config (BLOCK_Q=8) in the interpreter",
                {"value": value, "sampling_locations": loc}, call,
                lambda: spec.msda(value, shapes, loc, attn))


# -- lab 08 ---------------------------------------------------------------------------------------
def _histogram_idx():
    return torch.randint(0, 8, (300,), generator=torch.Generator().manual_seed(80))


def _predict_racy(_ns=None) -> Case:
    # 40 bins for blocks of 100: each program misses some bins and holds others several times,
    # so the counts (1, 2 or 3) differ from bin to bin and an answer that ignores idx is wrong.
    idx = torch.randint(0, 40, (250,), generator=torch.Generator().manual_seed(80))
    return Case("250 elements in 40 bins, BLOCK=100 (not a power of two, ragged last block)",
                {"idx": idx}, lambda fn: fn(*_device(idx), 40, 100),
                lambda: spec.racy_histogram(idx, 40, 100),
                spec_name="msda_labs.student.spec.racy_histogram (the interpreter acted out)")


def _histogram_atomic(_ns=None) -> Case:
    idx = _histogram_idx()
    block, guard = 64, 128

    def call(kernel):
        (i,) = _device(idx)
        # Past idx's ends lie the bin 8, one past the last: read through, it lands in the guard.
        buf, out = guarded((8,), 0.0, torch.float32, i.device, guard)
        kernel[(cdiv(300, block),)](between_guards(i, guard, 8), out, 300, BLOCK=block)
        return Launch([Part("out", buf, (8,), guard, start="zeros")])

    return Case("300 elements in 8 bins, BLOCK=64 (ragged last block)", {"idx": idx}, call,
                lambda: spec.histogram(idx, 8))


def _backward_kernel(_ns=None) -> Case:
    inputs = small_inputs()
    value, shapes, _, loc, attn = inputs
    B, S, M, D = value.shape
    Q, L, K = loc.shape[1], loc.shape[3], loc.shape[4]
    grad_out = torch.randn(B, Q, M * D, generator=torch.Generator().manual_seed(81))
    vguard, pguard = launch.value_guard(S, M, D), launch.point_guard(8, M, L, K)

    def call(kernel):
        gv, gl, ga = launch.backward_into_sentinels(kernel, inputs, grad_out, block_q=8)
        return Launch([Part("grad_value", gv, tuple(value.shape), vguard, start="zeros"),
                       Part("grad_loc", gl, tuple(loc.shape), pguard),
                       Part("grad_attn", ga, tuple(attn.shape), pguard)])

    return Case(f"{describe(inputs)}, BLOCK_Q=8, a random grad_out",
                {"value": value, "grad_out": grad_out}, call,
                lambda: spec.msda_grads(value, shapes, loc, attn, grad_out),
                names=("grad_value", "grad_loc", "grad_attn"), backward=True,
                spec_name="autograd through msda_labs.student.spec.msda")


def _lab05_helpers() -> tuple:
    """Lab 05's three @triton.jit helpers (Tasks 5.1-5.3), each in a test kernel of its own."""
    from msda_labs.student.selfcheck.lab05_helpers import HELPER_STEPS

    return HELPER_STEPS


STEPS = {
    4: lambda: [Step("4.1", "copy2d_kernel", _copy2d), Step("4.2", "gather_kernel", _gather),
                Step("4.3", "bilinear_kernel", _bilinear)],
    5: lambda: [*_lab05_helpers(), Step("5.4", "msda_forward_kernel", _msda_forward_kernel)],
    6: lambda: [Step("6.1", "msda_forward_chunked_kernel", _chunked_kernel),
                Step("6.2", "forward_configs", _forward_configs),
                Step("6.2", "make_autotuned_forward", _make_autotuned),
                Step("6.2", "msda_forward_autotuned", _autotuned)],
    8: lambda: [Step("8.1", "predict_racy_histogram", _predict_racy),
                Step("8.2", "histogram_atomic_kernel", _histogram_atomic),
                Step("8.3", "msda_backward_kernel", _backward_kernel)],
}
