"""Issue 10, second sweep (H200): tiled forward and point-row backward, launch order and tiles.

    PYTHONPATH=shared:.peer python scripts/issue10_sweep2.py OUT_DIR

Compiles every variant first in parallel worker processes (filling Triton's on-disk cache), then
checks and times them in this process, one at a time: summed CUDA kernel time under
torch.profiler over 20 calls after warm-up.
"""

import json
import os
import subprocess
import sys
import time

import torch

from msda_labs.student import runtime

runtime.configure("gpu")

from msda_labs.chips import lab06  # noqa: E402
from msda_labs.gpu.opbench import _reference_fp32, kernel_time_us, make_preset_inputs  # noqa: E402
from msda_labs.student import shipped  # noqa: E402

try:
    import msda_triton
except ImportError:
    msda_triton = None

DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
WORKERS = 12


def variants(value, shapes, starts, loc, attn, go):
    out = {}
    if msda_triton is not None:
        def up_fwd():
            with torch.no_grad():
                return msda_triton.multi_scale_deformable_attention(value, shapes, starts, loc,
                                                                    attn)
        out["fwd:upstream"] = up_fwd
        leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
        kept = msda_triton.multi_scale_deformable_attention(leaves[0], shapes, starts, leaves[1],
                                                            leaves[2])

        def up_bwd():
            torch.autograd.grad(kept, leaves, go, retain_graph=True)
        out["bwd:upstream"] = up_bwd
    out["fwd:lab06"] = lambda: lab06.msda_forward_autotuned(value, shapes, starts, loc, attn)
    for order in (0, 1):
        for bq, nw in ((16, 2), (32, 2), (32, 4), (64, 4), (64, 8), (128, 8)):
            cfg = {"BLOCK_Q": bq, "num_warps": nw, "ORDER": order}
            out[f"fwd:tiles_q{bq}_w{nw}_o{order}"] = (
                lambda cfg=cfg: shipped.msda_forward(value, shapes, starts, loc, attn, config=cfg))
        for bq, nw in ((1, 2), (2, 2), (2, 4), (4, 4)):
            out[f"bwd:rows_q{bq}_w{nw}_o{order}"] = (
                lambda bq=bq, nw=nw, order=order: shipped.msda_backward(
                    value, shapes, starts, loc, attn, go, BLOCK_Q=bq, num_warps=nw, order=order))
    return out


def inputs(preset, dt):
    value, shapes, starts, loc, attn = make_preset_inputs(preset, dt, "cuda")
    go = torch.randn(loc.shape[0], loc.shape[1], 256, device="cuda").to(dt)
    return value, shapes, starts, loc, attn, go


def warm(index):
    for dt in DT.values():
        names = sorted(variants(*inputs("decoder", dt)))
        fns = variants(*inputs("decoder", dt))
        for i, name in enumerate(names):
            if i % WORKERS == index:
                fns[name]()
    torch.cuda.synchronize()


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


def main(out_dir):
    t0 = time.time()
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, __file__, "--warm", str(i)], env=env)
             for i in range(WORKERS)]
    codes = [p.wait() for p in procs]
    print(f"warm-up compiles done in {time.time() - t0:.0f}s (exit codes {codes})", flush=True)
    rows = []
    for preset in ("decoder", "encoder"):
        for dn, dt in DT.items():
            value, shapes, starts, loc, attn, go = inputs(preset, dt)
            ref_out, ref_g = _reference_fp32(value, shapes.cpu(), loc, attn, go)
            row = {"preset": preset, "dtype": dn, "us": {}, "err": {}}
            for name, fn in variants(value, shapes, starts, loc, attn, go).items():
                try:
                    res = fn()
                    if isinstance(res, torch.Tensor):
                        row["err"][name] = rel(res, ref_out)
                    elif isinstance(res, tuple):
                        row["err"][name] = max(rel(g, r) for g, r in zip(res, ref_g))
                    for _ in range(3):
                        fn()
                    row["us"][name] = kernel_time_us(fn)
                except Exception as exc:  # noqa: BLE001
                    row["us"][name] = f"ERR {type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
            print(f"{preset} {dn} timed at {time.time() - t0:.0f}s", flush=True)
    json.dump(rows, open(f"{out_dir}/sweep2.json", "w"), indent=1)
    for row in rows:
        us = {k: v for k, v in row["us"].items() if isinstance(v, float)}
        for kind in ("fwd", "bwd"):
            ranked = sorted((v, k) for k, v in us.items() if k.startswith(kind))
            up = us.get(f"{kind}:upstream", float("nan"))
            print(f"{row['preset']} {row['dtype']} {kind} upstream {up:.1f}: " + " ".join(
                f"{k[4:]}={v:.1f}" for v, k in ranked[:6]))
        errs = {k: v for k, v in row["us"].items() if isinstance(v, str)}
        bad = {k: round(v, 4) for k, v in row["err"].items() if v > 1e-2}
        if errs or bad:
            print("   PROBLEMS", list(errs.items())[:2], bad)
    print(f"total {time.time() - t0:.0f}s")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--warm":
        warm(int(sys.argv[2]))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else ".")
