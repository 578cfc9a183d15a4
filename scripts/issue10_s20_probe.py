"""Issue 10, session 20: bulk tensor reductions for grad_value, eviction hints, and where the
decoder step's host time goes (H200 probe; needs a GPU of SM 9.0).

    PYTHONPATH=shared:.peer python scripts/issue10_s20_probe.py OUT [--parts check,tma,evict,host]
    TRITON_INTERPRET=1 PYTHONPATH=shared python scripts/issue10_s20_probe.py OUT --parts check

* check: the eviction-hint kernels against the fp64 reference (interpreter or GPU);
* tma: ``msda_backward_tma_kernel`` (issue10_s20_kernels.py) checked against the fp64
  reference on a small problem with locations partly outside the levels, then its kernel time
  against the shipped backward at both presets (torch.profiler sum over 50 calls, median of 3
  alternating rounds; the zero fill of grad_value included in both);
* evict: the shipped forward with L2 eviction hints, same method;
* host: the decoder fp32 training step of the kit (lab 10's ``msda``) and of the peer: the
  bench's do_bench step, the host time per step (enqueue only), and the kit's cProfile.

Results: OUT/s20-probe.json; the same lines are printed.
"""

# ruff: noqa: B023 - every closure below is called at once, inside its own loop iteration

from __future__ import annotations

import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
from issue10_s20_kernels import (
    msda_backward_evict_kernel,
    msda_backward_tma_kernel,
    msda_forward_evict_kernel,
    msda_forward_loop_kernel,
)
from triton.tools.tensor_descriptor import TensorDescriptor

from msda_labs.student import shipped

OUT = Path(sys.argv[1])
OUT.mkdir(parents=True, exist_ok=True)
PARTS = sys.argv[sys.argv.index("--parts") + 1].split(",") if "--parts" in sys.argv else [
    "tma", "evict", "host"]
DTYPES = (sys.argv[sys.argv.index("--dtypes") + 1].split(",") if "--dtypes" in sys.argv
          else ["fp32", "fp16", "bf16"])
RESULT: dict = {}


def save():
    (OUT / "s20-probe.json").write_text(json.dumps(RESULT, indent=1))


def backward_tma(value, shapes, starts, loc, attn, grad_out, warps=1, skip=False, order=0):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = loc.shape
    grad_value = torch.zeros(B, S, M, D, dtype=value.dtype, device=value.device)
    block_d = triton.next_power_of_2(D)
    desc = TensorDescriptor(grad_value.view(B * S, M, D), [B * S, M, D], [M * D, D, 1],
                            [2, 1, block_d])
    grad_loc = torch.empty_like(loc)
    grad_attn = torch.empty_like(attn)
    grid = (Q, B * M) if order == 0 else (M, Q, B)
    msda_backward_tma_kernel[grid](
        value, shapes, starts, loc, attn, grad_out.reshape(B, Q, M, D), desc, grad_loc,
        grad_attn, Q, S, M=M, D=D, L=L, K=K, LK=triton.next_power_of_2(L * K), ORDER=order,
        BLOCK_D=block_d, SKIP=skip, num_warps=warps)
    return grad_value, grad_loc, grad_attn


def forward_evict(value, shapes, starts, loc, attn, block_q=4, warps=1, stream="evict_first",
                  gather="evict_last"):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = loc.shape
    out = torch.empty(B, Q, M, D, dtype=value.dtype, device=value.device)
    msda_forward_evict_kernel[(triton.cdiv(Q, block_q), B * M)](
        value, shapes, starts, loc, attn, out, Q, S, M=M, D=D, L=L, K=K, BLOCK_Q=block_q,
        BLOCK_D=triton.next_power_of_2(D), STREAM=stream, GATHER=gather, num_warps=warps)
    return out.view(B, Q, M * D)


def backward_evict(value, shapes, starts, loc, attn, grad_out, stream="evict_first",
                   gather="evict_last", order=None):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = loc.shape
    grad_value = torch.zeros(B, S, M, D, dtype=value.dtype, device=value.device)
    grad_loc = torch.empty_like(loc)
    grad_attn = torch.empty_like(attn)
    order = (0 if value.dtype == torch.float32 else 1) if order is None else order
    grid = (Q, B * M) if order == 0 else (M, Q, B)
    msda_backward_evict_kernel[grid](
        value, shapes, starts, loc, attn, grad_out.reshape(B, Q, M, D), grad_value, grad_loc,
        grad_attn, Q, S, M=M, D=D, L=L, K=K, LK=triton.next_power_of_2(L * K), ORDER=order,
        BLOCK_Q=1, BLOCK_D=triton.next_power_of_2(D), STREAM=stream, GATHER=gather,
        num_warps=2)
    return grad_value, grad_loc, grad_attn


def check_part():
    """The eviction-hint kernels against the fp64 reference (interpreter or GPU)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for dtype in (torch.float32, torch.float16):
        if device == "cpu" and dtype != torch.float32:
            continue
        tol = 2e-5 if dtype == torch.float32 else 3e-2
        inputs = _small(dtype, device)
        ref_out, ref_grads = _reference(*inputs)
        err = _err(forward_evict(*inputs[:5]), ref_out)
        rows.append((str(dtype), "forward_evict", err, err < tol))
        err = _err(forward_loop(*inputs[:5]), ref_out)
        rows.append((str(dtype), "forward_loop", err, err < tol))
        err = max(_err(g, r) for g, r in zip(backward_evict(*inputs), ref_grads))
        rows.append((str(dtype), "backward_evict", err, err < tol))
    for row in rows:
        print(row, flush=True)
    RESULT["check"] = rows
    save()
    assert all(r[-1] for r in rows), "a variant is wrong"


def _reference(value, shapes, starts, loc, attn, grad_out):
    from msda_labs.truth.reference import msda_reference

    leaves = [t.detach().double().cpu().requires_grad_() for t in (value, loc, attn)]
    out = msda_reference(leaves[0], shapes.cpu(), leaves[1], leaves[2])
    grads = torch.autograd.grad(out, leaves, grad_out.double().cpu())
    return out.detach(), grads


def _err(got, ref):
    got = got.detach().double().cpu()
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-12))


def _small(dtype, device):
    gen = torch.Generator().manual_seed(3)
    levels = [(6, 9), (3, 5), (2, 3)]
    B, Q, M, D, K = 2, 13, 2, 32, 3
    S = sum(h * w for h, w in levels)
    value = torch.randn(B, S, M, D, generator=gen)
    loc = torch.rand(B, Q, M, len(levels), K, 2, generator=gen) * 1.4 - 0.2
    attn = torch.rand(B, Q, M, len(levels), K, generator=gen)
    shapes = torch.tensor(levels)
    sizes = shapes[:, 0] * shapes[:, 1]
    starts = torch.cumsum(sizes, 0) - sizes
    grad_out = torch.randn(B, Q, M * D, generator=gen)
    return [t.to(device) if t.dtype == torch.int64 else t.to(device, dtype)
            for t in (value, shapes, starts, loc, attn, grad_out)]


def _kernel_us(fn, calls=50):
    from msda_labs.gpu import opbench

    return opbench.kernel_time_us(fn, calls)


def _rounds(fns: dict, rounds=3):
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(_kernel_us(fn))
    return {name: statistics.median(v) for name, v in times.items()}


def _preset_cases(presets=("encoder", "decoder")):
    from msda_labs.gpu import opbench

    for preset in presets:
        for name in DTYPES:
            dtype = opbench._torch_dtype(name)
            yield preset, dtype, opbench.make_preset_inputs(preset, dtype, "cuda")


def _close(got, want, tol):
    return all(torch.allclose(g.float(), r.float(), atol=tol, rtol=tol)
               for g, r in zip(got, want))


def tma_part():
    rows = []
    variants = {f"tma-w{w}-s{int(s)}": dict(warps=w, skip=s)
                for w in (1, 2) for s in (False, True)}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        tol = 2e-5 if dtype == torch.float32 else 3e-2
        inputs = _small(dtype, "cuda")
        _, ref_grads = _reference(*inputs)
        for name, kw in variants.items():
            try:
                got = backward_tma(*inputs, **kw)
            except Exception as exc:  # noqa: BLE001 - a variant that does not compile is reported
                rows.append((str(dtype), name, f"{type(exc).__name__}: {str(exc)[:300]}", False))
                print(rows[-1], flush=True)
                continue
            torch.cuda.synchronize()
            err = max(_err(g, r) for g, r in zip(got, ref_grads))
            rows.append((str(dtype), name, err, err < tol))
            print(rows[-1], flush=True)
    RESULT["tma_check"] = rows
    save()
    good = {r[1] for r in rows if r[-1] is True}
    res = []
    for preset, dtype, (value, shapes, starts, loc, attn) in _preset_cases():
        gen = torch.Generator(device="cuda").manual_seed(1)
        B, Q = loc.shape[0], loc.shape[1]
        grad_out = torch.randn(B, Q, value.shape[2] * value.shape[3], device="cuda",
                               generator=gen).to(value.dtype)
        want = shipped.msda_backward(value, shapes, starts, loc, attn, grad_out)
        fns = {"shipped": lambda: shipped.msda_backward(value, shapes, starts, loc, attn,
                                                         grad_out)}
        tol = 1e-3 if value.dtype == torch.float32 else 5e-2
        for name, kw in variants.items():
            if name not in good:
                continue
            got = backward_tma(value, shapes, starts, loc, attn, grad_out, **kw)
            if not _close(got, want, tol):
                print("MISMATCH", preset, dtype, name, flush=True)
                continue
            fns[name] = lambda kw=kw: backward_tma(value, shapes, starts, loc, attn, grad_out,
                                                   **kw)
        times = _rounds(fns)
        res.append({"preset": preset, "dtype": str(dtype), "times": times})
        print(preset, dtype, sorted((round(v, 1), k) for k, v in times.items())[:6], flush=True)
        RESULT["tma"] = res
        save()


def evict_part():
    res = []
    variants = {}
    for stream, gather in (("evict_first", "evict_last"), ("evict_first", ""),
                           ("", "evict_last")):
        for bq, nw in ((4, 1), (8, 2), (16, 2)):
            variants[f"ev-{stream[6:] or 'n'}-{gather[6:] or 'n'}-q{bq}-w{nw}"] = dict(
                block_q=bq, warps=nw, stream=stream, gather=gather)
    for preset, dtype, (value, shapes, starts, loc, attn) in _preset_cases():
        want = shipped.msda_forward(value, shapes, starts, loc, attn)
        fns = {"shipped": lambda: shipped.msda_forward(value, shapes, starts, loc, attn)}
        for name, kw in variants.items():
            got = forward_evict(value, shapes, starts, loc, attn, **kw)
            if not _close([got], [want], 1e-2):
                print("MISMATCH", preset, dtype, name, flush=True)
                continue
            fns[name] = lambda kw=kw: forward_evict(value, shapes, starts, loc, attn, **kw)
        gen = torch.Generator(device="cuda").manual_seed(1)
        grad_out = torch.randn(want.shape, device="cuda", generator=gen).to(value.dtype)
        bwant = shipped.msda_backward(value, shapes, starts, loc, attn, grad_out)
        fns["bshipped"] = lambda: shipped.msda_backward(value, shapes, starts, loc, attn,
                                                        grad_out)
        tol = 1e-3 if value.dtype == torch.float32 else 5e-2
        for stream, gather in (("evict_first", "evict_last"), ("evict_first", ""),
                               ("", "evict_last")):
            name = f"bev-{stream[6:] or 'n'}-{gather[6:] or 'n'}"
            kw = dict(stream=stream, gather=gather)
            got = backward_evict(value, shapes, starts, loc, attn, grad_out, **kw)
            if not _close(got, bwant, tol):
                print("MISMATCH", preset, dtype, name, flush=True)
                continue
            fns[name] = lambda kw=kw: backward_evict(value, shapes, starts, loc, attn,
                                                     grad_out, **kw)
        times = _rounds(fns)
        res.append({"preset": preset, "dtype": str(dtype), "times": times})
        print(preset, dtype, "fwd", sorted((round(v, 1), k) for k, v in times.items()
                                           if not k.startswith("b"))[:5], flush=True)
        print(preset, dtype, "bwd", sorted((round(v, 1), k) for k, v in times.items()
                                           if k.startswith("b")), flush=True)
        RESULT["evict"] = res
        save()


def host_part():
    """Decoder fp32 training step on the host: the kit, the kit with session 19's host integer
    helpers (``kit_before``: triton.cdiv / triton.next_power_of_2), and the peer."""
    from triton.testing import do_bench

    from msda_labs.chips import lab10
    from msda_labs.gpu import opbench

    peer = opbench.load_peer("msda_triton:multi_scale_deformable_attention").fn
    value, shapes, starts, loc, attn = opbench.make_preset_inputs("decoder", torch.float32,
                                                                  "cuda")
    leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
    grad_out = torch.randn(4, 300, 256, device="cuda")
    new_pow2, new_grid = shipped._pow2, shipped._grid

    def old_grid(order, Q, block_q, B, M):
        if order == 0:
            return (triton.cdiv(Q, block_q), B * M)
        return (M, triton.cdiv(Q, block_q), B)

    def kit_before(*args):
        shipped._pow2, shipped._grid = triton.next_power_of_2, old_grid
        try:
            return lab10.msda(*args)
        finally:
            shipped._pow2, shipped._grid = new_pow2, new_grid

    ops = {"kit": lab10.msda, "kit_before": kit_before, "peer": peer}
    steps, fwds = {}, {}
    for name, fn in ops.items():
        def step(fn=fn):
            out = fn(leaves[0], shapes, starts, leaves[1], leaves[2])
            torch.autograd.grad(out, leaves, grad_out)

        def fwd(fn=fn):
            return fn(leaves[0], shapes, starts, leaves[1], leaves[2])

        for _ in range(5):
            step()
        steps[name], fwds[name] = step, fwd
    torch.cuda.synchronize()
    res: dict = {"do_bench": {n: [] for n in ops}, "host_step": {n: [] for n in ops},
                 "host_fwd": {n: [] for n in ops}}
    for _ in range(7):
        for name in ops:
            res["do_bench"][name].append(do_bench(steps[name], warmup=5, rep=40,
                                                  return_mode="median") * 1e3)
            res["host_step"][name].append(_host_us(steps[name]))
            res["host_fwd"][name].append(_host_us(fwds[name]))
    summary = {k: {n: round(statistics.median(v), 1) for n, v in d.items()}
               for k, d in res.items()}
    paired = {k: {n: round(statistics.median(a / b for a, b in zip(d["peer"], d[n])), 3)
                  for n in ("kit", "kit_before")} for k, d in res.items()}
    print("host medians", summary, flush=True)
    print("host peer/kit per round, median", paired, flush=True)
    RESULT["host"] = {"samples": res, "median": summary, "paired_peer_over": paired}
    save()


def forward_loop(value, shapes, starts, loc, attn, block_q=4, warps=1):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = loc.shape
    out = torch.empty(B, Q, M, D, dtype=value.dtype, device=value.device)
    msda_forward_loop_kernel[(triton.cdiv(Q, block_q), B * M)](
        value, shapes, starts, loc, attn, out, Q, S, M=M, D=D, L=L, K=K, BLOCK_Q=block_q,
        BLOCK_D=triton.next_power_of_2(D), STREAM="", GATHER="", num_warps=warps)
    return out.view(B, Q, M * D)


def forward_nreg(value, shapes, starts, loc, attn, block_q=4, warps=1, maxnreg=None):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = loc.shape
    out = torch.empty(B, Q, M, D, dtype=value.dtype, device=value.device)
    extra = {} if maxnreg is None else {"maxnreg": maxnreg}
    shipped.msda_forward_tiles_kernel[(triton.cdiv(Q, block_q), B * M)](
        value, shapes, starts, loc, attn, out, Q, S, triton.next_power_of_2(Q), M=M, D=D, L=L,
        K=K, IDX64=False, ORDER=0, BLOCK_Q=block_q, BLOCK_D=triton.next_power_of_2(D),
        num_warps=warps, **extra)
    return out.view(B, Q, M * D)


def backward_nreg(value, shapes, starts, loc, attn, grad_out, warps=2, maxnreg=None,
                  block_q=1):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = loc.shape
    grad_value = torch.zeros(B, S, M, D, dtype=value.dtype, device=value.device)
    grad_loc = torch.empty_like(loc)
    grad_attn = torch.empty_like(attn)
    order = 0 if value.dtype == torch.float32 else 1
    extra = {} if maxnreg is None else {"maxnreg": maxnreg}
    shipped.msda_backward_rows_kernel[shipped._grid(order, Q, block_q, B, M)](
        value, shapes, starts, loc, attn, grad_out.reshape(B, Q, M, D), grad_value, grad_loc,
        grad_attn, Q, S, M=M, D=D, L=L, K=K, LK=triton.next_power_of_2(L * K), IDX64=False,
        ORDER=order, BLOCK_Q=block_q, BLOCK_D=triton.next_power_of_2(D), num_warps=warps,
        **extra)
    return grad_value, grad_loc, grad_attn


def nreg_part():
    """The shipped kernels with their register count capped (more warps resident per SM)."""
    res = []
    for preset, dtype, (value, shapes, starts, loc, attn) in _preset_cases():
        want = shipped.msda_forward(value, shapes, starts, loc, attn)
        fns = {"shipped": lambda: shipped.msda_forward(value, shapes, starts, loc, attn)}
        tiles = ((4, 1), (8, 2), (16, 4)) if value.element_size() == 4 else ((16, 2), (32, 4))
        for bq, nw in tiles:
            for mr in (None, 64, 96, 128, 168):
                name = f"f-q{bq}-w{nw}-r{mr}"
                kw = dict(block_q=bq, warps=nw, maxnreg=mr)
                try:
                    got = forward_nreg(value, shapes, starts, loc, attn, **kw)
                except Exception as exc:  # noqa: BLE001 - reported, not fatal
                    print("FAILED", name, type(exc).__name__, str(exc)[:200], flush=True)
                    continue
                if not _close([got], [want], 1e-2):
                    print("MISMATCH", preset, dtype, name, flush=True)
                    continue
                fns[name] = lambda kw=kw: forward_nreg(value, shapes, starts, loc, attn, **kw)
        for bq, nw in tiles + ((32, 4),):
            name = f"loop-q{bq}-w{nw}"
            kw = dict(block_q=bq, warps=nw)
            got = forward_loop(value, shapes, starts, loc, attn, **kw)
            if not _close([got], [want], 1e-2):
                print("MISMATCH", preset, dtype, name, flush=True)
                continue
            fns[name] = lambda kw=kw: forward_loop(value, shapes, starts, loc, attn, **kw)
        gen = torch.Generator(device="cuda").manual_seed(1)
        grad_out = torch.randn(want.shape, device="cuda", generator=gen).to(value.dtype)
        bwant = shipped.msda_backward(value, shapes, starts, loc, attn, grad_out)
        fns["bshipped"] = lambda: shipped.msda_backward(value, shapes, starts, loc, attn,
                                                        grad_out)
        tol = 1e-3 if value.dtype == torch.float32 else 5e-2
        for nw in (1, 2, 4):
            for mr in (None, 40, 48, 64):
                name = f"b-w{nw}-r{mr}"
                kw = dict(warps=nw, maxnreg=mr)
                try:
                    got = backward_nreg(value, shapes, starts, loc, attn, grad_out, **kw)
                except Exception as exc:  # noqa: BLE001 - reported, not fatal
                    print("FAILED", name, type(exc).__name__, str(exc)[:200], flush=True)
                    continue
                if not _close(got, bwant, tol):
                    print("MISMATCH", preset, dtype, name, flush=True)
                    continue
                fns[name] = lambda kw=kw: backward_nreg(value, shapes, starts, loc, attn,
                                                        grad_out, **kw)
        times = _rounds(fns)
        res.append({"preset": preset, "dtype": str(dtype), "times": times})
        print(preset, dtype, "fwd", sorted((round(v, 1), k) for k, v in times.items()
                                           if not k.startswith("b"))[:6], flush=True)
        print(preset, dtype, "bwd", sorted((round(v, 1), k) for k, v in times.items()
                                           if k.startswith("b"))[:6], flush=True)
        RESULT["nreg"] = res
        save()


def _host_us(fn, n=100):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    us = (time.perf_counter() - t0) * 1e6 / n
    torch.cuda.synchronize()
    return us


def host2_part():
    """Host time of the backward alone, kit against peer, and of its pieces."""
    from msda_labs.chips import lab10
    from msda_labs.gpu import opbench

    peer = opbench.load_peer("msda_triton:multi_scale_deformable_attention").fn
    value, shapes, starts, loc, attn = opbench.make_preset_inputs("decoder", torch.float32,
                                                                  "cuda")
    leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
    grad_out = torch.randn(4, 300, 256, device="cuda")
    out = {}
    for name, fn in (("kit", lab10.msda), ("peer", peer)):
        kept = fn(leaves[0], shapes, starts, leaves[1], leaves[2])
        for _ in range(3):
            torch.autograd.grad(kept, leaves, grad_out, retain_graph=True)
        out[name] = kept
    pieces = {
        "kit_bwd_grad": lambda: torch.autograd.grad(out["kit"], leaves, grad_out,
                                                    retain_graph=True),
        "peer_bwd_grad": lambda: torch.autograd.grad(out["peer"], leaves, grad_out,
                                                     retain_graph=True),
        "kit_msda_backward": lambda: shipped.msda_backward(value, shapes, starts, loc, attn,
                                                           grad_out),
        "zeros_91MB": lambda: torch.zeros_like(value),
        "kit_fwd_nograd": lambda: shipped.msda_forward(value, shapes, starts, loc, attn),
        "empty_like_loc": lambda: torch.empty_like(loc),
    }
    for _ in range(2):
        for fn in pieces.values():
            _host_us(fn, 20)
    res = {name: [] for name in pieces}
    for _ in range(5):
        for name, fn in pieces.items():
            res[name].append(_host_us(fn))
    summary = {n: round(statistics.median(v), 1) for n, v in res.items()}
    print("host2", summary, flush=True)
    profiles = {}
    for name in ("kit_bwd_grad", "peer_bwd_grad"):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            pieces[name]()
        prof.disable()
        torch.cuda.synchronize()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(14)
        profiles[name] = buf.getvalue()
        print(name, buf.getvalue()[:3500], flush=True)
    RESULT["host2"] = {"samples": res, "median": summary, "profiles": profiles}
    save()


if __name__ == "__main__":
    for part in PARTS:
        {"check": check_part, "tma": tma_part, "evict": evict_part,
         "host": host_part, "host2": host2_part, "nreg": nreg_part}[part]()
