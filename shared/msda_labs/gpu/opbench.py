"""`nox -s bench`: the kit's operator, the PyTorch reference and any peers, side by side, one run.

    python -m msda_labs.gpu.opbench --out DIR [--peer module:function ...] [--dtypes ...]

What is measured, for every preset (decoder, encoder) and dtype (fp32, fp16, bf16):

* **fwd** - the summed CUDA kernel time of one forward call: 20 calls after warm-up under
  ``torch.profiler``, every kernel they launched added up, divided by 20 (no L2 flush between
  calls), in microseconds;
* **bwd** - the same for ``torch.autograd.grad`` of a kept forward over value, locations and
  weights (every kernel of the backward: zero fills and casts too);
* **step** - the wall time a user pays for one training step, forward then that
  ``torch.autograd.grad``, with ``triton.testing.do_bench`` (median, microseconds): host
  dispatch, validation and any host sync are in it;
* **floor** - the compulsory DRAM traffic of the forward (value, locations and weights read
  once, the output written once) and of the backward (value, locations, weights and the upstream
  gradient read once; the three gradients written once), over the copy bandwidth measured in the
  same run (a 1 GiB device-to-device copy, bytes read + written). ``x floor`` is time / floor.

Before anything is timed, every operator's output and gradients are compared with the fp32
reference on the same inputs; an operator that is wrong is reported as such and its times are
marked. A peer is any callable with mmcv's argument order ``(value, spatial_shapes,
level_start_index, sampling_locations, attention_weights)`` (e.g.
``msda_triton:multi_scale_deformable_attention``).

Without a CUDA device nothing is measured: the command says so and exits with status 2, so that
a script never mistakes an empty run for a result (no table, JSON or chart is written).
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from msda_labs.gpu.opbench_report import PROFILED_CALLS, STEP_ROUNDS, write_outputs
from msda_labs.grading.speed.timing import copy_bandwidth_gbs

LEVELS = ((100, 167), (50, 84), (25, 42), (13, 21))
PRESETS = {
    "decoder": {"B": 4, "Q": 300},
    "encoder": {"B": 2, "Q": sum(h * w for h, w in LEVELS)},  # Q = S = 22223
}
M, D, K = 8, 32, 4
DTYPE_NAMES = ("fp32", "fp16", "bf16")
NO_GPU_STATUS = 2


@dataclass
class Operator:
    """One contender: a name and a callable with mmcv's argument order."""

    name: str
    fn: object
    host_shapes: bool = False  # the reference wants spatial_shapes on the host


def _torch_dtype(name: str):
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def make_preset_inputs(preset: str, dtype, device, seed: int = 0):
    """value ~ N(0, 1); locations ~ U[0, 1); weights softmaxed over L*K (drawn in fp32)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    B, Q = PRESETS[preset]["B"], PRESETS[preset]["Q"]
    L = len(LEVELS)
    S = sum(h * w for h, w in LEVELS)
    value = torch.randn(B, S, M, D, generator=gen)
    loc = torch.rand(B, Q, M, L, K, 2, generator=gen)
    attn = torch.rand(B, Q, M, L * K, generator=gen).softmax(-1).reshape(B, Q, M, L, K)
    shapes = torch.tensor(LEVELS, dtype=torch.int64)
    sizes = shapes[:, 0] * shapes[:, 1]
    starts = torch.cumsum(sizes, 0) - sizes
    return (value.to(device, dtype), shapes.to(device), starts.to(device),
            loc.to(device, dtype), attn.to(device, dtype))


def load_peer(spec: str) -> Operator:
    """``module:function`` -> Operator; a clear error when it cannot be imported."""
    if ":" not in spec:
        raise SystemExit(f"--peer wants module:function (e.g. msda_triton:"
                         f"multi_scale_deformable_attention); got {spec!r}")
    module_name, func_name = spec.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"--peer {spec}: cannot import {module_name!r} ({exc})") from None
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise SystemExit(f"--peer {spec}: {module_name} has no callable {func_name!r}")
    return Operator(name=module_name.split(".")[0], fn=fn)


def compulsory_bytes(preset: str, itemsize: int, backward: bool) -> int:
    """Each input read once and each output written once, at the preset's sizes."""
    B, Q = PRESETS[preset]["B"], PRESETS[preset]["Q"]
    L = len(LEVELS)
    S = sum(h * w for h, w in LEVELS)
    # value is read at most once, and never more than the corner rows the samples touch (at
    # the decoder preset the samples touch fewer rows than value has; repeated corners, which
    # caches serve, make even this an over-count there).
    value = min(B * S * M * D, 4 * B * Q * M * L * K * D)
    loc = B * Q * M * L * K * 2
    attn = B * Q * M * L * K
    out = B * Q * M * D
    if not backward:
        return (value + loc + attn + out) * itemsize
    grad_value = B * S * M * D  # written whole (zeroed, then scattered into)
    return (value + grad_value + 2 * loc + 2 * attn + out) * itemsize


def kernel_time_us(fn, calls: int = PROFILED_CALLS) -> float:
    """Summed CUDA kernel time of ``calls`` calls of ``fn`` under torch.profiler, per call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total = 0.0
    for event in prof.events():
        if getattr(event, "device_type", None) == torch.autograd.DeviceType.CUDA:
            total += event.time_range.elapsed_us()
    return total / calls


def _rel_err(got, ref) -> float:
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    if not torch_isfinite_all(got):
        return float("inf")
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


def torch_isfinite_all(t) -> bool:
    import torch

    return bool(torch.isfinite(t).all())


TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2}  # relative L2 error vs fp32 reference


def measure_case(ops: list[Operator], preset: str, dtype_name: str, reference_fp32) -> dict:
    """Check, then time every operator on one (preset, dtype)."""
    import torch
    from triton.testing import do_bench

    dtype = _torch_dtype(dtype_name)
    value, shapes, starts, loc, attn = make_preset_inputs(preset, dtype, "cuda")
    host_shapes = shapes.cpu()
    leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
    grad_out = torch.randn(value.shape[0], loc.shape[1], M * D, device="cuda",
                           generator=torch.Generator(device="cuda").manual_seed(1)).to(dtype)
    ref_out, ref_grads = reference_fp32(value, host_shapes, loc, attn, grad_out)
    row = {"preset": preset, "dtype": dtype_name, "ops": {}}
    steps = {}
    for op in ops:
        sh = host_shapes if op.host_shapes else shapes
        v, lo, at = leaves

        def forward(op=op, sh=sh, v=v, lo=lo, at=at):
            return op.fn(v, sh, starts, lo, at)

        entry: dict = {}
        try:
            out = forward()
            grads = torch.autograd.grad(out, leaves, grad_out)
            errors = [_rel_err(out, ref_out)] + [_rel_err(g, r) for g, r in zip(grads, ref_grads)]
            entry["rel_err"] = dict(zip(("out", "grad_value", "grad_loc", "grad_attn"), errors))
            # The reference in fp16/bf16 is the same formula rounded at every step (grid_sample
            # in half precision): reported, never judged.
            entry["correct"] = op.name == "reference" or \
                all(e <= TOLERANCE[dtype_name] for e in errors)

            def fwd_only(forward=forward):
                with torch.no_grad():
                    forward()

            kept = forward()

            def bwd_only(kept=kept):
                torch.autograd.grad(kept, leaves, grad_out, retain_graph=True)

            def step(forward=forward):
                o = forward()
                torch.autograd.grad(o, leaves, grad_out)

            for _ in range(3):
                fwd_only()
                bwd_only()
                step()
            entry["fwd_us"] = kernel_time_us(fwd_only)
            entry["bwd_us"] = kernel_time_us(bwd_only)
            steps[op.name] = step
            del kept
        except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
            entry["error"] = f"{type(exc).__name__}: {exc}"
        row["ops"][op.name] = entry
        torch.cuda.synchronize()
    # Steps: operators alternate, round by round, after the GPU has been kept busy for a while
    # (clocks drop when it idles, and a host-bound step would otherwise be timed at idle clocks).
    _keep_busy()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(STEP_ROUNDS):
        for name, step in steps.items():
            samples[name].append(do_bench(step, warmup=5, rep=40, return_mode="median") * 1e3)
    for name, values in samples.items():
        row["ops"][name]["step_us"] = statistics.median(values)
        row["ops"][name]["step_samples_us"] = values
    return row



def _keep_busy(ms: float = 300.0) -> None:
    """Matrix products for about ``ms`` milliseconds, so that the clocks are up."""
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    start = time.perf_counter()
    while (time.perf_counter() - start) * 1e3 < ms:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def _reference_fp32(value, host_shapes, loc, attn, grad_out):
    import torch

    from msda_labs.truth.reference import msda_reference

    v, lo, at = (t.detach().float().requires_grad_(True) for t in (value, loc, attn))
    out = msda_reference(v, host_shapes, lo, at)
    grads = torch.autograd.grad(out, (v, lo, at), grad_out.float())
    return out.detach(), [g.detach() for g in grads]


def _parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m msda_labs.gpu.opbench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench-results", help="folder for md, json and png")
    parser.add_argument("--peer", action="append", default=[],
                        help="module:function with mmcv's argument order (repeatable)")
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPE_NAMES), choices=DTYPE_NAMES)
    parser.add_argument("--no-reference", action="store_true",
                        help="leave the PyTorch reference out of the timings (it is still the "
                             "correctness yardstick)")
    parser.add_argument("--render", metavar="JSON",
                        help="only rewrite bench.md and bench.png from a bench.json (no GPU)")
    return parser.parse_args(argv)


def _add_floors(row: dict, bandwidth_gbs: float) -> None:
    itemsize = 4 if row["dtype"] == "fp32" else 2
    for key, backward in (("floor_fwd_us", False), ("floor_bwd_us", True)):
        row[key] = compulsory_bytes(row["preset"], itemsize, backward) / bandwidth_gbs / 1e3


def _render(json_path: str, out_dir: Path) -> int:
    result = json.loads(Path(json_path).read_text())
    for row in result["rows"]:
        _add_floors(row, result["copy_bandwidth_gbs"])
        if "reference" in row["ops"]:
            row["ops"]["reference"]["correct"] = True
    out_dir.mkdir(parents=True, exist_ok=True)
    write_outputs(result, out_dir)
    return 0


def _operators(args) -> list[Operator]:
    from msda_labs.chips.lab10 import msda
    from msda_labs.truth.reference import msda_reference

    def reference(value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights):
        return msda_reference(value, spatial_shapes, sampling_locations, attention_weights)

    ops = [Operator("kit", msda)]
    if not args.no_reference:
        ops.append(Operator("reference", reference, host_shapes=True))
    return ops + [load_peer(spec) for spec in args.peer]


def _summary(preset: str, dtype_name: str, row: dict) -> str:
    parts = []
    for name, e in row["ops"].items():
        parts.append(f"{name} " + (e.get("error") or f"fwd {e['fwd_us']:.1f} "
                                   f"bwd {e['bwd_us']:.1f} step {e['step_us']:.0f}"))
    wrong = "" if row["ops"]["kit"].get("correct") else " KIT WRONG"
    return f"{preset} {dtype_name}: " + "; ".join(parts) + wrong


def _result(ops, args, bandwidth: float, rows: list, started: float) -> dict:
    import torch
    import triton

    return {
        "device": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "torch": torch.__version__, "triton": triton.__version__,
        "python": platform.python_version(),
        "copy_bandwidth_gbs": bandwidth,
        "operators": [op.name for op in ops],
        "peers": args.peer,
        "method": {
            "fwd_us": f"summed CUDA kernel time under torch.profiler over {PROFILED_CALLS} calls "
                      f"after warm-up, no L2 flush, per call",
            "bwd_us": "same, for torch.autograd.grad over value, locations and weights",
            "step_us": "triton.testing.do_bench median of forward + torch.autograd.grad",
            "floor": "compulsory DRAM bytes (inputs read once, outputs written once) / copy "
                     "bandwidth measured in this run",
            "inputs": f"levels {LEVELS}, M={M}, D={D}, K={K}; value randn, locations U[0,1), "
                      f"weights softmax over L*K; presets {PRESETS}",
        },
        "rows": rows,
        "seconds": time.time() - started,
    }


def run(argv=None) -> int:
    args = _parse_args(argv)
    out_dir = Path(args.out)
    if args.render:
        return _render(args.render, out_dir)
    import torch

    if not torch.cuda.is_available():
        print(f"no GPU: nothing measured. torch {torch.__version__} sees no CUDA device here; "
              f"`nox -s bench` times CUDA kernels and needs an NVIDIA GPU. No table, JSON or "
              f"chart was written.", file=sys.stderr)
        return NO_GPU_STATUS
    from msda_labs.student import runtime

    runtime.configure("gpu")
    ops = _operators(args)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    bandwidth = copy_bandwidth_gbs()
    rows = []
    for preset in args.presets:
        for dtype_name in args.dtypes:
            row = measure_case(ops, preset, dtype_name, _reference_fp32)
            _add_floors(row, bandwidth)
            rows.append(row)
            print(_summary(preset, dtype_name, row), flush=True)
            # Rows so far, so that a run cut short still leaves its measurements behind.
            (out_dir / "bench.partial.json").write_text(
                json.dumps(_result(ops, args, bandwidth, rows, started), indent=2))
    table = write_outputs(_result(ops, args, bandwidth, rows, started), out_dir)
    (out_dir / "bench.partial.json").unlink(missing_ok=True)
    print()
    print(table)
    wrong = [f"{r['preset']}/{r['dtype']}" for r in rows if not r["ops"]["kit"].get("correct")]
    if wrong:
        print(f"the kit's operator missed the reference on {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


def main() -> None:
    raise SystemExit(run())


if __name__ == "__main__":
    main()
