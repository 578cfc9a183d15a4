"""Facts that some pictures draw, measured by running the course's own kernels.

Triton fixes its mode when it is first imported, and the facts need two of them, so each mode
runs in its own short Python process: ``python -m msda_labs.authoring.pictures.facts MODE``
prints one JSON object.

* ``interpret`` (Triton's interpreter, CPU): every lane of every load and store of the lab 04
  chip's ``copy2d`` on a small matrix (address, mask, program); the launch grid and block sizes
  of the lab 05 forward kernel on a small case (recorded at the launch, so the picture shows the
  grid the chip really uses); and what the racy histogram of lab 08 returns on a small case next
  to ``torch.bincount``.
* ``aot`` (the real compiler, no GPU): the PTX of the lab 08 backward kernel with a bfloat16
  ``grad_value`` for SM 8.0 and SM 9.0, compiled by lab 09's ``compile_backward``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

__all__ = ["GRID_CASE", "HISTOGRAM_CASE", "measure", "measure_all"]

# The small lab 05 case whose launch is recorded.
GRID_CASE = {"B": 2, "Q": 10, "M": 3, "D": 5, "K": 2, "shapes": [[4, 5], [2, 3]], "BLOCK_Q": 4}
# The small lab 04 case: copy2d of an R x C fp32 matrix in BLOCK x BLOCK tiles.
COPY_CASE = {"R": 5, "C": 7, "BLOCK": 4}
# The small lab 08 case: n indices into n_bins bins, BLOCK lanes per program.
HISTOGRAM_CASE = {"n": 40, "n_bins": 6, "BLOCK": 16, "seed": 3}
MODES = ("interpret", "aot")


@contextlib.contextmanager
def _launches():
    """Record every interpreted kernel launch: its name, grid, integer meta-parameters and the
    tensors it was given (base address, elements, bytes per element)."""
    from triton.runtime.interpreter import InterpretedFunction

    launches, run = [], InterpretedFunction.run

    def recording_run(self, *args, grid, warmup, **kwargs):
        if not warmup:
            shape = grid(kwargs) if callable(grid) else grid
            launches.append({
                "kernel": self.fn.__name__, "grid": [int(g) for g in shape],
                "meta": {k: v for k, v in kwargs.items()
                         if isinstance(v, int) and not isinstance(v, bool)},
                "tensors": [{"base": a.data_ptr(), "numel": a.numel(),
                             "itemsize": a.element_size()}
                            for a in args if hasattr(a, "data_ptr")]})
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = recording_run
    try:
        yield launches
    finally:
        InterpretedFunction.run = run


def _lab05_launch() -> dict:
    import torch

    from msda_labs.chips import lab05

    case = GRID_CASE
    gen = torch.Generator().manual_seed(0)
    shapes = torch.tensor(case["shapes"], dtype=torch.int64)
    S = int((shapes[:, 0] * shapes[:, 1]).sum())
    B, Q, M, D, K, L = case["B"], case["Q"], case["M"], case["D"], case["K"], len(shapes)
    value = torch.randn(B, S, M, D, generator=gen)
    loc = torch.rand(B, Q, M, L, K, 2, generator=gen)
    attn = torch.rand(B, Q, M, L, K, generator=gen)
    with _launches() as launches:
        lab05.msda_forward(value, shapes, None, loc, attn, BLOCK_Q=case["BLOCK_Q"])
    for launch in launches:
        del launch["tensors"]
    return {"case": case, "launches": launches}


def _lab04_memory() -> dict:
    """Record every lane of every masked load and store that copy2d_kernel issues."""
    import numpy as np
    import torch
    from triton.runtime import interpreter

    from msda_labs.chips import lab04

    case = COPY_CASE
    x = torch.arange(case["R"] * case["C"], dtype=torch.float32).reshape(case["R"], case["C"])
    builder, lanes = interpreter.InterpreterBuilder, []
    saved = builder.create_masked_load, builder.create_masked_store

    def record(kind, builder_self, ptrs, mask):
        pid = [int(p) for p in builder_self.grid_idx[:2]]
        addresses = np.broadcast_to(ptrs.data, mask.data.shape)
        lanes.append({"kind": kind, "pid": pid, "address": addresses.astype(np.int64).tolist(),
                      "active": mask.data.astype(bool).tolist()})

    def load(self, ptrs, mask, other, *rest):
        record("load", self, ptrs, mask)
        return saved[0](self, ptrs, mask, other, *rest)

    def store(self, ptrs, value, mask, *rest):
        record("store", self, ptrs, mask)
        return saved[1](self, ptrs, value, mask, *rest)

    builder.create_masked_load, builder.create_masked_store = load, store
    try:
        with _launches() as launches:
            out = lab04.copy2d(x, BLOCK_R=case["BLOCK"], BLOCK_C=case["BLOCK"])
    finally:
        builder.create_masked_load, builder.create_masked_store = saved
    [launch] = launches
    x_arg, out_arg = launch["tensors"][:2]
    tensors = {"x": x_arg, "out": out_arg, "grid": launch["grid"]}
    return {"case": case, "tensors": tensors, "lanes": lanes, "equal": bool(torch.equal(out, x))}


def _lab08_histogram() -> dict:
    import torch

    from msda_labs.chips import lab08

    case = HISTOGRAM_CASE
    gen = torch.Generator().manual_seed(case["seed"])
    idx = torch.randint(0, case["n_bins"], (case["n"],), generator=gen, dtype=torch.int32)
    got = lab08.histogram_racy(idx, case["n_bins"], BLOCK=case["BLOCK"])
    return {"case": case, "idx": idx.tolist(), "got": got.tolist(),
            "expected": torch.bincount(idx, minlength=case["n_bins"]).tolist()}


def _lab09_ptx() -> dict:
    from msda_labs.chips.lab08 import msda_backward_kernel
    from msda_labs.chips.lab09 import compile_backward

    return {f"sm_{cc}": compile_backward(msda_backward_kernel, "bf16", "bf16", cc)
            for cc in (80, 90)}


def _run_here(mode: str) -> dict:
    if mode == "interpret":
        return {"lab04": _lab04_memory(), "lab05": _lab05_launch(), "lab08": _lab08_histogram()}
    return {"lab09": _lab09_ptx()}


def measure(mode: str, timeout: float = 300.0) -> dict:
    """Run one mode's facts in a fresh Python process and return them."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    env = dict(os.environ, TRITON_INTERPRET="1" if mode == "interpret" else "0",
               MSDA_STAGE="chips")
    done = subprocess.run([sys.executable, "-m", __name__, mode], capture_output=True,
                          text=True, env=env, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"measuring the {mode} facts for the pictures failed "
                           f"(exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_all() -> dict:
    """Both modes, side by side (two processes at once)."""
    with ThreadPoolExecutor(max_workers=len(MODES)) as pool:
        parts = list(pool.map(measure, MODES))
    facts = {}
    for part in parts:
        facts.update(part)
    return facts


if __name__ == "__main__":
    print(json.dumps(_run_here(sys.argv[1])))
