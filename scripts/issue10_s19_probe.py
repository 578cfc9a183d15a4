"""Issue 10, session 19: a channel-slice forward and a backward by cells (H200 probe).

    PYTHONPATH=shared:.peer python scripts/issue10_s19_probe.py OUT [--parts check,split,fwd,bwd]
    TRITON_INTERPRET=1 PYTHONPATH=shared python scripts/issue10_s19_probe.py OUT --parts check

* check: every variant below against the fp32 reference on a small problem (CPU interpreter or
  GPU), and on the GPU at both presets in every dtype;
* split: forward and backward kernel time of the split-tile kernels (SPLIT x BLOCK_Q x
  num_warps) against the shipped ones, both presets (no peer: its numbers are in session 18's
  table and in the other parts);
* fwd: forward kernel time (torch.profiler sum over 50 calls, median of 3 alternating rounds;
  the slice variants include the transpose of value) for the shipped kernel, the peer and the
  slice variants (C, BLOCK_Q, num_warps, sliced layout or not, evict_first levels);
* bwd: backward kernel time, same method (the zero fills and the prefix sum included), for the
  shipped kernel, the peer and the backward by cells (points per chunk, warps).

The kernels are in ``issue10_s19_kernels.py`` next to this file; none of them is shipped (each
was slower than the shipped one on the H200: docs/results/h200-msda-operator.md).

Results: OUT_DIR/s19-probe.json; the same lines are printed.
"""

# ruff: noqa: B023 - every closure below is called at once, inside its own loop iteration

from __future__ import annotations

import sys

import torch
import triton
from issue10_s19_kernels import (
    msda_backward_split_kernel,
    msda_cells_backward_kernel,
    msda_cells_count_kernel,
    msda_cells_place_kernel,
    msda_forward_slices_kernel,
    msda_forward_split_kernel,
)
from issue10_timing import ProbeRun, preset_cases, rounds

from msda_labs.student import runtime, shipped

RUN = ProbeRun(sys.argv, "s19-probe", ["check", "fwd", "bwd"])
OUT, DTYPES, RESULT, save = RUN.out, RUN.dtypes, RUN.result, RUN.save


def forward_slices(value, shapes, starts, loc, attn, C=None, block_q=32, warps=1, sliced=True,
                   evict_from=0):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = loc.shape
    if C is None:
        C = 32 // value.element_size()
    C = min(C, D)
    if sliced:
        value = value.view(B, S, M, D // C, C).permute(0, 2, 3, 1, 4).contiguous()
    out = torch.empty((B, Q, M, D), dtype=value.dtype, device=value.device)
    grid = (triton.cdiv(Q, block_q), B * M * (D // C))
    msda_forward_slices_kernel[grid](value, shapes, starts, loc, attn, out, Q, S, M=M, D=D, L=L,
                                     K=K, C=C, SLICED=sliced, EVICT_FROM=evict_from,
                                     BLOCK_Q=block_q, num_warps=warps)
    return out.view(B, Q, M * D)


def forward_split(value, shapes, starts, loc, attn, split=2, block_q=8, warps=1):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = loc.shape
    out = torch.empty((B, Q, M, D), dtype=value.dtype, device=value.device)
    msda_forward_split_kernel[(triton.cdiv(Q, block_q), B * M)](
        value, shapes, starts, loc, attn, out, Q, S, M=M, D=D, L=L, K=K, SPLIT=split,
        BLOCK_Q=block_q, num_warps=warps)
    return out.view(B, Q, M * D)


def backward_split(value, shapes, starts, loc, attn, grad_out, split=2, block_q=1, warps=2):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = loc.shape
    grad_out = grad_out.reshape(B, Q, M, D).contiguous()
    grad_value = torch.zeros_like(value)
    grad_loc = torch.empty_like(loc)
    grad_attn = torch.empty_like(attn)
    msda_backward_split_kernel[(triton.cdiv(Q, block_q), B * M)](
        value, shapes, starts, loc, attn, grad_out, grad_value, grad_loc, grad_attn, Q, S,
        M=M, D=D, L=L, K=K, LK=triton.next_power_of_2(L * K), SPLIT=split, BLOCK_Q=block_q,
        num_warps=warps)
    return grad_value, grad_loc, grad_attn


def backward_cells(value, shapes, starts, loc, attn, grad_out, chunk=16, warps=1, block=512):
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = loc.shape
    grad_out = grad_out.reshape(B, Q, M, D).contiguous()
    NP = B * Q * M * L * K
    CB = 2 * S + 2 * L
    counts = torch.zeros(B * M * CB, dtype=torch.int32, device=value.device)
    rank = torch.empty(NP, dtype=torch.int32, device=value.device)
    records = torch.empty(NP, 4, dtype=torch.float32, device=value.device)
    grad_value = torch.zeros_like(value)
    grad_loc = torch.empty_like(loc)
    grad_attn = torch.empty_like(attn)
    grid = (triton.cdiv(NP, block),)
    msda_cells_count_kernel[grid](shapes, loc, counts, rank, grad_loc, grad_attn, NP, Q, CB,
                                  M=M, L=L, K=K, BLOCK=block, num_warps=4)
    ends = torch.cumsum(counts, 0, dtype=torch.int32)
    msda_cells_place_kernel[grid](shapes, loc, attn, counts, ends, rank, records, NP, Q, CB,
                                  M=M, L=L, K=K, BLOCK=block, num_warps=4)
    msda_cells_backward_kernel[(CB, B * M)](
        value, shapes, starts, counts, ends, records, grad_out, grad_value, grad_loc, grad_attn,
        S, CB, M=M, D=D, L=L, K=K, BLOCK_D=triton.next_power_of_2(D), CHUNK=chunk,
        num_warps=warps)
    return grad_value, grad_loc, grad_attn


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
    loc = torch.rand(B, Q, M, len(levels), K, 2, generator=gen) * 1.2 - 0.1
    attn = torch.rand(B, Q, M, len(levels), K, generator=gen)
    shapes = torch.tensor(levels)
    sizes = shapes[:, 0] * shapes[:, 1]
    starts = torch.cumsum(sizes, 0) - sizes
    grad_out = torch.randn(B, Q, M * D, generator=gen)
    return [t.to(device) if t.dtype == torch.int64 else t.to(device, dtype)
            for t in (value, shapes, starts, loc, attn, grad_out)]


FWD_VARIANTS = {
    "slices": dict(),
    "slices-evict1": dict(evict_from=1),
    "strided": dict(sliced=False),
}
BWD_VARIANTS = {
    "cells": dict(),
    "cells-c4": dict(chunk=4, warps=2),
}


def check_part():
    device = "cuda" if torch.cuda.is_available() and not runtime.interpreted() else "cpu"
    rows = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        if device == "cpu" and dtype != torch.float32:
            continue
        tol = 2e-5 if dtype == torch.float32 else 3e-2
        inputs = _small(dtype, device)
        ref_out, ref_grads = _reference(*inputs)
        for split in (1, 2, 4):
            got = forward_split(*inputs[:5], split=split)
            err = _err(got, ref_out)
            rows.append((str(dtype), "fwd", f"split{split}", "", err, err < tol))
        for name, kw in FWD_VARIANTS.items():
            for extra in ({}, {"C": 4}):
                got = forward_slices(*inputs[:5], **kw, **extra)
                err = _err(got, ref_out)
                rows.append((str(dtype), "fwd", name, str(extra), err, err < tol))
        for split in (1, 2, 4):
            got = backward_split(*inputs, split=split, block_q=2)
            errs = [_err(g, r) for g, r in zip(got, ref_grads)]
            rows.append((str(dtype), "bwd", f"split{split}", "", max(errs), max(errs) < tol))
        for name, kw in BWD_VARIANTS.items():
            for extra in ({}, {"block": 16}):
                got = backward_cells(*inputs, **kw, **extra)
                errs = [_err(g, r) for g, r in zip(got, ref_grads)]
                rows.append((str(dtype), "bwd", name, str(extra), max(errs), max(errs) < tol))
    for row in rows:
        print(row, flush=True)
    RESULT["check"] = rows
    save()
    assert all(r[-1] for r in rows), "a variant is wrong"


def _peer():
    from msda_labs.gpu import opbench

    try:
        return opbench.load_peer("msda_triton:multi_scale_deformable_attention").fn
    except SystemExit as exc:
        print("no peer:", exc)
        return None


def split_part():
    res = []
    for preset, dtype, (value, shapes, starts, loc, attn) in preset_cases(DTYPES):
        ref = shipped.msda_forward(value, shapes, starts, loc, attn).float()
        fns = {"shipped": lambda: shipped.msda_forward(value, shapes, starts, loc, attn)}
        splits = (1, 2, 4) if value.element_size() == 4 else (1, 2)
        for split in splits:
            for bq, nw in ((4, 1), (8, 1), (8, 2), (16, 2), (32, 4)):
                name = f"split{split}-q{bq}-w{nw}"
                kw = dict(split=split, block_q=bq, warps=nw)
                got = forward_split(value, shapes, starts, loc, attn, **kw).float()
                if not torch.allclose(got, ref, atol=1e-2, rtol=1e-2):
                    print("MISMATCH", preset, dtype, name, flush=True)
                    continue
                fns[name] = lambda kw=kw: forward_split(value, shapes, starts, loc, attn, **kw)
        times = rounds(fns)
        res.append({"preset": preset, "dtype": str(dtype), "pass": "fwd", "times": times})
        print(preset, dtype, sorted((round(v, 1), k) for k, v in times.items())[:8], flush=True)
        gen = torch.Generator(device="cuda").manual_seed(1)
        grad_out = torch.randn(ref.shape, device="cuda", generator=gen).to(value.dtype)
        want = shipped.msda_backward(value, shapes, starts, loc, attn, grad_out)
        fns = {"shipped": lambda: shipped.msda_backward(value, shapes, starts, loc, attn,
                                                         grad_out)}
        for split in splits:
            for bq, nw in ((1, 1), (1, 2), (2, 2), (2, 4)):
                name = f"bsplit{split}-q{bq}-w{nw}"
                kw = dict(split=split, block_q=bq, warps=nw)
                got = backward_split(value, shapes, starts, loc, attn, grad_out, **kw)
                if not all(torch.allclose(g.float(), r.float(), atol=5e-2, rtol=5e-2)
                           for g, r in zip(got[1:], want[1:])):
                    print("MISMATCH", preset, dtype, name, flush=True)
                    continue
                fns[name] = lambda kw=kw: backward_split(value, shapes, starts, loc, attn,
                                                         grad_out, **kw)
        times = rounds(fns)
        res.append({"preset": preset, "dtype": str(dtype), "pass": "bwd", "times": times})
        print(preset, dtype, sorted((round(v, 1), k) for k, v in times.items())[:8], flush=True)
        RESULT["split"] = res
        save()


def fwd_part():
    peer = _peer()
    res = []
    for preset, dtype, (value, shapes, starts, loc, attn) in preset_cases(DTYPES):
        ref = shipped.msda_forward(value, shapes, starts, loc, attn).float()
        fns = {"shipped": lambda: shipped.msda_forward(value, shapes, starts, loc, attn)}
        if peer is not None:
            fns["peer"] = lambda: peer(value, shapes, starts, loc, attn)
        for C in (8, 16):
            if C * value.element_size() < 32:
                continue
            for bq, nw in ((32, 1), (64, 2), (128, 4)):
                for sliced, evict in ((True, 0), (True, 1), (False, 0)):
                    name = f"C{C}-q{bq}-w{nw}-{'sl' if sliced else 'st'}-e{evict}"
                    kw = dict(C=C, block_q=bq, warps=nw, sliced=sliced, evict_from=evict)
                    got = forward_slices(value, shapes, starts, loc, attn, **kw).float()
                    if not torch.allclose(got, ref, atol=1e-2, rtol=1e-2):
                        print("MISMATCH", preset, dtype, name, flush=True)
                        continue
                    fns[name] = lambda kw=kw: forward_slices(value, shapes, starts, loc, attn,
                                                             **kw)
        times = rounds(fns)
        best = sorted(times.items(), key=lambda kv: kv[1])[:6]
        line = {"preset": preset, "dtype": str(dtype), "times": times}
        res.append(line)
        print(preset, dtype, "shipped", round(times["shipped"], 1), "peer",
              round(times.get("peer", float("nan")), 1), "best", best, flush=True)
        RESULT["fwd"] = res
        save()


def bwd_part():
    peer = _peer()
    res = []
    for preset, dtype, (value, shapes, starts, loc, attn) in preset_cases(DTYPES):
        gen = torch.Generator(device="cuda").manual_seed(1)
        B, Q = loc.shape[0], loc.shape[1]
        grad_out = torch.randn(B, Q, value.shape[2] * value.shape[3], device="cuda",
                               generator=gen).to(value.dtype)
        ref = shipped.msda_backward(value, shapes, starts, loc, attn, grad_out)
        fns = {"shipped": lambda: shipped.msda_backward(value, shapes, starts, loc, attn,
                                                         grad_out)}
        if peer is not None:
            leaves = [t.detach().clone().requires_grad_() for t in (value, loc, attn)]
            out = peer(leaves[0], shapes, starts, leaves[1], leaves[2])
            fns["peer"] = lambda: torch.autograd.grad(out, leaves, grad_out, retain_graph=True)
        for chunk, warps in ((8, 1), (16, 1), (16, 2), (32, 2), (32, 4)):
            if True:
                name = f"cells-c{chunk}-w{warps}"
                kw = dict(chunk=chunk, warps=warps)
                try:
                    got = backward_cells(value, shapes, starts, loc, attn, grad_out, **kw)
                except Exception as exc:  # noqa: BLE001 - a launch that fails is reported
                    print("FAILED", name, type(exc).__name__, str(exc)[:200], flush=True)
                    continue
                bad = [not torch.allclose(g.float(), r.float(), atol=5e-2, rtol=5e-2)
                       for g, r in zip(got, ref)]
                if any(bad):
                    print("MISMATCH", preset, dtype, name, bad, flush=True)
                    continue
                fns[name] = lambda kw=kw: backward_cells(value, shapes, starts, loc, attn,
                                                          grad_out, **kw)
        times = rounds(fns)
        best = sorted(times.items(), key=lambda kv: kv[1])[:6]
        res.append({"preset": preset, "dtype": str(dtype), "times": times})
        print(preset, dtype, "shipped", round(times["shipped"], 1), "peer",
              round(times.get("peer", float("nan")), 1), "best", best, flush=True)
        RESULT["bwd"] = res
        save()


if __name__ == "__main__":
    for part in RUN.parts:
        {"check": check_part, "fwd": fwd_part, "bwd": bwd_part, "split": split_part}[part]()
