"""Issue 10, session 18: the direct launch path and the decoder's forward tile (H200).

    PYTHONPATH=shared:.peer python scripts/issue10_launch_probe.py OUT_DIR [--parts ...]

Needs, importable: ``msda_triton`` (the public peer) and ``kitbefore`` (the kit's operator as it
was before this session, a private copy; neither is committed).

* guard: the installed triton, whether ``shipped_launch.supported()`` holds, and the launch
  line of its ``JITFunction.run``;
* same: the kit's forward through the direct launcher equals the old path bit for bit, and its
  backward's grad_loc / grad_attn do too (grad_value: atomics, compared with a tolerance);
* host: wall time per call (300 calls, one sync; rounds alternate between the operators,
  median of 7) of the decoder step, the forward without grad and the backward, for the kit,
  ``kitbefore`` and the peer; plus do_bench medians of the step, alternating, 7 rounds;
* tiles: forward kernel time (torch.profiler sum over 50 calls, 3 alternating rounds, median)
  over (BLOCK_Q, num_warps) at both presets in the three dtypes, the peer's forward alongside.

Results: OUT_DIR/launch-probe.json; the same lines are printed.
"""

# ruff: noqa: B023 - every closure below is called at once, inside its own loop iteration

from __future__ import annotations

import inspect
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from msda_labs.gpu import opbench

OUT = Path(sys.argv[1])
OUT.mkdir(parents=True, exist_ok=True)
PARTS = sys.argv[sys.argv.index("--parts") + 1].split(",") if "--parts" in sys.argv else [
    "guard", "same", "host", "tiles"]
RESULT: dict = {}
TILES = ((2, 1), (4, 1), (4, 2), (8, 1), (8, 2), (8, 4), (16, 2), (16, 4), (32, 4))


def save():
    (OUT / "launch-probe.json").write_text(json.dumps(RESULT, indent=1))


def wall_us(fn, calls=300):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def guard_part():
    import triton
    from triton.runtime.jit import JITFunction

    from msda_labs.student import shipped_launch

    lines = [ln.strip() for ln in inspect.getsource(JITFunction.run).splitlines()
             if "kernel.run(" in ln or "launch_metadata =" in ln or "launch_exit_hook" in ln]
    RESULT["guard"] = {"triton": triton.__version__, "supported": shipped_launch.supported(),
                       "run_lines": lines}
    print(RESULT["guard"], flush=True)


def _ops():
    import kitbefore

    from msda_labs.chips import lab10

    peer = opbench.load_peer("msda_triton:multi_scale_deformable_attention").fn
    return {"kit": lab10.msda, "kitbefore": kitbefore.msda, "peer": peer}


def same_part():
    ops = _ops()
    res = {}
    for dtype_name in ("fp32", "fp16", "bf16"):
        dtype = opbench._torch_dtype(dtype_name)
        for preset in ("decoder", "encoder"):
            value, shapes, starts, loc, attn = opbench.make_preset_inputs(preset, dtype, "cuda")
            leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
            go = torch.randn(value.shape[0], loc.shape[1], 256, device="cuda", dtype=dtype)
            outs = {}
            for name in ("kit", "kitbefore"):
                for _ in range(2):  # the second call takes the direct path
                    out = ops[name](leaves[0], shapes, starts, leaves[1], leaves[2])
                    grads = torch.autograd.grad(out, leaves, go)
                outs[name] = (out, *grads)
            a, b = outs["kit"], outs["kitbefore"]
            res[f"{preset}/{dtype_name}"] = {
                "out_equal": bool(torch.equal(a[0], b[0])),
                "grad_loc_equal": bool(torch.equal(a[2], b[2])),
                "grad_attn_equal": bool(torch.equal(a[3], b[3])),
                "grad_value_rel": float((a[1].float() - b[1].float()).norm()
                                        / b[1].float().norm()),
            }
    RESULT["same"] = res
    print(json.dumps(res, indent=1), flush=True)
    save()


def host_part():
    from triton.testing import do_bench

    ops = _ops()
    for dtype_name in ("fp32", "fp16", "bf16"):
        dtype = opbench._torch_dtype(dtype_name)
        value, shapes, starts, loc, attn = opbench.make_preset_inputs("decoder", dtype, "cuda")
        leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
        v, lo, at = leaves
        go = torch.randn(4, 300, 256, device="cuda", dtype=dtype)
        fns = {}
        for name, fn in ops.items():
            def step(fn=fn):
                o = fn(v, shapes, starts, lo, at)
                torch.autograd.grad(o, leaves, go)

            def fwd_nograd(fn=fn):
                with torch.no_grad():
                    fn(v, shapes, starts, lo, at)

            kept = fn(v, shapes, starts, lo, at)

            def bwd(kept=kept):
                torch.autograd.grad(kept, leaves, go, retain_graph=True)

            fns[name] = {"step": step, "fwd_nograd": fwd_nograd, "bwd": bwd}
            for f in fns[name].values():
                for _ in range(20):
                    f()
        opbench._keep_busy()
        samples = {n: {k: [] for k in ("step", "fwd_nograd", "bwd", "step_do_bench")}
                   for n in fns}
        for _ in range(7):
            for name, parts in fns.items():
                for part, f in parts.items():
                    samples[name][part].append(wall_us(f))
                samples[name]["step_do_bench"].append(
                    do_bench(parts["step"], warmup=5, rep=40, return_mode="median") * 1e3)
        res = {n: {k: {"median": statistics.median(x), "samples": x} for k, x in d.items()}
               for n, d in samples.items()}
        RESULT[f"host_{dtype_name}"] = res
        print(dtype_name, {n: {k: round(x["median"], 1) for k, x in d.items()}
                           for n, d in res.items()}, flush=True)
        save()


def tiles_part():
    from msda_labs.student import shipped

    peer = opbench.load_peer("msda_triton:multi_scale_deformable_attention").fn
    res = {}
    for preset in ("decoder", "encoder"):
        for dtype_name in ("fp32", "fp16", "bf16"):
            dtype = opbench._torch_dtype(dtype_name)
            value, shapes, starts, loc, attn = opbench.make_preset_inputs(preset, dtype, "cuda")
            fns = {f"{bq}x{w}": (lambda bq=bq, w=w: shipped.msda_forward(
                value, shapes, starts, loc, attn, config={"BLOCK_Q": bq, "num_warps": w}))
                for bq, w in TILES}
            fns["peer"] = lambda: peer(value, shapes, starts, loc, attn)
            for f in fns.values():
                for _ in range(3):
                    f()
            times = {name: [] for name in fns}
            for _ in range(3):
                for name, f in fns.items():
                    times[name].append(opbench.kernel_time_us(f, calls=50))
            row = {name: statistics.median(t) for name, t in times.items()}
            res[f"{preset}/{dtype_name}"] = row
            best = min((t, n) for n, t in row.items() if n != "peer")
            print(preset, dtype_name, {n: round(t, 2) for n, t in row.items()}, "best", best,
                  flush=True)
            save()
    RESULT["tiles"] = res
    save()


if __name__ == "__main__":
    from msda_labs.student import runtime

    runtime.configure("gpu")
    for part in PARTS:
        {"guard": guard_part, "same": same_part, "host": host_part, "tiles": tiles_part}[part]()
    save()
