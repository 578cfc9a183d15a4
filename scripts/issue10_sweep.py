"""Issue 10 sweep (H200): correctness, then kernel time of every forward/backward variant.

    PYTHONPATH=shared:.peer python scripts/issue10_sweep.py OUT_DIR

Prints a short table last; writes sweep.json under OUT_DIR. Kernel time: summed CUDA kernel time
under torch.profiler over 20 calls after warm-up (as in msda_labs.gpu.opbench).
"""

import json
import re
import sys
import time
from collections import Counter

import torch

from msda_labs.student import runtime

runtime.configure("gpu")
from msda_labs.chips import lab06, lab08  # noqa: E402
from msda_labs.gpu.opbench import _reference_fp32, kernel_time_us, make_preset_inputs  # noqa: E402
from msda_labs.student import shipped  # noqa: E402

try:
    import msda_triton
    from msda_triton import kernels as peer_kernels
except ImportError:
    msda_triton = None

out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
TOL = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2}
results = {"rows": [], "ptx": {}}
t0 = time.time()


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


def sweep_case(preset, dn, dt):
    value, shapes, starts, loc, attn = make_preset_inputs(preset, dt, "cuda")
    B, Q = loc.shape[0], loc.shape[1]
    go = torch.randn(B, Q, 256, device="cuda").to(dt)
    ref_out, ref_g = _reference_fp32(value, shapes.cpu(), loc, attn, go)
    row = {"preset": preset, "dtype": dn, "fwd": {}, "bwd": {}, "err": {}}
    fwd = {}
    if msda_triton is not None:
        peer_leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
        def peer_fwd():
            with torch.no_grad():
                return msda_triton.multi_scale_deformable_attention(value, shapes, starts,
                                                                    loc, attn)
        fwd["upstream"] = peer_fwd
        kept = msda_triton.multi_scale_deformable_attention(peer_leaves[0], shapes, starts,
                                                            peer_leaves[1], peer_leaves[2])
        def peer_bwd(kept=kept, leaves=peer_leaves):
            torch.autograd.grad(kept, leaves, go, retain_graph=True)
        row["bwd"]["upstream"] = peer_bwd
    fwd["lab06_autotuned"] = lambda: lab06.msda_forward_autotuned(value, shapes, starts, loc,
                                                                  attn)
    for cfg in shipped.forward_configs(32):
        c = dict(cfg.kwargs, num_warps=cfg.num_warps)
        name = f"rows_q{c['BLOCK_Q']}_d{c['CHUNK_D']}_w{c['num_warps']}"
        fwd[name] = (lambda c=c: shipped.msda_forward(value, shapes, starts, loc, attn,
                                                      config=c))
    fwd["rows_autotuned"] = lambda: shipped.msda_forward(value, shapes, starts, loc, attn)
    for name, fn in fwd.items():
        try:
            out = fn()
            row["err"]["fwd:" + name] = rel(out, ref_out)
            for _ in range(3):
                fn()
            row["fwd"][name] = kernel_time_us(fn)
        except Exception as exc:  # noqa: BLE001
            row["fwd"][name] = f"ERR {type(exc).__name__}: {str(exc)[:300]}"
    bwd = dict(row["bwd"])
    row["bwd"] = {}
    flag = False
    bwd["lab08"] = lambda: lab08.msda_backward(value, shapes, starts, loc, attn, go,
                                               fp32_grad_accum=flag)
    for bq, nw in ((2, 2), (2, 4), (4, 2), (4, 4), (8, 4), (8, 8), (16, 8), (4, 8)):
        for red_name, red in (("port", 0), ("vec", None)):
            name = f"rows_q{bq}_w{nw}_{red_name}"
            bwd[name] = (lambda bq=bq, nw=nw, red=red: shipped.msda_backward(
                value, shapes, starts, loc, attn, go, fp32_grad_accum=flag, BLOCK_Q=bq,
                num_warps=nw, red=red))
    for name, fn in bwd.items():
        try:
            res = fn()
            if res is not None:
                errs = [rel(g, r) for g, r in zip(res, ref_g)]
                row["err"]["bwd:" + name] = max(errs)
            for _ in range(3):
                fn()
            row["bwd"][name] = kernel_time_us(fn)
        except Exception as exc:  # noqa: BLE001
            row["bwd"][name] = f"ERR {type(exc).__name__}: {str(exc)[:300]}"
    results["rows"].append(row)
    print(f"{preset} {dn} done at {time.time() - t0:.0f}s", flush=True)
    if preset == "decoder":
        # What Triton on this machine makes of the portable atomics (and the vector ones).
        for red in (0, shipped.reduction_kind(dt, 32, value.device)):
            ck = shipped.msda_backward_rows_kernel[(1, 1)](
                value, shapes, starts, loc, attn, go, torch.zeros_like(value),
                torch.empty_like(loc), torch.empty_like(attn), Q, value.shape[1], M=8, D=32,
                L=4, K=4, LK=16, IDX64=False, BLOCK_Q=4, BLOCK_D=32, RED=red, num_warps=4)
            ptx = ck.asm["ptx"]
            results["ptx"][f"{dn}_red{red}"] = dict(Counter(
                re.findall(r"\b(?:atom|red)\.[\w.:]+", ptx)))
        if msda_triton is not None:
            ck = peer_kernels._msda_backward_kernel[(1, 1)](
                value, shapes, starts, loc, attn, go, torch.zeros_like(value),
                torch.empty_like(loc), torch.empty_like(attn), Q, value.shape[1], M=8, D=32,
                L=4, K=4, BLOCK_Q=16, BLOCK_D=32, num_warps=4)
            results["ptx"][f"{dn}_upstream"] = dict(Counter(
                re.findall(r"\b(?:atom|red)\.[\w.:]+", ck.asm["ptx"])))



for preset in ("decoder", "encoder"):
    for dn, dt in DT.items():
        sweep_case(preset, dn, dt)

json.dump(results, open(f"{out_dir}/sweep.json", "w"), indent=1)
print("PTX atomics:", json.dumps(results["ptx"]))
for row in results["rows"]:
    bad = {k: round(v, 5) for k, v in row["err"].items() if v > TOL[row["dtype"]]}
    f = {k: v for k, v in row["fwd"].items() if isinstance(v, float)}
    b = {k: v for k, v in row["bwd"].items() if isinstance(v, float)}
    errs = [k for k, v in list(row["fwd"].items()) + list(row["bwd"].items())
            if isinstance(v, str)]
    fb = sorted(f.items(), key=lambda kv: kv[1])[:3]
    bb = sorted(b.items(), key=lambda kv: kv[1])[:4]
    print(f"{row['preset']} {row['dtype']}: fwd up {f.get('upstream', 0):.1f} lab06 "
          f"{f.get('lab06_autotuned', 0):.1f} rows_auto {f.get('rows_autotuned', 0):.1f} best "
          + ", ".join(f"{k}={v:.1f}" for k, v in fb))
    print(f"   bwd up {b.get('upstream', 0):.1f} lab08 {b.get('lab08', 0):.1f} best "
          + ", ".join(f"{k}={v:.1f}" for k, v in bb))
    if bad:
        print("   BAD ERR", bad)
    if errs:
        print("   ERRORS", errs, [row['fwd'].get(k) or row['bwd'].get(k) for k in errs][:2])
print(f"total {time.time() - t0:.0f}s")
