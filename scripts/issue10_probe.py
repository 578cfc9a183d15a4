"""Issue 10, session D: where the decoder step's host time goes, and kernel variants (H200).

    PYTHONPATH=shared:../.peer python scripts/issue10_probe.py OUT_DIR [--parts host,small]

* host: wall time per call of host-bound loops (many calls, one sync at the end) for the kit
  and the peer at the decoder preset, pieces of the kit's path alone, and a cProfile of the
  kit's training step.
* small: forward kernel time (torch.profiler sum, 20 calls) over small (BLOCK_Q, warps) tiles
  and backward kernel time with one or two warps, in both launch orders, at both presets.

Results go to OUT_DIR/probe.json (and cprofile-*.txt); the same lines are printed.

The first device call of session D also ran two parts that are gone: forward switches PAIR
(the (x, y) pair as one load or two) and CG_LEVELS (the large levels' gathers bypassing L1),
and private copies of the coarse levels' grad_value rows in the backward. None helped (raw
numbers: docs/results/h200-bench/probe-D1.json), so the kernels no longer have them.
"""

# ruff: noqa: B023 - every closure below is called at once, inside its own loop iteration

from __future__ import annotations

import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

import torch

from msda_labs.gpu import opbench

OUT = Path(sys.argv[1])
OUT.mkdir(parents=True, exist_ok=True)
PARTS = sys.argv[sys.argv.index("--parts") + 1].split(",") if "--parts" in sys.argv else [
    "host", "small"]
RESULT: dict = {}


def save():
    (OUT / "probe.json").write_text(json.dumps(RESULT, indent=1))


def wall_us(fn, calls=300, rounds=3):
    """Median over rounds of (wall time of `calls` calls + one sync) / calls, in µs."""
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return sorted(times)[len(times) // 2]


def host_part():
    from triton.testing import do_bench

    from msda_labs.chips import lab10
    from msda_labs.student import shipped

    peer = opbench.load_peer("msda_triton:multi_scale_deformable_attention").fn
    for dtype_name in ("fp32", "fp16"):
        dtype = opbench._torch_dtype(dtype_name)
        value, shapes, starts, loc, attn = opbench.make_preset_inputs("decoder", dtype, "cuda")
        leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
        v, lo, at = leaves
        go = torch.randn(4, 300, 256, device="cuda", dtype=dtype)
        res = {}
        for name, fn in (("kit", lab10.msda), ("peer", peer)):
            def step(fn=fn):
                o = fn(v, shapes, starts, lo, at)
                torch.autograd.grad(o, leaves, go)

            def fwd_nograd(fn=fn):
                with torch.no_grad():
                    fn(v, shapes, starts, lo, at)

            def fwd_grad(fn=fn):
                fn(v, shapes, starts, lo, at)

            kept = fn(v, shapes, starts, lo, at)

            def bwd(kept=kept):
                torch.autograd.grad(kept, leaves, go, retain_graph=True)

            for f in (step, fwd_nograd, fwd_grad, bwd):
                for _ in range(10):
                    f()
            res[name] = {"step": wall_us(step), "fwd_nograd": wall_us(fwd_nograd),
                         "fwd_grad": wall_us(fwd_grad), "bwd": wall_us(bwd),
                         "step_do_bench": [do_bench(step, warmup=5, rep=40,
                                                    return_mode="median") * 1e3
                                           for _ in range(3)]}
        vd, lod, atd = value, loc, attn
        pieces = {
            "validate_inputs": lambda: lab10.validate_inputs(vd, shapes, starts, lod, atd),
            "shipped.msda_forward": lambda: shipped.msda_forward(vd, shapes, starts, lod, atd),
            "forward_fixed_config": lambda: shipped.msda_forward(
                vd, shapes, starts, lod, atd, config={"BLOCK_Q": 16, "num_warps": 2}),
            "shipped.msda_backward": lambda: shipped.msda_backward(
                vd, shapes, starts, lod, atd, go),
            "prepare": lambda: shipped._prepare(vd, shapes, starts, lod, atd),
            "torch.empty": lambda: torch.empty(4, 300, 8, 32, dtype=dtype, device="cuda"),
            "torch.zeros_grad_value": lambda: torch.zeros(4 * 22223 * 256, dtype=dtype,
                                                          device="cuda"),
            "capability": lambda: torch.cuda.get_device_capability(vd.device),
        }
        for f in pieces.values():
            f()
        res["pieces"] = {k: wall_us(f, calls=500) for k, f in pieces.items()}
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            o = lab10.msda(v, shapes, starts, lo, at)
            torch.autograd.grad(o, leaves, go)
        torch.cuda.synchronize()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
        (OUT / f"cprofile-{dtype_name}.txt").write_text(text.getvalue())
        RESULT[f"host_{dtype_name}"] = res
        print(dtype_name, json.dumps(res, indent=1), flush=True)
        save()


def small_tiles_part():
    """Smaller forward tiles and one-warp backward launches (second probe)."""
    from msda_labs.student import shipped

    fwd = ((2, 1), (4, 1), (8, 1), (4, 2), (8, 2), (16, 1), (16, 2))
    bwd = ((1, 1, 0), (1, 1, 1), (1, 2, 0), (1, 2, 1))
    for dtype_name in ("fp32", "fp16", "bf16"):
        dtype = opbench._torch_dtype(dtype_name)
        for preset in ("encoder", "decoder"):
            value, shapes, starts, loc, attn = opbench.make_preset_inputs(preset, dtype, "cuda")
            B, Q = value.shape[0], loc.shape[1]
            go = torch.randn(B, Q, 256, device="cuda", dtype=dtype)
            row = {}
            ref = shipped.msda_forward(value, shapes, starts, loc, attn,
                                       config={"BLOCK_Q": 16, "num_warps": 2})
            for bq, w in fwd:
                cfg = {"BLOCK_Q": bq, "num_warps": w}
                out = shipped.msda_forward(value, shapes, starts, loc, attn, config=cfg)
                err = float((out.float() - ref.float()).abs().max())
                row[f"fwd_q{bq}_w{w}"] = opbench.kernel_time_us(
                    lambda cfg=cfg: shipped.msda_forward(value, shapes, starts, loc, attn,
                                                         config=cfg)) if err < 1e-3 else err
            base = shipped.msda_backward(value, shapes, starts, loc, attn, go)
            for bq, w, order in bwd:
                grads = shipped.msda_backward(value, shapes, starts, loc, attn, go, BLOCK_Q=bq,
                                              num_warps=w, order=order)
                err = max(float((g.float() - r.float()).norm() / r.float().norm())
                          for g, r in zip(grads, base))
                row[f"bwd_q{bq}_w{w}_o{order}"] = opbench.kernel_time_us(
                    lambda bq=bq, w=w, order=order: shipped.msda_backward(
                        value, shapes, starts, loc, attn, go, BLOCK_Q=bq, num_warps=w,
                        order=order)) if err < 2e-2 else err
            print(preset, dtype_name, json.dumps(row), flush=True)
            RESULT[f"small_{preset}_{dtype_name}"] = row
            save()


if __name__ == "__main__":
    RESULT["device"] = torch.cuda.get_device_name()
    for part in PARTS:
        started = time.time()
        try:
            {"host": host_part, "small": small_tiles_part}[part]()
        except Exception as exc:  # noqa: BLE001 - keep the other parts
            import traceback

            traceback.print_exc()
            RESULT[f"{part}_error"] = repr(exc)
        RESULT[f"{part}_seconds"] = time.time() - started
        print(part, "took", RESULT[f"{part}_seconds"], flush=True)
        save()
