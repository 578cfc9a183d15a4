"""The child's half of a speed trial timed on the judge's clock (the judge's half:
:mod:`msda_labs.grading.judge.speedjudge`).

The judge talks with a running probe (:func:`serve`) over a socket of its own. A *timed* request
carries a seed the child has never seen. Only then does the child draw ``n`` fresh input sets from
it on its device (:func:`draw_round`: every iteration its own value, locations and weights), run
the operator once on each, and, right after each call, on the default stream, reduce the output to
a checksum with weights drawn from the same seed. It waits for the device and replies with the
checksums; the judge stops its clock when the reply arrives. Afterwards the judge asks for the
outputs of iterations it picks (:data:`show`) and checks them, and the checksums, on its side.

So the work cannot be done ahead (the inputs do not exist before the seed), cannot be skipped,
served from a cache or left running on another stream (the checksum of that iteration would be
wrong, and it was sent inside the timed window), and the child's own clock plays no part.

Messages both ways are JSON (the outputs: ``torch.save`` bytes, which the judge loads with
``weights_only=True``). This module imports no ground truth: the zygote holds it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

__all__ = ["draw_round", "serve", "serve_noop", "noop_call", "loop", "out_numel", "OPS",
           "variants"]


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def out_numel(spec: Mapping) -> int:
    return sum(_prod(shape) for shape in spec["out_shapes"])


def _prod(shape: Sequence[int]) -> int:
    total = 1
    for size in shape:
        total *= int(size)
    return total


def draw_round(spec: Mapping, seed: int, device) -> tuple[list[tuple], torch.Tensor]:
    """The ``spec["n"]`` input sets of one round and the (n, outputs' numel) checksum weights,
    all drawn from ``seed`` on ``device``. The judge draws the same from the same seed.

    ``spec["case"]``: B, Q, M, D, K, shapes, loc_lo, loc_hi; ``spec["dtype"]``: a torch dtype's
    name; ``spec["op"]``: "forward" (value, shapes, starts, loc, attn) or "backward" (the same and
    a gradient of the output)."""
    c, n = spec["case"], int(spec["n"])
    dtype = getattr(torch, spec["dtype"])
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    B, Q, M, D, K = (int(c[k]) for k in ("B", "Q", "M", "D", "K"))
    shapes = [tuple(int(x) for x in hw) for hw in c["shapes"]]
    L, S = len(shapes), sum(h * w for h, w in shapes)
    lo, hi = float(c.get("loc_lo", 0.0)), float(c.get("loc_hi", 1.0))
    f32 = dict(generator=gen, device=device, dtype=torch.float32)
    value = torch.randn(n, B, S, M, D, **f32).to(dtype)
    loc = (lo + (hi - lo) * torch.rand(n, B, Q, M, L, K, 2, **f32)).to(dtype)
    attn = torch.rand(n, B, Q, M, L * K, **f32).softmax(-1).reshape(n, B, Q, M, L, K).to(dtype)
    grad = torch.randn(n, B, Q, M * D, **f32).to(dtype) if spec["op"] == "backward" else None
    weights = torch.randn(n, out_numel(spec), **f32)
    spatial = torch.tensor(shapes, dtype=torch.int64, device=device)
    sizes = spatial[:, 0] * spatial[:, 1]
    starts = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    sets = []
    for i in range(n):
        one = (value[i], spatial, starts, loc[i], attn[i])
        sets.append(one + ((grad[i],) if grad is not None else ()))
    return sets, weights


def _flat(out: Any) -> tuple[torch.Tensor, list]:
    """The output(s) of one call as one float32 vector (a copy), and their shapes and dtypes."""
    parts = out if isinstance(out, (tuple, list)) else (out,)
    if not parts or not all(isinstance(p, torch.Tensor) for p in parts):
        raise TypeError(f"the timed call returned {type(out).__name__}, not tensors")
    meta = [[list(p.shape), str(p.dtype).replace("torch.", "")] for p in parts]
    return torch.cat([p.detach().reshape(-1).float() for p in parts]), meta


def _timed(call: Callable, spec: Mapping, seed: int, device) -> tuple[list[float], list, list]:
    sets, weights = draw_round(spec, seed, device)
    sums = torch.empty(len(sets), dtype=torch.float32, device=device)
    kept, metas = [], []
    for i, inputs in enumerate(sets):
        flat, meta = _flat(call(*inputs))
        if flat.numel() == weights.shape[1]:
            sums[i] = torch.dot(flat.to(weights.device), weights[i])
        else:  # the wrong size: the judge says so when it checks the shapes
            sums[i] = float("nan")
        kept.append(flat)
        metas.append(meta)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return sums.tolist(), kept, metas


def loop(calls: Mapping[str, Callable], spec: Mapping, channel, device=None) -> int:
    """Answer the judge's requests until it says "end"; returns the number of timed rounds.

    Requests: ``{"do": "time", "which": name, "seed": int}`` runs one round of ``calls[name]``
    and replies ``{"sums": [...], "meta": [...]}``; ``{"do": "keep", "iters": [...]}`` (no
    reply) keeps the outputs of those calls of the last round, in the order kept, and lets the
    others go; ``{"do": "show", "index": k}`` replies with the k-th outputs kept
    (``torch.save`` bytes); ``{"do": "end"}`` ends. The judge picks what to keep after the
    round's reply and asks to see it after the last round, so that the timed rounds run back
    to back, as the baselines' do."""
    device = device or _device()
    pending: list = []
    stash: list[list] = []
    rounds = 0
    while True:
        try:
            request = json.loads(channel.recv_bytes())
        except EOFError:
            return rounds
        what = request.get("do")
        if what == "end":
            return rounds
        if what == "time":
            pending = []  # the last round's outputs go before this round allocates its own
            sums, pending, metas = _timed(calls[request["which"]], spec, request["seed"],
                                          device)
            rounds += 1
            channel.send_bytes(json.dumps({"sums": sums, "meta": metas}).encode())
        elif what == "keep":
            stash.append([pending[i] for i in request["iters"]])
            pending = []
        elif what == "show":
            index = int(request["index"])
            picked = [t.cpu() for t in stash[index]]
            stash[index] = []
            buf = io.BytesIO()
            torch.save(picked, buf)
            channel.send_bytes(buf.getvalue())
        else:
            raise ValueError(f"unknown request {what!r}")


def _forward_call(fn: Callable, kwargs: Mapping) -> Callable:
    return lambda value, shapes, starts, loc, attn: fn(value, shapes, starts, loc, attn,
                                                         **kwargs)


def _backward_call(fn: Callable, kwargs: Mapping) -> Callable:
    return lambda value, shapes, starts, loc, attn, grad: fn(value, shapes, starts, loc, attn,
                                                               grad, **kwargs)


def _autograd_call(fn: Callable, kwargs: Mapping) -> Callable:
    """A training step: the forward, then the three gradients through autograd; the output and
    the gradients are the result."""

    def call(value, shapes, starts, loc, attn, grad):
        leaves = [t.detach().requires_grad_(True) for t in (value, loc, attn)]
        out = fn(leaves[0], shapes, starts, leaves[1], leaves[2], **kwargs)
        return (out, *torch.autograd.grad(out, leaves, grad))
    return call


# How a spec's "call" turns a function into the timed call.
OPS = {"forward": _forward_call, "backward": _backward_call, "autograd": _autograd_call}


def noop_call(spec: Mapping) -> Callable:
    """What the protocol costs without an operator: outputs of the right shapes (zeros), no
    other work."""
    dtype = getattr(torch, spec["dtype"])
    shapes = [tuple(s) for s in spec["out_shapes"]]

    def call(*inputs):
        dev = inputs[0].device
        outs = tuple(torch.zeros(s, dtype=dtype, device=dev) for s in shapes)
        return outs if len(outs) > 1 else outs[0]
    return call


def serve_noop(_module, spec: Mapping, *, channel) -> dict:
    """The probe of a clean child (one that imported a kit file, not the student's): the no-op,
    whose rounds are the protocol's own cost in a child like the student's."""
    return {"rounds": loop({"noop": noop_call(spec)}, spec, channel)}


def variants(spec: Mapping) -> dict:
    """``{name: {"fn", "kwargs", "make"}}``: the student's calls a trial times; by default one,
    "yours", ``spec["fn"]`` with ``spec["kwargs"]``. ``make`` names a function of the module
    called once, with no argument, whose result is passed as the keyword ``kernel``."""
    found = spec.get("variants")
    if found:
        return {name: dict(v) for name, v in found.items()}
    return {"yours": {"fn": spec["fn"], "kwargs": spec.get("kwargs") or {}}}


def serve(module, spec: Mapping, *, channel) -> dict:
    """The probe: the student's calls (:func:`variants`, each called as ``spec["call"]`` says)
    answer the judge's timed requests under their names."""
    calls = {}
    for name, variant in variants(spec).items():
        fn = getattr(module, variant["fn"], None)
        if fn is None:
            raise AttributeError(f"your module defines no '{variant['fn']}'")
        kwargs = dict(variant.get("kwargs") or {})
        if variant.get("make"):
            kwargs["kernel"] = getattr(module, variant["make"])()
        calls[name] = OPS[spec.get("call", spec["op"])](fn, kwargs)
    rounds = loop(calls, spec, channel)
    return {"rounds": rounds}
