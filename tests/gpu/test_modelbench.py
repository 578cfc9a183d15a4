"""The model-level bench (msda_labs.gpu.modelbench) and its Deformable-DETR model, on the CPU.

One subprocess under Triton's interpreter (about 30 s of CPU) runs the bench at its tiny size
(one encoder and one decoder layer, two small levels) with the kit's operator, the reference and
a wrong peer, eager and compiled (``aot_eager``: no CUDA graphs on a CPU): the kit's step must
match the reference's, compile with 0 graph breaks and be timed; the wrong peer must be reported
wrong and not timed. The model itself is checked against lab 00's float64 layer truth.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

WRONG_PEER = '''
from msda_labs.gpu.modelbench import TINY, reference_op

reference = reference_op(TINY.levels)


def off_by_a_percent(value, spatial_shapes, level_start_index, sampling_locations,
                     attention_weights):
    return reference(value, spatial_shapes, level_start_index, sampling_locations,
                     attention_weights) * 1.01
'''


def test_tiny_bench_checks_counts_and_times(tmp_path):
    (tmp_path / "wrong_peer.py").write_text(WRONG_PEER)
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "shared"), str(tmp_path)]))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "msda_labs.gpu.modelbench", "--device", "cpu", "--tiny",
         "--backend", "aot_eager", "--modes", "eager,default", "--rounds", "1", "--steps", "1",
         "--warmup", "1", "--wrapper-host", "1", "--ops", "kit,reference",
         "--peer", "wrong=wrong_peer:off_by_a_percent",
         "--out", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "modelbench.json").read_text())
    entries = result["contenders"]
    for mode in ("eager", "default"):
        kit, reference, wrong = (entries[f"{op}/{mode}"] for op in ("kit", "reference", "wrong"))
        assert kit["correct"] and kit["worst_grad_rel_err"] < 1e-5, kit
        assert reference["correct"], reference
        assert not wrong["correct"] and "step_ms" not in wrong, wrong
        assert kit["step_ms"] > 0 and len(kit["samples_ms"]) == 1, kit
    assert entries["kit/default"]["graph_breaks"] == 0, entries["kit/default"]
    assert entries["kit/default"]["compiled_graphs"] >= 2  # the encoder and the decoder layer
    assert entries["kit/eager"]["graph_breaks"] is None
    assert len(entries["kit/default"]["warmup_ms"]) == 1
    # one untimed round of every correct pair before the timed ones, the wrong peer left out
    assert set(result["warm_round_ms"]) == {f"{op}/{mode}" for op in ("kit", "reference")
                                            for mode in ("eager", "default")}
    assert set(result["wrapper_host"]) == {"kit (autograd.Function)",
                                           "kit-op (dispatcher, register_autograd)",
                                           "lab10 (validation, autograd.Function)"}
    assert "| kit |" in (out / "modelbench.md").read_text()


def test_model_attention_matches_the_layer_truth():
    """The model's deformable attention == lab 00's float64 MSDA cross-attention layer."""
    from msda_labs.gpu.detr_model import DeformableAttention, DetrConfig
    from msda_labs.gpu.modelbench import reference_op
    from msda_labs.truth.layers import msda_cross_attention

    levels = ((3, 4), (2, 3))
    cfg = DetrConfig(d_model=8, heads=2, points=2, levels=levels)
    torch.manual_seed(0)
    attention = DeformableAttention(cfg, reference_op(levels)).double()
    with torch.no_grad():
        for linear in (attention.sampling_offsets, attention.attention_weights):
            linear.weight.normal_(0, 0.3)
    query = torch.randn(2, 5, 8, dtype=torch.float64)
    source = torch.randn(2, 18, 8, dtype=torch.float64)
    ref = torch.rand(2, 5, 2, dtype=torch.float64)
    shapes = torch.tensor(levels)
    scale = 1.0 / shapes.flip(-1).double()
    got = attention(query, ref[:, :, None, :].expand(-1, -1, 2, -1), source, shapes, None, scale)
    state = {f"{name}.{kind}": getattr(getattr(attention, proj), kind).detach()
             for name, proj in (("value_proj", "value_proj"), ("offset_proj", "sampling_offsets"),
                                ("weight_proj", "attention_weights"), ("out_proj", "output_proj"))
             for kind in ("weight", "bias")}
    want = msda_cross_attention(state, query, ref, source, shapes, M=2, L=2, K=2)
    assert torch.allclose(got, want, atol=1e-10), (got - want).abs().max()
