"""Issue 10, session 20: where the decoder step's host time goes, and the shipped kernels with
capped register counts (H200 probe; needs a GPU of SM 9.0).

    PYTHONPATH=shared:.peer python scripts/issue10_s20_probe.py OUT [--parts host,host2,nreg]

* host: the decoder fp32 training step of the kit (lab 10's ``msda``), of the kit with the host
  integer helpers it had before session 20 (``triton.cdiv`` / ``triton.next_power_of_2``), and
  of the peer: the bench's do_bench step and the host time per step and per forward (enqueue
  only), 7 alternating rounds, medians and per-round ratios;
* host2: the host time of the backward alone (kit and peer) and of its pieces, with both
  backwards under cProfile;
* nreg: the shipped forward and backward with ``maxnreg`` capped, kernel time against the shipped
  launch at both presets (torch.profiler sum over 50 calls, median of 3 alternating rounds).

The session's other experiments (grad_value through bulk tensor reductions, L2 eviction hints,
a forward whose points run in a loop that is not unrolled) were measured by this probe's
earlier parts, which need kernels that were not kept: ``git show 6c1b3f1:scripts/
issue10_s20_kernels.py`` and ``git show 6c1b3f1:scripts/issue10_s20_probe.py``.

Results: OUT/s20-probe.json; the same lines are printed.
"""

# ruff: noqa: B023 - every closure below is called at once, inside its own loop iteration

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import sys
import time

import torch
import triton
from issue10_timing import ProbeRun, preset_cases, rounds

from msda_labs.student import shipped

RUN = ProbeRun(sys.argv, "s20-probe", ["host", "host2", "nreg"])
OUT, DTYPES, RESULT, save = RUN.out, RUN.dtypes, RUN.result, RUN.save


def _close(got, want, tol):
    return all(torch.allclose(g.float(), r.float(), atol=tol, rtol=tol)
               for g, r in zip(got, want))


def _decoder_fp32():
    """The peer, the decoder fp32 inputs, leaves that want gradients, and an upstream grad."""
    from msda_labs.gpu import opbench

    peer = opbench.load_peer("msda_triton:multi_scale_deformable_attention").fn
    inputs = opbench.make_preset_inputs("decoder", torch.float32, "cuda")
    leaves = [inputs[i].detach().clone().requires_grad_(True) for i in (0, 3, 4)]
    return peer, inputs, leaves, torch.randn(4, 300, 256, device="cuda")


def host_part():
    """Decoder fp32 training step on the host: the kit, the kit with session 19's host integer
    helpers (``kit_before``: triton.cdiv / triton.next_power_of_2), and the peer."""
    from triton.testing import do_bench

    from msda_labs.chips import lab10

    peer, (value, shapes, starts, loc, attn), leaves, grad_out = _decoder_fp32()
    new_pow2, new_grid = shipped.pow2, shipped._grid

    def old_grid(order, Q, block_q, B, M):
        if order == 0:
            return (triton.cdiv(Q, block_q), B * M)
        return (M, triton.cdiv(Q, block_q), B)

    def kit_before(*args):
        shipped.pow2, shipped._grid = triton.next_power_of_2, old_grid
        try:
            return lab10.msda(*args)
        finally:
            shipped.pow2, shipped._grid = new_pow2, new_grid

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
    for preset, dtype, (value, shapes, starts, loc, attn) in preset_cases(DTYPES):
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
        times = rounds(fns)
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

    peer, (value, shapes, starts, loc, attn), leaves, grad_out = _decoder_fp32()
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
    for part in RUN.parts:
        {"host": host_part, "host2": host2_part, "nreg": nreg_part}[part]()
