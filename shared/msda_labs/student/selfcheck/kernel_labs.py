"""Self-check examples of the Triton kernel labs: 04, 05, 06 and 08.

Each kernel is launched the way the grader launches it: on copies of its inputs between guard
bands (NaN, so a read past an edge shows up as NaN) into outputs between guard bands, filled with
the sentinel beforehand (so a write past an edge or an element never written shows up); see
:mod:`msda_labs.student.guards` and :mod:`msda_labs.student.launch`.
"""

from __future__ import annotations

import functools

import torch

from msda_labs.student import launch, runtime, spec
from msda_labs.student.bigcase import BigCase
from msda_labs.student.examples import draw_peaked
from msda_labs.student.guards import between_guards, cdiv, guarded, pow2, sentinel_buffer
from msda_labs.student.selfcheck import Case, Launch, NotHere, Part, Step, describe, small_inputs

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


def _whole(block_q: int):
    """Launch lab 05's kernel (one program per query block and head) between guards."""
    def run(kernel, inputs, guard):
        return launch.forward_into_sentinel(kernel, inputs, block_q=block_q, in_guard=IN_GUARD,
                                            out_guard=guard, BLOCK_D=pow2(inputs.value.shape[3]))
    return run


def _chunked(block_q: int):
    """Launch lab 06's chunked kernel (CHUNK_D=2 channels a program) between wide guards."""
    def run(kernel, inputs, guard):
        B, _, M, D = inputs.value.shape
        Q = inputs.sampling_locations.shape[1]
        return launch.forward_into_sentinel(
            kernel, inputs, block_q=block_q, in_guard=WIDE_GUARD, out_guard=guard,
            fills=(NAN, 0.0, 0.0), grid=(cdiv(Q, block_q), B * M, cdiv(D, 2)), CHUNK_D=2)
    return run


def _msda_forward_kernel(_ns=None) -> Case:
    return _forward("BLOCK_Q=8, BLOCK_D=8", _whole(8))


def _chunked_kernel(_ns=None) -> Case:
    return _forward("BLOCK_Q=8, CHUNK_D=2 (three channel chunks, the last one ragged)",
                    _chunked(8), guard=WIDE_GUARD)


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


# -- labs 05 and 06, python labNN.py --big: past 2**31 elements, and half precision ---------------
# Two batches of one 16384 x 16384 level with M * D = 8: batch 1 starts at value element 2**31,
# past the int32 range (a sparse file on the CPU: a few hundred KiB of memory). The expected values
# come from the same samples on the windows alone, a small level.
PAST_2_31 = BigCase("past_2_31", B=2, Q=5, M=1, D=8, K=2,
                    corners=(((1 << 14) - 10, (1 << 14) - 17), (3, 6)), seed=57)
# Its twin: the very same samples on a 32x32 level, every offset far inside the int32 range. Run
# only when the big case fails: if the twin is right, the size alone broke the kernel.
TWIN = PAST_2_31.twin()


def _room_for(case: BigCase, copies: int) -> str:
    """The device to run ``case`` on; :class:`NotHere` when it is a GPU without room for
    ``copies`` whole value tensors (a CPU maps them as sparse files)."""
    dev = runtime.device()
    if dev != "cpu":
        free = torch.cuda.mem_get_info()[0]
        need = copies * case.B * case.S * case.M * case.D * 4
        if free < need + (1 << 30):
            raise NotHere(f"it needs {need / 2**30:.0f} GiB of free GPU memory, this GPU has "
                          f"{free / 2**30:.1f} GiB free (on the CPU: TRITON_INTERPRET=1)")
    return dev


def _big_what(case: BigCase) -> str:
    sizes = f"B={case.B} Q={case.Q} M={case.M} D={case.D} K={case.K}"
    if case.small:
        return (f"{sizes}, the same samples on one {case.side}x{case.side} level (every offset "
                f"far inside int32), BLOCK_Q=4")
    return (f"{sizes}, one 16384x16384 level: batch 1 starts at value element "
            f"{case.S * case.M * case.D:,} > 2**31, BLOCK_Q=4")


def _past_2_31(what_extra: str, launch_it, case: BigCase) -> Case:
    shape, guard = (case.B, case.Q, case.M, case.D), launch.forward_guard(4, case.M, case.D)
    dev = _room_for(case, 1)
    small = case.small_inputs()

    def call(kernel):
        buf, out = sentinel_buffer(shape, torch.float32, dev, guard)
        launch_it(kernel, case.big_inputs(dev), out)
        return Launch([Part("out", buf, shape, guard)])

    return Case(f"{_big_what(case)}, {what_extra}",
                {"value": f"{(case.B, case.S, case.M, case.D)} float32"
                          + ("" if case.small else " (a sparse file)")}, call,
                lambda: spec.msda(small.value, small.spatial_shapes, small.sampling_locations,
                                  small.attention_weights).view(shape),
                spec_name="msda_labs.student.spec.msda on the same samples on a small level")


def _half(what_extra: str, launch_it) -> Case:
    inputs = draw_peaked(torch.Generator().manual_seed(56), B=1, Q=4, M=1, D=4, K=32,
                         shapes=((4, 4), (2, 2)))
    value, shapes, _, loc, attn = inputs
    B, _, M, D = value.shape
    Q = loc.shape[1]
    guard = launch.forward_guard(4, M, D)

    def call(kernel):
        buf = launch_it(kernel, inputs, guard)
        return Launch([Part("out", buf, (B, Q, M, D), guard)])

    return Case(f"float16, B=1 Q=4 M=1 D=4 L=2 K=32, values near 54 and one point of each query "
                f"carrying 98% of the weight (63 small terms an fp16 running sum rounds away), "
                f"{what_extra}", {"value": value, "sampling_locations": loc}, call,
                lambda: spec.msda(value, shapes, loc, attn).view(B, Q, M, D),
                dtype=torch.float16)


def _launch_whole(kernel, inputs, out) -> None:
    launch.launch_forward(kernel, inputs, out, block_q=4, BLOCK_D=pow2(inputs[0].shape[3]))


def _launch_chunked(kernel, inputs, out) -> None:
    B, _, M, D = inputs[0].shape
    Q = inputs[3].shape[1]
    launch.launch_forward(kernel, inputs, out, block_q=4, grid=(cdiv(Q, 4), B * M, cdiv(D, 2)),
                          CHUNK_D=2)


def _forward_past_2_31(_ns=None, case: BigCase = PAST_2_31) -> Case:
    return _past_2_31("BLOCK_D=8", _launch_whole, case)


def _chunked_past_2_31(_ns=None, case: BigCase = PAST_2_31) -> Case:
    return _past_2_31("CHUNK_D=2", _launch_chunked, case)


def _forward_half(_ns=None) -> Case:
    return _half("BLOCK_Q=4", _whole(4))


def _chunked_half(_ns=None) -> Case:
    return _half("BLOCK_Q=4, CHUNK_D=2", _chunked(4))


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


def _backward_past_2_31(_ns=None, case: BigCase = PAST_2_31) -> Case:
    dev = _room_for(case, 2)  # value and grad_value
    small = case.small_inputs()
    grad_out = case.upstream()
    win, pguard = case.window, launch.point_guard(4, case.M, 1, case.K)

    def call(kernel):
        inputs = case.big_inputs(dev)
        loc, attn = inputs[3], inputs[4]
        grad_value = case.zeros_like_value(dev)
        gl_buf, grad_loc = sentinel_buffer(loc.shape, loc.dtype, dev, pguard)
        ga_buf, grad_attn = sentinel_buffer(attn.shape, attn.dtype, dev, pguard)
        g = grad_out.to(dev).reshape(case.B, case.Q, case.M, case.D)
        launch.launch_backward(kernel, inputs, between_guards(g, pguard),
                               (grad_value, grad_loc, grad_attn), block_q=4)
        windows = case.windows_of(grad_value)  # what the samples can reach, batch by batch
        return Launch([Part("grad_value", windows.flatten(), tuple(windows.shape), 0,
                            start="zeros"),
                       Part("grad_loc", gl_buf, tuple(loc.shape), pguard),
                       Part("grad_attn", ga_buf, tuple(attn.shape), pguard)])

    def expected():
        gv, gl, ga = spec.msda_grads(small.value, small.spatial_shapes, small.sampling_locations,
                                     small.attention_weights, grad_out)
        # The same samples on the big level: grad_loc scales by side / window (exact).
        return gv.reshape(case.B, win, win, case.M, case.D), gl * case.scale, ga

    return Case(f"{_big_what(case)}, a random grad_out; grad_value compared on the 8x8 window "
                f"each batch samples", {"value": f"{(case.B, case.S, case.M, case.D)} float32"
                                                 + ("" if case.small else " (a sparse file)")},
                call, expected,
                names=("grad_value", "grad_loc", "grad_attn"), backward=True,
                spec_name="autograd through msda_labs.student.spec.msda on the same samples on a "
                          "small level")


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

# ``python labNN.py --big``: a case past 2**31 value elements and a half-precision one.
BIG_STEPS = {
    5: lambda: [Step("5.6", "msda_forward_kernel", _forward_half, "half precision"),
                Step("5.7", "msda_forward_kernel", _forward_past_2_31, "past 2**31",
                     twin=functools.partial(_forward_past_2_31, case=TWIN))],
    6: lambda: [Step("6.1", "msda_forward_chunked_kernel", _chunked_half, "half precision"),
                Step("6.1", "msda_forward_chunked_kernel", _chunked_past_2_31, "past 2**31",
                     twin=functools.partial(_chunked_past_2_31, case=TWIN))],
    8: lambda: [Step("8.3", "msda_backward_kernel", _backward_past_2_31, "past 2**31",
                     twin=functools.partial(_backward_past_2_31, case=TWIN))],
}
