"""The shipped operator (lab 10 chip) never waits for the device.

* CPU (always runs): validation and the launch preparation never read a value of a device
  tensor. Tensors on the ``meta`` device have shapes, dtypes and a device but no data: any
  ``.item()``, ``.tolist()``, ``int(t)``, ``bool(t)`` or ``.cpu()`` on them raises. So the host
  side of ``msda`` runs on meta tensors (in the interpreter mode, which accepts any device).
* CUDA (skipped without a GPU, saying so): the forward, and the forward + backward, are
  captured in a ``torch.cuda.CUDAGraph`` and replayed on fresh inputs; the replay must equal an
  eager call. ``torch.cuda.set_sync_debug_mode("error")`` makes any synchronizing call inside
  ``msda`` raise. ``torch.compile(fullgraph=True)`` of a module that calls ``msda`` must compile
  and match where the installed torch supports user Triton kernels in compiled graphs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU: CUDA-graph capture and compiled graphs "
                                       "of the operator can only be checked on one")


def _run_python(code: str, env_extra: dict) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "shared"), **env_extra)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_host_side_reads_no_device_values():
    """validate_inputs and the launchers' preparation on meta tensors: no value is ever read."""
    code = """
        import torch
        from msda_labs.chips import lab10
        from msda_labs.student import shipped
        B, Q, M, D, L, K = 2, 5, 2, 4, 2, 2
        meta = dict(device="meta")
        value = torch.empty(B, 20, M, D, **meta)
        shapes = torch.empty(L, 2, dtype=torch.int64, **meta)
        starts = torch.empty(L, dtype=torch.int64, **meta)
        loc = torch.empty(B, Q, M, L, K, 2, **meta)
        attn = torch.empty(B, Q, M, L, K, **meta)
        lab10.validate_inputs(value, shapes, starts, loc, attn)
        lab10.validate_inputs(value, shapes, None, loc, attn)
        prepared = shipped._prepare(value, shapes, None, loc, attn)
        assert prepared[2].shape == (L,) and prepared[2].device.type == "meta"
        # The same tensors on the host: the pixel count is checked there (it costs no sync).
        try:
            lab10.validate_inputs(torch.zeros(B, 20, M, D), torch.tensor([[3, 4], [2, 3]]),
                                  None, torch.zeros(B, Q, M, L, K, 2), torch.zeros(B, Q, M, L, K))
        except ValueError as exc:
            assert "S = 18" in str(exc) and "S = 20" in str(exc), exc
        else:
            raise AssertionError("a host spatial_shapes with the wrong pixel count passed")
        print("ok")
    """
    res = _run_python(code, {"TRITON_INTERPRET": "1"})
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), \
        f"the host side of msda read a device value (or failed):\n{res.stdout}\n{res.stderr}"


def _inputs(case_b=2, q=50, dtype=torch.float32, seed=0):
    from msda_labs.truth.cases import Case, make_inputs

    case = Case("capture", B=case_b, Q=q, M=4, D=32, shapes=((24, 32), (12, 16), (6, 8)), K=4,
                seed=seed)
    return make_inputs(case, dtype, "cuda")


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["fp32", "fp16", "bf16"])
def test_forward_and_backward_capture_in_a_cuda_graph(dtype):
    from msda_labs.student import runtime

    runtime.configure("gpu")
    from msda_labs.chips.lab10 import msda

    value, shapes, starts, loc, attn = _inputs(dtype=dtype)
    leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
    grad_out = torch.randn(value.shape[0], loc.shape[1], value.shape[2] * value.shape[3],
                           device="cuda", dtype=dtype)

    def step():
        out = msda(leaves[0], shapes, starts, leaves[1], leaves[2])
        return (out, *torch.autograd.grad(out, leaves, grad_out))

    # Warm up on a side stream (compilation and the autotuner's trials happen here).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    fwd_graph, step_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.cuda.graph(fwd_graph):
            with torch.no_grad():
                fwd_static = msda(leaves[0], shapes, starts, leaves[1], leaves[2])
        with torch.cuda.graph(step_graph):
            step_static = step()
    finally:
        torch.cuda.set_sync_debug_mode("default")

    # New values in the captured input buffers, then replay; compare with eager calls.
    fresh = _inputs(dtype=dtype, seed=5)
    with torch.no_grad():
        for leaf, new in zip(leaves, (fresh[0], fresh[3], fresh[4])):
            leaf.copy_(new)
    fwd_graph.replay()
    step_graph.replay()
    torch.cuda.synchronize()
    eager = step()
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(fwd_static, eager[0], **tol)
    torch.testing.assert_close(step_static[0], eager[0], **tol)
    for got, want in zip(step_static[1:], eager[1:]):
        # Atomics add in a different order each run: compare with a backward tolerance.
        scale = want.float().abs().max().clamp_min(1.0)
        assert float((got.float() - want.float()).abs().max() / scale) < \
            (1e-4 if dtype == torch.float32 else 5e-2)


@needs_cuda
def test_eager_calls_never_synchronize():
    from msda_labs.student import runtime

    runtime.configure("gpu")
    from msda_labs.chips.lab10 import msda

    value, shapes, starts, loc, attn = _inputs()
    leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
    out = msda(leaves[0], shapes, None, leaves[1], leaves[2])  # warm-up, autotune
    torch.autograd.grad(out.sum(), leaves)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for starts_arg in (starts, None):
            out = msda(leaves[0], shapes, starts_arg, leaves[1], leaves[2])
            torch.autograd.grad(out, leaves, torch.ones_like(out))
    finally:
        torch.cuda.set_sync_debug_mode("default")


@needs_cuda
def test_torch_compile_fullgraph_matches_eager():
    from msda_labs.student import runtime

    runtime.configure("gpu")
    from msda_labs.chips.lab10 import msda

    if not hasattr(torch, "compile"):
        pytest.skip(f"torch {torch.__version__} has no torch.compile")

    class Attention(torch.nn.Module):
        def forward(self, value, shapes, starts, loc, attn):
            return msda(value, shapes, starts, loc, attn) * 2.0

    value, shapes, starts, loc, attn = _inputs()
    module = Attention()
    eager = module(value, shapes, starts, loc, attn)
    compiled = torch.compile(module, fullgraph=True)
    got = compiled(value, shapes, starts, loc, attn)
    torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-5)
    leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
    out = compiled(leaves[0], shapes, starts, leaves[1], leaves[2])
    grads = torch.autograd.grad(out.sum(), leaves)
    ref_leaves = [t.detach().clone().requires_grad_(True) for t in (value, loc, attn)]
    ref = module(ref_leaves[0], shapes, starts, ref_leaves[1], ref_leaves[2])
    ref_grads = torch.autograd.grad(ref.sum(), ref_leaves)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
