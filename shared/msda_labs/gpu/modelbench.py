"""The operator where users run it: a Deformable-DETR training step, eager and compiled.

    python -m msda_labs.gpu.modelbench --out DIR [--peer name=module:function ...]

The model is :class:`msda_labs.gpu.detr_model.DeformableDetrTransformer` at Deformable DETR's
sizes (6 encoder and 6 decoder layers, d_model 256, 8 heads, 4 levels, 4 points, the levels of
an 800 x 1333 image, batch 2, 300 queries), fp32. What is timed is one training step: forward,
backward and a fused AdamW step, gradients set to None before each.

Each operator (the kit's :func:`msda_labs.student.shipped_op.msda`, the PyTorch reference, and
any peer with mmcv's argument order) runs in each mode:

* ``eager``;
* ``default``: ``torch.compile`` of every encoder and decoder layer (regional compilation:
  the layers of a stack share one compiled graph);
* ``reduce-overhead``: the same, compiled with CUDA graphs.

Before anything is timed, one step of every (operator, mode) runs on its own copy of the same
weights and inputs, and its loss and every parameter's gradient are compared with the eager
reference's (relative L2 error at most :data:`TOLERANCE`); the compile happens in that step, and
the graph breaks Dynamo counted while compiling are reported per (operator, mode). Then every
(operator, mode) is warmed up, and the timed rounds alternate between them (the order rotated
each round), ``--steps`` steps per round: the median round counts. Everything runs in one
process. ``--decoder-host`` adds the op-level decoder step's host time (forward + backward at
opbench's decoder preset, host µs per call) for each operator, eager, and for the kit's custom
op called through the dispatcher.

Without a CUDA device the bench measures nothing unless ``--device cpu`` is given (a check of
the harness at ``--tiny`` sizes, with ``--backend aot_eager``; no CUDA graphs).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from msda_labs.gpu.detr_model import (
    DeformableAttention,
    DeformableDetrTransformer,
    DetrConfig,
    make_inputs,
    trained_like,
)

MODES = ("eager", "default", "reduce-overhead")
TOLERANCE = 1e-3  # relative L2 error of the loss and of each gradient, fp32, after 12 layers
NO_GPU_STATUS = 2
TINY = DetrConfig(d_model=16, heads=2, points=2, ffn=32, encoder_layers=1, decoder_layers=1,
                  queries=5, batch=1, levels=((4, 5), (2, 3)))


def kit_op():
    from msda_labs.student.shipped_op import msda

    return msda


def kit_custom_op():
    """The kit's op through the dispatcher even in eager mode (``torch.ops.msda_labs.msda``)."""
    from msda_labs.student.shipped_op import msda_op

    return msda_op


def lab10_op():
    """Lab 10's operator (the chip): validation, then its autograd.Function."""
    from msda_labs.chips.lab10 import msda

    return msda


def reference_op(levels):
    """The PyTorch reference (one ``grid_sample`` per level, as
    :func:`msda_labs.truth.reference.msda_reference` and Deformable DETR's pure-PyTorch path),
    with the level sizes as host integers, so that compiling it reads no device value."""
    import torch
    import torch.nn.functional as F

    sizes = [h * w for h, w in levels]

    def reference(value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights):
        B, _, M, D = value.shape
        _, Q, _, L, K, _ = sampling_locations.shape
        grids = 2 * sampling_locations - 1
        sampled = []
        for lvl, part in enumerate(value.split(sizes, dim=1)):
            h, w = levels[lvl]
            image = part.permute(0, 2, 3, 1).reshape(B * M, D, h, w)
            grid = grids[:, :, :, lvl].permute(0, 2, 1, 3, 4).reshape(B * M, Q, K, 2)
            sampled.append(F.grid_sample(image, grid, mode="bilinear", padding_mode="zeros",
                                         align_corners=False))
        weights = attention_weights.permute(0, 2, 1, 3, 4).reshape(B * M, 1, Q, L * K)
        out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1)
        return out.view(B, M, D, Q).permute(0, 3, 1, 2).reshape(B, Q, M * D)

    return reference


def load_peer(spec: str):
    """``name=module:function`` (or ``module:function``) -> (name, callable)."""
    import importlib

    name, _, target = spec.rpartition("=")
    module_name, _, func_name = target.partition(":")
    module = importlib.import_module(module_name)
    return (name or module_name.split(".")[0]), getattr(module, func_name)


def with_sample(model, sample):
    """``model`` with every deformable attention calling ``sample``."""
    for module in model.modules():
        if isinstance(module, DeformableAttention):
            module.sample = sample
    return model


def compile_layers(model, mode: str, backend: str):
    """Regional compilation: every encoder and decoder layer compiled in place."""
    options = {"backend": backend}
    if backend == "inductor" and mode != "default":
        options["mode"] = mode
    for layer in list(model.encoder) + list(model.decoder):
        layer.compile(**options)
    return model


class Contender:
    """One (operator, mode): its model copy, optimizer and step."""

    def __init__(self, op_name, sample, mode, base, inputs, backend, device):
        import torch

        self.op, self.mode, self.inputs = op_name, mode, inputs
        self.model = with_sample(copy.deepcopy(base), sample)
        if mode != "eager":
            compile_layers(self.model, mode, backend)
        self.graphed = mode == "reduce-overhead"
        fused = {"fused": True} if device == "cuda" else {}
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, **fused)

    @property
    def name(self) -> str:
        return f"{self.op}/{self.mode}"

    def loss_and_grads(self):
        """One forward and backward, no optimizer step: the loss and every gradient."""
        import torch

        if self.graphed:
            torch.compiler.cudagraph_mark_step_begin()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.model(*self.inputs)
        loss.backward()
        return (loss.detach().clone(),
                {n: p.grad.detach().clone() for n, p in self.model.named_parameters()})

    def step(self):
        import torch

        if self.graphed:
            torch.compiler.cudagraph_mark_step_begin()
        self.optimizer.zero_grad(set_to_none=True)
        self.model(*self.inputs).backward()
        self.optimizer.step()


def rel_err(got, ref) -> float:
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    if not bool(got.isfinite().all()):
        return float("inf")
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


def check(contender, reference) -> dict:
    """The contender's first step against the eager reference's: the loss, the largest
    gradient error, and the graph breaks Dynamo counted while compiling."""
    from torch._dynamo.utils import counters

    counters.clear()
    loss, grads = contender.loss_and_grads()
    breaks = sum(counters["graph_break"].values())
    graphs = counters["stats"].get("unique_graphs", 0)
    ref_loss, ref_grads = reference
    errors = {name: rel_err(grads[name], ref_grads[name]) for name in ref_grads}
    worst = max(errors, key=errors.get)
    return {"loss_rel_err": rel_err(loss, ref_loss), "worst_grad": worst,
            "worst_grad_rel_err": errors[worst],
            "correct": rel_err(loss, ref_loss) <= TOLERANCE and errors[worst] <= TOLERANCE,
            "graph_breaks": breaks if contender.mode != "eager" else None,
            "graph_break_reasons": sorted(set(map(str, counters["graph_break"])))[:5],
            "compiled_graphs": graphs if contender.mode != "eager" else None}


def timed_ms(step, steps: int, sync) -> float:
    """Milliseconds per step: ``steps`` steps between two device syncs."""
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - start) / steps * 1e3


def decoder_host_us(ops: dict, rounds: int, calls: int) -> dict:
    """Op-level decoder step (opbench's decoder preset, fp32), eager: host µs per call of the
    forward + ``autograd.grad``, alternating rounds, medians."""
    import torch

    from msda_labs.gpu.opbench import make_preset_inputs
    from msda_labs.gpu.opbench_host import _host_us

    value, shapes, starts, loc, attn = make_preset_inputs("decoder", torch.float32, "cuda")
    leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
    grad_out = torch.randn(value.shape[0], loc.shape[1], value.shape[2] * value.shape[3],
                           device="cuda")
    timed = {}
    for name, fn in ops.items():
        def forward(fn=fn):
            return fn(leaves[0], shapes, starts, leaves[1], leaves[2])

        def step(forward=forward):
            torch.autograd.grad(forward(), leaves, grad_out)

        for _ in range(20):
            step()
        timed[name] = {"fwd": forward, "step": step}
    samples = {name: {"fwd": [], "step": []} for name in timed}
    for _ in range(rounds):
        for name, calls_of in timed.items():
            for part, fn in calls_of.items():
                samples[name][part].append(_host_us(fn, calls))
    return {name: {"median_us": {k: statistics.median(v) for k, v in s.items()}, "samples_us": s}
            for name, s in samples.items()}


def wrapper_host_us(device: str, rounds: int, calls: int) -> dict:
    """Host µs per forward + ``autograd.grad`` of each eager path of the kit at the decoder's
    sizes (B=4, Q=300, M=8, D=32, L=4, K=4; a small value), with the two kernel launches replaced
    by bare allocations of their outputs: what remains is each path's own host work (validation,
    autograd, the dispatcher, the launchers' preparation). Alternating rounds, medians."""
    from unittest import mock

    import torch

    from msda_labs.chips import lab10
    from msda_labs.student import shipped
    from msda_labs.student.shipped_op import msda, msda_op

    def forward(value, spatial_shapes, level_start_index, loc, attn, config=None):
        B, _, M, D = value.shape
        return value.new_empty(B, loc.shape[1], M * D)

    def backward(value, spatial_shapes, level_start_index, loc, attn, grad_out, *args, **kw):
        return value.new_empty(value.shape), loc.new_empty(loc.shape), attn.new_empty(attn.shape)

    B, Q, M, D, L, K = 4, 300, 8, 32, 4, 4
    levels = [[4, 8], [2, 8], [2, 4], [1, 8]]
    shapes = torch.tensor(levels, device=device)
    starts = torch.tensor([0, 32, 48, 56], device=device)
    leaves = [torch.randn(*shape, device=device, requires_grad=True)
              for shape in ((B, 64, M, D), (B, Q, M, L, K, 2), (B, Q, M, L, K))]
    grad_out = torch.randn(B, Q, M * D, device=device)
    paths = {"kit (autograd.Function)": msda,
             "kit-op (dispatcher, register_autograd)": lambda *a: msda_op(*a, False),
             "lab10 (validation, autograd.Function)": lab10.msda}
    samples = {name: [] for name in paths}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with mock.patch.object(shipped, "_forward_launch", forward), \
            mock.patch.object(shipped, "_backward_launch", backward), \
            mock.patch.object(lab10, "msda_forward", forward), \
            mock.patch.object(lab10, "msda_backward", backward):
        for _ in range(rounds):
            for name, fn in paths.items():
                def step(fn=fn):
                    out = fn(leaves[0], shapes, starts, leaves[1], leaves[2])
                    torch.autograd.grad(out, leaves, grad_out)

                for _ in range(20):
                    step()
                samples[name].append(timed_ms(step, calls, sync) * 1e3)
    return {name: {"median_us": statistics.median(s), "samples_us": s}
            for name, s in samples.items()}


def _parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m msda_labs.gpu.modelbench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="append", default=[],
                        help="name=module:function with mmcv's argument order (repeatable)")
    parser.add_argument("--ops", default="kit,reference",
                        help="the kit's operators and the reference to include")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5, help="steps per timed round")
    parser.add_argument("--warmup", type=int, default=3, help="steps after the checked one")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--tiny", action="store_true", help="a one-layer model at toy sizes")
    parser.add_argument("--decoder-host", type=int, default=0, metavar="ROUNDS",
                        help="also the op-level decoder step's host time, ROUNDS rounds")
    parser.add_argument("--check-budget-s", type=float, default=0.0,
                        help="start no further check (compile) after this many seconds")
    parser.add_argument("--time-budget-s", type=float, default=0.0,
                        help="start no further timed round after this many seconds")
    parser.add_argument("--wrapper-host", type=int, default=0, metavar="ROUNDS",
                        help="also the host time of each eager path with its two launches "
                             "replaced by allocations (CPU or GPU), ROUNDS rounds")
    parser.add_argument("--out", default="modelbench-results")
    return parser.parse_args(argv)


def _operators(args, cfg) -> dict:
    ops = {}
    for name in args.ops.split(","):
        ops[name] = {"kit": kit_op, "kit-op": kit_custom_op,
                     "reference": lambda: reference_op(cfg.levels)}[name]()
    for spec in args.peer:
        try:
            name, fn = load_peer(spec)
        except Exception as exc:  # noqa: BLE001 - a peer that is not there is reported
            print(f"peer {spec}: not loaded ({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        ops[name] = fn
    return ops


def run(argv=None) -> int:
    args = _parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no GPU: nothing measured (modelbench times a CUDA training step; --device cpu "
              "--tiny checks the harness)", file=sys.stderr)
        return NO_GPU_STATUS
    for knob in ("cache_size_limit", "recompile_limit"):  # one entry per (operator, mode)
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    started = time.time()
    cfg = TINY if args.tiny else DetrConfig()
    modes = [m for m in args.modes.split(",") if m]
    torch.manual_seed(0)
    base = trained_like(DeformableDetrTransformer(cfg, sample=None)).to(args.device)
    inputs = make_inputs(cfg, args.device)
    ops = _operators(args, cfg)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    result = {"device": torch.cuda.get_device_name() if args.device == "cuda" else
              platform.processor() or "cpu", "torch": torch.__version__,
              "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
              "modes": modes, "rounds": args.rounds, "steps": args.steps,
              "backend": args.backend, "contenders": {}}
    reference = Contender("reference", reference_op(cfg.levels), "eager", base, inputs,
                          args.backend, args.device).loss_and_grads()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    def save():
        (out_dir / "modelbench.json").write_text(json.dumps(result, indent=1))

    contenders = []
    # Mode by mode (every operator eager first), the kit first in each: should the checks'
    # budget run out, what is left out is a compiled mode of the last operators.
    for mode, (op_name, fn) in ((m, op) for m in modes for op in ops.items()):
        entry = result["contenders"][f"{op_name}/{mode}"] = {"op": op_name, "mode": mode}
        if args.check_budget_s and time.time() - started > args.check_budget_s:
            entry["error"] = f"not run: {args.check_budget_s:.0f} s of checks were spent"
            continue
        try:
            contender = Contender(op_name, fn, mode, base, inputs, args.backend,
                                  args.device)
            t0 = time.perf_counter()
            entry.update(check(contender, reference))
            entry["first_step_s"] = time.perf_counter() - t0
            entry["warmup_ms"] = [timed_ms(contender.step, 1, sync) for _ in range(args.warmup)]
        except Exception as exc:  # noqa: BLE001 - reported, and the others go on
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
            print(f"{op_name}/{mode}: {entry['error']}", file=sys.stderr)
            continue
        print(f"{contender.name}: checked ({entry['worst_grad_rel_err']:.1e} worst grad "
              f"error, {entry['graph_breaks']} graph breaks, first step "
              f"{entry['first_step_s']:.1f} s)", flush=True)
        if entry["correct"]:
            contenders.append(contender)
        save()
    save()
    # One untimed round of every pair before the timed ones: a pair compiled before the others
    # can compile again once they are (on an H100 the first timed round of the compiled pairs
    # ran at 1.8-11.6 s a step, their warm-up steps right after their own compile did not see
    # it), and that time belongs to no timed round.
    result["warm_round_ms"] = {c.name: timed_ms(c.step, 1, sync) for c in contenders}
    save()
    samples = {c.name: [] for c in contenders}
    for r in range(args.rounds):
        if r and args.time_budget_s and time.time() - started > args.time_budget_s:
            result["rounds_run"] = r  # the run's time budget was spent: fewer rounds
            break
        shift = r % max(len(contenders), 1)
        for contender in contenders[shift:] + contenders[:shift]:
            samples[contender.name].append(timed_ms(contender.step, args.steps, sync))
        print(f"round {r + 1}: " + ", ".join(f"{n} {s[-1]:.2f}" for n, s in samples.items()),
              flush=True)
        result["samples_so_far"] = samples
        save()
    result.pop("samples_so_far", None)
    for name, s in samples.items():
        result["contenders"][name].update(step_ms=statistics.median(s), samples_ms=s)
    _ratios(result)
    if args.decoder_host and args.device == "cuda":
        host_ops = {name: fn for name, fn in ops.items() if name != "reference"}
        host_ops["kit-op"] = kit_custom_op()
        host_ops["lab10"] = lab10_op()
        result["decoder_host"] = decoder_host_us(host_ops, args.decoder_host, 200)
    if args.wrapper_host:
        result["wrapper_host"] = wrapper_host_us(args.device, args.wrapper_host, 300)
    result["seconds"] = time.time() - started
    save()
    table = build_table(result)
    (out_dir / "modelbench.md").write_text(table)
    print(table)
    kit = [e for e in result["contenders"].values() if e["op"] == "kit"]
    return 0 if kit and all(e.get("correct") for e in kit) else 1


def _ratios(result: dict) -> None:
    """Each contender's step time over the kit's in the same mode, per round (median)."""
    entries = result["contenders"]
    for entry in entries.values():
        kit = entries.get(f"kit/{entry['mode']}")
        if entry["op"] == "kit" or not kit or "samples_ms" not in kit \
                or "samples_ms" not in entry:
            continue
        entry["over_kit"] = statistics.median(
            a / b for a, b in zip(entry["samples_ms"], kit["samples_ms"]))


def build_table(result: dict) -> str:
    """Markdown: one row per operator, one column group per mode."""
    modes = result["modes"]
    ops = list(dict.fromkeys(e["op"] for e in result["contenders"].values()))
    head = "| operator | " + " | ".join(f"{m}: ms/step | {m}: graph breaks" for m in modes)
    lines = [head + " |", "|---|" + "---|---|" * len(modes)]
    for op in ops:
        cells = []
        for mode in modes:
            entry = result["contenders"].get(f"{op}/{mode}", {})
            if "error" in entry:
                cells += ["error", "-"]
                continue
            ms = entry.get("step_ms")
            text = "wrong" if not entry.get("correct") else (f"{ms:.2f}" if ms else "-")
            if ms and "over_kit" in entry:
                text += f" ({entry['over_kit']:.2f}x kit)"
            breaks = entry.get("graph_breaks")
            cells += [text, "-" if breaks is None else str(breaks)]
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    if "wrapper_host" in result:
        lines += ["", "| eager path, launches replaced by allocations | host µs per step |",
                  "|---|---|"]
        lines += [f"| {name} | {entry['median_us']:.1f} |"
                  for name, entry in result["wrapper_host"].items()]
    if "decoder_host" in result:
        lines += ["", "| operator | decoder op, eager: forward host µs | forward + backward |",
                  "|---|---|---|"]
        lines += [f"| {name} | {entry['median_us']['fwd']:.1f} | {entry['median_us']['step']:.1f} |"
                  for name, entry in result["decoder_host"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    raise SystemExit(run())


if __name__ == "__main__":
    main()
