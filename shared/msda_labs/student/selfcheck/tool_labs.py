"""Self-check examples of lab 09 (PTX, compiled ahead of time, no GPU) and lab 10 (the operator)."""

from __future__ import annotations

import torch

from msda_labs.student import runtime, spec
from msda_labs.student.selfcheck import Case, Step, describe, small_inputs

# -- lab 09 ---------------------------------------------------------------------------------------
# The lab's examples come with their answers written out (a worked example, not a general rule).
# A made-up PTX excerpt with the shapes the lab meets: a native add (twice), a reduction under a
# predicate, a compare-and-swap loop, and words that only look like atomics.
PTX = """\
    // the atom. and red. words in this comment are not instructions
    ld.global.b16 %rs1, [%rd4];
    atom.global.gpu.acq_rel.cas.b32 %r9, [%rd7], %r5, %r8;
    @%p1 red.global.add.f32 [%rd2], %f3;
    atom.global.gpu.relaxed.add.f32 %f5, [%rd3], %f4;
    atom.global.gpu.relaxed.add.f32 %f6, [%rd5], %f4;
    mov.u32 %r3, %tid.x;
"""
PTX_ATOMICS = ["atom.global.gpu.acq_rel.cas.b32", "atom.global.gpu.relaxed.add.f32",
               "red.global.add.f32"]
# Token lists and their verdicts.
VERDICTS = {"no atomics": ([], "none"),
            "a native red": (["red.global.add.f32"], "native"),
            "a native atom": (["atom.global.gpu.relaxed.add.f32"], "native"),
            "with a cas": (["atom.global.add.noftz.bf16", "atom.global.cas.b32"], "emulated")}
# The lab's table: which (dtype, GPU) pairs route grad_value through an fp32 buffer.
THROUGH_FP32 = {(torch.bfloat16, (8, 0)), (torch.bfloat16, (8, 9))}
SWITCH = [(dt, cap) for dt in (torch.float32, torch.float16, torch.bfloat16)
          for cap in ((8, 0), (8, 9), (9, 0))]
LAB_TABLE = "the lab's table (README, The spec)"


def _find_atomics(_ns=None) -> Case:
    return Case("a made-up PTX excerpt of 7 lines", {"ptx": f"{len(PTX)} characters"},
                lambda fn: fn(PTX), lambda: PTX_ATOMICS, spec_name="the excerpt's atomics")


def _classify(_ns=None) -> Case:
    return Case("four token lists: none, a native red, a native atom, one with a cas",
                {name: tokens for name, (tokens, _) in VERDICTS.items()},
                lambda fn: tuple(fn(list(tokens)) for tokens, _ in VERDICTS.values()),
                lambda: tuple(verdict for _, verdict in VERDICTS.values()), names=tuple(VERDICTS),
                spec_name=LAB_TABLE)


def _switch(_ns=None) -> Case:
    return Case("3 dtypes x 3 GPUs (SM 8.0, 8.9, 9.0)", {},
                lambda fn: tuple(fn(*a) for a in SWITCH),
                lambda: tuple(a in THROUGH_FP32 for a in SWITCH),
                names=tuple(f"{str(dt)[6:]} on SM {cap[0]}.{cap[1]}" for dt, cap in SWITCH),
                spec_name=LAB_TABLE)


# The arguments of lab 08's backward kernel, in order, with what each one is.
BACKWARD_ARGS = (("value_ptr", "value"), ("shapes_ptr", "i64"), ("starts_ptr", "i64"),
                 ("loc_ptr", "value"), ("attn_ptr", "value"), ("grad_out_ptr", "value"),
                 ("grad_value_ptr", "accum"), ("grad_loc_ptr", "value"),
                 ("grad_attn_ptr", "value"), ("Q", "size"), ("S", "size"), ("M", "c"),
                 ("D", "c"), ("L", "c"), ("K", "c"), ("BLOCK_Q", "c"), ("BLOCK_D", "c"))


def _backward_kernel():
    from msda_labs.student.earlier import load

    return load(8, "msda_backward_kernel")


def _signature(_ns=None) -> Case:
    kernel, source = _backward_kernel()
    kinds = {"value": "*bf16", "i64": "*i64", "accum": "*fp32", "size": "i64", "c": "constexpr"}
    return Case(f"lab 08's backward kernel ({source}), bf16 values, an fp32 accumulator", {},
                lambda fn: fn(kernel, "bf16", "fp32"),
                lambda: {name: kinds[kind] for name, kind in BACKWARD_ARGS},
                spec_name="the lab 08 kernel's signature, argument by argument")


def _compile(_ns=None) -> Case:
    from msda_labs.student.ptx import ptx_target

    kernel, source = _backward_kernel()
    targets = ((80, "bf16"), (90, "bf16"))

    def call(fn):
        found = []
        for cc, buffer in targets:
            ptx = fn(kernel, "bf16", buffer, cc)
            target = str(ptx_target(ptx) if isinstance(ptx, str) else ptx)
            target = f"sm_{cc}" if target.startswith(f"sm_{cc}") else target  # sm_90a is sm_90
            kind = "emulated" if ".cas." in str(ptx) else \
                "native" if ("atom." in str(ptx) or "red." in str(ptx)) else "none"
            found.append(f"{target}, {kind}")
        return tuple(found)

    return Case(f"lab 08's backward kernel ({source}), bf16 values and a bf16 accumulator",
                {}, call, lambda: ("sm_80, emulated", "sm_90, native"),
                names=("PTX for SM 8.0 (target, atomics)", "PTX for SM 9.0 (target, atomics)"),
                spec_name=LAB_TABLE)


# -- lab 10 ---------------------------------------------------------------------------------------
def _operator_case(launcher: str):
    inputs = small_inputs()
    value, shapes, starts, loc, attn = inputs
    B, S, M, D = value.shape
    grad_out = torch.randn(B, loc.shape[1], M * D, generator=torch.Generator().manual_seed(100))

    def call(fn):
        dev = runtime.device()
        v, lo, a = (t.to(dev).requires_grad_(True) for t in (value, loc, attn))
        args = (v, shapes.to(dev), starts.to(dev), lo, a)
        out = fn.apply(*args, False) if launcher == "apply" else fn(*args)
        out.backward(grad_out.to(dev))
        return tuple(t.detach() for t in (out, v.grad, lo.grad, a.grad))

    def expected():
        return (spec.msda(value, shapes, loc, attn),
                *spec.msda_grads(value, shapes, loc, attn, grad_out))

    return Case(f"{describe(inputs)}, forward and backward", {"value": value, "grad_out": grad_out},
                call, expected, names=("out", "grad_value", "grad_loc", "grad_attn"),
                backward=(False, True, True, True),
                spec_name="msda_labs.student.spec.msda and autograd through it")


def _what_happened(fn, args, argument: str) -> str:
    """What ``fn(*args)`` did: "accepted", "ValueError naming <argument>", or the error."""
    try:
        fn(*args)
    except NotImplementedError:
        raise
    except ValueError as exc:
        if argument and argument in str(exc):
            return f"ValueError naming {argument}"
        return f"ValueError: {exc}"
    except Exception as exc:  # noqa: BLE001 - any other error is what the report shows
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


def _validate(_ns=None) -> Case:
    value, shapes, starts, loc, attn = small_inputs()
    dev = runtime.device()
    good = tuple(t.to(dev) for t in (value, shapes, starts, loc, attn))
    short_attn = (*good[:4], good[4][..., :1])
    half_loc = (*good[:3], good[3].half(), good[4])
    probes = {"good inputs": (good, "", "accepted"),
              "attention_weights (B, Q, M, L, 1)": (short_attn, "attention_weights",
                                                    "ValueError naming attention_weights"),
              "float16 sampling_locations": (half_loc, "sampling_locations",
                                             "ValueError naming sampling_locations")}

    def call(fn):
        return tuple(_what_happened(fn, args, arg) for args, arg, _ in probes.values())

    return Case("good inputs, a short attention_weights, float16 locations", {}, call,
                lambda: tuple(want for _, _, want in probes.values()), names=tuple(probes),
                spec_name="the rules of validate_inputs' docstring")


STEPS = {
    9: lambda: [Step("9.1", "find_atomics", _find_atomics),
                Step("9.2", "classify_atomics", _classify),
                Step("9.3", "use_fp32_grad_accum", _switch),
                Step("9.4", "backward_signature", _signature),
                Step("9.5", "compile_backward", _compile)],
    10: lambda: [Step("10.1", "MSDAFunction", lambda _ns=None: _operator_case("apply")),
                 Step("10.2", "validate_inputs", _validate),
                 Step("10.3", "msda", lambda _ns=None: _operator_case("call"))],
}
