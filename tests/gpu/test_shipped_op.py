"""The shipped operator as a torch.library op (msda_labs.student.shipped_op).

* CPU (always runs, one subprocess under Triton's interpreter, about 20 s): ``opcheck`` of both
  ops (schema, fake tensors, autograd registration, AOT dispatch), ``torch.compile(fullgraph=True)``
  of a module that calls :func:`msda` with Dynamo's graph-break counter at 0 and the op seen
  whole in the graph, and the eager path, the op path and the float64 truth agreeing.
* CUDA (skipped without a GPU, saying so): ``opcheck`` on the device, a compiled module with
  CUDA graphs (``reduce-overhead``) equal to eager, and the eager forward + backward captured in
  a ``torch.cuda.CUDAGraph`` with sync debugging set to raise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU: CUDA graphs and the device kernels "
                                       "can only be checked on one")

# A small problem: 2 levels, the second one 1 pixel wide, some locations outside the map.
CASE = """
import torch


def case(device, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    B, Q, M, D, K = 2, 5, 2, 4, 2
    levels = [[3, 4], [2, 1]]
    S = sum(h * w for h, w in levels)
    L = len(levels)
    value = torch.randn(B, S, M, D, generator=gen)
    loc = torch.rand(B, Q, M, L, K, 2, generator=gen) * 1.2 - 0.1
    attn = torch.rand(B, Q, M, L, K, generator=gen)
    shapes = torch.tensor(levels)
    starts = torch.tensor([0, 12])
    to = dict(device=device, dtype=dtype)
    return (value.to(**to), shapes.to(device), starts.to(device), loc.to(**to), attn.to(**to),
            torch.randn(B, Q, M * D, generator=gen).to(**to))
"""


def _run(code: str, env_extra: dict) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "shared"), **env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=600)


CPU_CHECKS = CASE + """
import json
from torch._dynamo.utils import counters
from msda_labs.student.shipped_op import msda, msda_op, msda_backward_op
from msda_labs.truth.reference import msda_float64, reference_grads

report = {}
value, shapes, starts, loc, attn, grad_out = case("cpu")
leaves = [t.clone().requires_grad_(True) for t in (value, loc, attn)]
for name, level_starts in (("starts", starts), ("no_starts", None)):
    torch.library.opcheck(msda_op, (leaves[0], shapes, level_starts, leaves[1], leaves[2], False))
    torch.library.opcheck(msda_backward_op, (value, shapes, level_starts, loc, attn, grad_out,
                                             False))
    report["opcheck_" + name] = "passed"

# eager path (autograd.Function) == op path, and both == the float64 truth
def grads(fn):
    v, lo, at = (t.clone().requires_grad_(True) for t in (value, loc, attn))
    out = fn(v, shapes, starts, lo, at)
    return [out.detach()] + list(torch.autograd.grad(out, (v, lo, at), grad_out))

eager = grads(msda)
op = grads(lambda *a: msda_op(*a, False))
truth = [msda_float64(value, shapes, loc, attn)] + list(
    reference_grads(value, shapes, loc, attn, grad_out))
report["eager_equals_op"] = all(torch.equal(a, b) for a, b in zip(eager, op))
report["max_err_vs_truth"] = max(float((a.double() - b.double()).abs().max())
                                 for a, b in zip(eager, truth))

# torch.compile(fullgraph=True): no graph break, and the op is one node of the graph
seen = []
def recording_backend(gm, example_inputs):
    seen.extend(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
    from torch._dynamo.backends.common import aot_autograd
    return aot_autograd(fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g)(gm,
                                                                              example_inputs)

class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, value, shapes, starts, loc, attn):
        return msda(self.proj(value), shapes, starts, loc, attn.softmax(-1)).relu()

torch.manual_seed(0)
layer = Layer()
counters.clear()
compiled = torch.compile(layer, backend=recording_backend, fullgraph=True)
v, lo, at = (t.clone().requires_grad_(True) for t in (value, loc, attn))
out = compiled(v, shapes, starts, lo, at)
compiled_grads = torch.autograd.grad(out, (v, lo, at), grad_out)
v2, lo2, at2 = (t.clone().requires_grad_(True) for t in (value, loc, attn))
ref = layer(v2, shapes, starts, lo2, at2)
ref_grads = torch.autograd.grad(ref, (v2, lo2, at2), grad_out)
report["graph_breaks"] = sum(counters["graph_break"].values())
report["op_in_graph"] = any("msda_labs.msda" in t for t in seen)
report["compiled_max_diff"] = max(float((a - b).abs().max()) for a, b in
                                  zip([out] + list(compiled_grads), [ref] + list(ref_grads)))
print("REPORT" + json.dumps(report))
"""


def _report(proc) -> dict:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT"):])


def test_op_passes_opcheck_and_compiles_without_graph_breaks():
    report = _report(_run(CPU_CHECKS, {"TRITON_INTERPRET": "1"}))
    assert report["opcheck_starts"] == report["opcheck_no_starts"] == "passed"
    assert report["eager_equals_op"], report
    assert report["max_err_vs_truth"] < 1e-5, report
    assert report["graph_breaks"] == 0, report
    assert report["op_in_graph"], report
    assert report["compiled_max_diff"] < 1e-5, report


def test_a_peer_called_through_opaque_code_is_counted_as_a_graph_break():
    """The counter the bench reports can see a break: an op that reads a value on the host."""
    code = """
        import json
        from torch._dynamo.utils import counters
        from msda_labs.student.shipped_op import msda

        def host_reading(value, shapes, starts, loc, attn):
            if float(attn.sum()) > 0:  # a host read of a device value
                return msda(value, shapes, starts, loc, attn)
            return msda(value, shapes, starts, loc, -attn)

        value, shapes, starts, loc, attn, _ = case("cpu")
        counters.clear()
        torch.compile(host_reading, backend="eager")(value, shapes, starts, loc, attn)
        print("REPORT" + json.dumps({"graph_breaks": sum(counters["graph_break"].values())}))
    """
    proc = _run(CASE + textwrap.dedent(code), {"TRITON_INTERPRET": "1"})
    assert _report(proc)["graph_breaks"] >= 1


GPU_CHECKS = CASE + """
import json
from msda_labs.student.shipped_op import msda, msda_op, msda_backward_op

report = {}
value, shapes, starts, loc, attn, grad_out = case("cuda")
torch.library.opcheck(msda_op, (value.requires_grad_(True), shapes, starts,
                                loc.requires_grad_(True), attn.requires_grad_(True), False))
value, loc, attn = (t.detach() for t in (value, loc, attn))
torch.library.opcheck(msda_backward_op, (value, shapes, None, loc, attn, grad_out, False))

class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, value, shapes, starts, loc, attn):
        return msda(self.proj(value), shapes, starts, loc, attn.softmax(-1))

layer = Layer().cuda()
def run(module):
    v, lo, at = (t.clone().requires_grad_(True) for t in (value, loc, attn))
    out = module(v, shapes, starts, lo, at)
    return [out.detach().clone()] + [g.clone() for g in torch.autograd.grad(out, (v, lo, at),
                                                                            grad_out)]
eager = run(layer)
compiled = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
for _ in range(3):
    torch.compiler.cudagraph_mark_step_begin()
    got = run(compiled)
report["graphed_max_diff"] = max(float((a - b).abs().max()) for a, b in zip(got, eager))

# eager forward + backward inside a CUDA graph, syncs raising
v, lo, at = (t.clone().requires_grad_(True) for t in (value, loc, attn))
def step():
    out = msda(v, shapes, starts, lo, at)
    return torch.autograd.grad(out, (v, lo, at), grad_out)
stream = torch.cuda.Stream()
stream.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(stream):
    for _ in range(2):
        step()
torch.cuda.current_stream().wait_stream(stream)
graph = torch.cuda.CUDAGraph()
torch.cuda.set_sync_debug_mode("error")
with torch.cuda.graph(graph):
    captured = step()
torch.cuda.set_sync_debug_mode(0)
graph.replay()
expected = step()
report["captured_max_diff"] = max(float((a - b).abs().max()) for a, b in zip(captured, expected))
print("REPORT" + json.dumps(report))
"""


@needs_cuda
def test_op_on_the_device_compiles_with_cuda_graphs_and_captures():
    report = _report(_run(GPU_CHECKS, {"TRITON_INTERPRET": "0"}))
    assert report["graphed_max_diff"] < 1e-5, report
    assert report["captured_max_diff"] < 1e-5, report
