"""The kernels lab 10 ships (msda_labs.student.shipped), in Triton's
interpreter, and where they may go.

The lab 10 exam grades them through ``msda``; these tests pin the launch options the exam does
not reach: both launch orders, forced int64 offsets, several tiles, and ``level_start_index``
derived on the device. The export rule keeps their source (the answers of labs 05-08) out of
the repositories of earlier labs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_kernels_match_the_reference_in_every_launch_option():
    code = """
        import torch
        from msda_labs.student import shipped
        from msda_labs.truth.cases import MULTI_LEVEL, OUT_OF_BOUNDS, EXACT_KNOTS, make_inputs
        from msda_labs.truth.reference import msda_reference, reference_grads

        def rel(a, b):
            return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))

        for case in (MULTI_LEVEL, OUT_OF_BOUNDS, EXACT_KNOTS):
            v, s, st, loc, a = make_inputs(case, torch.float32)
            ref = msda_reference(v.double(), s, loc.double(), a.double())
            go = torch.randn(ref.shape, generator=torch.Generator().manual_seed(3))
            refs = reference_grads(v, s, loc, a, go)
            for order in (0, 1):
                for block_q in (1, 4):
                    out = shipped.msda_forward(v, s, None, loc, a, config={
                        "BLOCK_Q": block_q, "num_warps": 4, "ORDER": order})
                    assert rel(out, ref) < 1e-5, (case.id, order, block_q, rel(out, ref))
                    grads = shipped.msda_backward(v, s, st, loc, a, go, BLOCK_Q=block_q,
                                                  order=order)
                    for g, r in zip(grads, refs):
                        assert rel(g, r) < 1e-5, (case.id, order, block_q, rel(g, r))
            # The int64 offset path gives the same answer as the int32 one.
            real = shipped._needs_int64
            shipped._needs_int64 = lambda *args: True
            try:
                out = shipped.msda_forward(v, s, st, loc, a)
                grads = shipped.msda_backward(v, s, st, loc, a, go)
            finally:
                shipped._needs_int64 = real
            assert rel(out, ref) < 1e-5
            for g, r in zip(grads, refs):
                assert rel(g, r) < 1e-5
        print("ok")
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT / "shared"), TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), \
        f"the shipped kernels disagree with the reference:\n{res.stdout}\n{res.stderr}"


def test_exports_of_earlier_labs_leave_the_shipped_kernels_out():
    from msda_labs.classroom.export import _ignore

    folder = str(ROOT / "shared" / "msda_labs" / "student")  # where the kernels live
    assert (Path(folder) / "shipped_kernels.py").is_file(), folder
    names = ["shipped.py", "shipped_kernels.py", "runtime.py"]
    kernels = {"shipped.py", "shipped_kernels.py"}
    for lab in (5, 8, 9):
        kept = kernels - _ignore(lab)(folder, names)
        assert not kept, f"lab {lab} export keeps {sorted(kept)}"
    assert not kernels & _ignore(10)(folder, names), "the lab 10 export needs both modules"
    assert "runtime.py" not in _ignore(5)(folder, names)
