"""Where a small training step's time goes: the host time of the kit's operator and its peers.

    python -m msda_labs.gpu.opbench_host [--peer module:function ...] [--dtype fp32]
        [--preset decoder] [--rounds 7] [--calls 200] [--profile] [--out DIR]

At the decoder preset (B=4, Q=300) a training step's kernels take well under 100 µs, and the
step is bound by the host: Python, the autograd engine, allocations and launches. This measures,
for every operator on the same inputs, in rounds that alternate between the operators (the
host's speed drifts within a minute, so only alternating rounds compare operators):

* ``fwd``: the host time of one forward with autograd recording (``calls`` calls, then one
  sync; the kernels are short enough never to hold the host back), per call;
* ``bwd``: ``torch.autograd.grad`` over value, locations and weights of a kept graph, per call;
* ``step``: forward + that ``torch.autograd.grad``, per call (host time), and the same step as
  ``triton.testing.do_bench`` times it (its median, µs), as ``nox -s bench`` does;
* ``kernels``: the summed CUDA kernel time of one step under ``torch.profiler``.

The medians over the rounds are reported with every sample and, per round, each peer's time over
the kit's. ``--profile`` adds the kit's step under cProfile (top functions by own time). Writes
``host.json`` to ``--out``; without a CUDA device it says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from msda_labs.gpu.opbench import (
    DTYPE_NAMES,
    NO_GPU_STATUS,
    PRESETS,
    Operator,
    _reference_fp32,
    _rel_err,
    _torch_dtype,
    kernel_time_us,
    load_peer,
    make_preset_inputs,
)

TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2}


def _parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m msda_labs.gpu.opbench_host",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="append", default=[],
                        help="module:function with mmcv's argument order (repeatable)")
    parser.add_argument("--preset", default="decoder", choices=list(PRESETS))
    parser.add_argument("--dtype", default="fp32", choices=DTYPE_NAMES)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200, help="calls per timed loop")
    parser.add_argument("--profile", action="store_true", help="cProfile the kit's step")
    parser.add_argument("--out", default="bench-results")
    return parser.parse_args(argv)


def _host_us(fn, calls: int) -> float:
    """Host time per call: ``calls`` calls, then one sync (the sync's wait is not counted when
    the kernels finish before the host does; it is, when they do not)."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    end = time.perf_counter()
    torch.cuda.synchronize()
    return (end - start) / calls * 1e6


def _callables(op: Operator, inputs, grad_out):
    import torch

    value, shapes, starts, loc, attn = inputs
    leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
    sh = shapes.cpu() if op.host_shapes else shapes

    def forward():
        return op.fn(leaves[0], sh, starts, leaves[1], leaves[2])

    kept = forward()

    def backward():
        torch.autograd.grad(kept, leaves, grad_out, retain_graph=True)

    def step():
        out = forward()
        torch.autograd.grad(out, leaves, grad_out)

    return leaves, forward, backward, step


def _profile(step, calls: int) -> str:
    import cProfile
    import io
    import pstats

    import torch

    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    for _ in range(calls):
        step()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(30)
    return text.getvalue()


def run(argv=None) -> int:
    args = _parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no GPU: nothing measured (opbench_host times CUDA operators)", file=sys.stderr)
        return NO_GPU_STATUS
    from triton.testing import do_bench

    from msda_labs.chips.lab10 import msda
    from msda_labs.student import runtime

    runtime.configure("gpu")
    ops = [Operator("kit", msda)] + [load_peer(spec) for spec in args.peer]
    dtype = _torch_dtype(args.dtype)
    inputs = make_preset_inputs(args.preset, dtype, "cuda")
    value, shapes, starts, loc, attn = inputs
    grad_out = torch.randn(value.shape[0], loc.shape[1], value.shape[2] * value.shape[3],
                           device="cuda", generator=torch.Generator(device="cuda").manual_seed(1)
                           ).to(dtype)
    ref_out, ref_grads = _reference_fp32(value, shapes.cpu(), loc, attn, grad_out)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "preset": args.preset, "dtype": args.dtype, "rounds": args.rounds,
              "calls": args.calls, "operators": {}, "started": time.time()}
    timed = {}
    for op in ops:
        entry = result["operators"][op.name] = {}
        try:
            leaves, forward, backward, step = _callables(op, inputs, grad_out)
            out = forward()
            grads = torch.autograd.grad(out, leaves, grad_out)
            errors = [_rel_err(out, ref_out)] + [_rel_err(g, r) for g, r in zip(grads, ref_grads)]
            entry["rel_err"] = dict(zip(("out", "grad_value", "grad_loc", "grad_attn"), errors))
            entry["correct"] = all(e <= TOLERANCE[args.dtype] for e in errors)
            for _ in range(20):
                step()
            entry["kernels_us"] = kernel_time_us(step)
            timed[op.name] = (forward, backward, step)
        except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
            entry["error"] = f"{type(exc).__name__}: {exc}"
    samples = {name: {"fwd": [], "bwd": [], "step": [], "do_bench": []} for name in timed}
    for _ in range(args.rounds):
        for name, (forward, backward, step) in timed.items():
            s = samples[name]
            s["fwd"].append(_host_us(forward, args.calls))
            s["bwd"].append(_host_us(backward, args.calls))
            s["step"].append(_host_us(step, args.calls))
            s["do_bench"].append(do_bench(step, warmup=5, rep=40, return_mode="median") * 1e3)
    for name, s in samples.items():
        entry = result["operators"][name]
        entry["samples_us"] = s
        entry["median_us"] = {k: statistics.median(v) for k, v in s.items()}
        if name != "kit" and "kit" in samples:
            entry["per_round_over_kit"] = {
                k: statistics.median(a / b for a, b in zip(v, samples["kit"][k]))
                for k, v in s.items()}
    if args.profile and "kit" in timed:
        result["kit_profile"] = _profile(timed["kit"][2], args.calls)
    result["seconds"] = time.time() - result.pop("started")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "host.json").write_text(json.dumps(result, indent=1))
    print(f"{args.preset} {args.dtype}, host µs per call, median of {args.rounds} alternating "
          f"rounds ({args.calls} calls each):")
    print(f"{'operator':12s} {'fwd':>8s} {'bwd':>8s} {'step':>8s} {'do_bench':>9s} "
          f"{'kernels':>8s}  peer/kit per round (step, do_bench)")
    for name, entry in result["operators"].items():
        if "error" in entry:
            print(f"{name:12s} error: {entry['error']}")
            continue
        med = entry["median_us"]
        ratio = entry.get("per_round_over_kit")
        extra = f"  {ratio['step']:.2f}x, {ratio['do_bench']:.2f}x" if ratio else ""
        wrong = "" if entry["correct"] else "  WRONG"
        print(f"{name:12s} {med['fwd']:8.1f} {med['bwd']:8.1f} {med['step']:8.1f} "
              f"{med['do_bench']:9.1f} {entry['kernels_us']:8.1f}{extra}{wrong}")
    if "kit_profile" in result:
        print(result["kit_profile"][:6000])
    return 0 if result["operators"]["kit"].get("correct") else 1


def main() -> None:
    raise SystemExit(run())


if __name__ == "__main__":
    main()
