"""The device limits the operator's kernels run into, measured with the operator's own patterns.

    python -m msda_labs.gpu.opbench_limits [--out DIR]

Four rates, each the median of ``triton.testing.do_bench``:

* **DRAM copy**: a 1 GiB device-to-device copy, (read + written bytes) / time (what
  ``nox -s bench`` measures as the copy bandwidth);
* **L2 stream**: every program reads its slice of a 16 MiB buffer (it stays in the 50 MB L2 of
  an H100/H200) 32 times over, bytes read / time;
* **L2 row gather**: programs of 64 rows gather random 128-byte rows (32 fp32 channels, the
  forward's corner rows) from a table of ``--table-mb`` MiB, bytes gathered / time. With the
  table the size of levels 0 and 1 of one (batch, head) of the encoder preset this is the
  delivery rate the encoder forward's gathers see;
* **vector atomics**: programs of 64 rows add a row of 32 channels (fp32, fp16, bf16) at random
  rows of a buffer the size of the encoder's grad_value, with ``tl.atomic_add`` as the backward
  does (Triton emits one vector atomic per 4 fp32 or 8 half channels on SM 9.0), element adds
  per second.

Writes ``limits.json`` to ``--out``; without a CUDA device it says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import triton
import triton.language as tl

from msda_labs.gpu.opbench import NO_GPU_STATUS
from msda_labs.grading.speed.timing import copy_bandwidth_gbs

ROWS, CHANNELS = 64, 32


@triton.jit
def _stream_kernel(src_ptr, out_ptr, n_per_program, REPEATS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = pid * n_per_program
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(REPEATS):
        for start in range(0, n_per_program, BLOCK):
            acc += tl.load(src_ptr + base + start + tl.arange(0, BLOCK))
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def _gather_kernel(table_ptr, rows_ptr, out_ptr, ROWS: tl.constexpr, C: tl.constexpr):
    pid = tl.program_id(0)
    rows = tl.load(rows_ptr + pid * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    tile = tl.load(table_ptr + rows[:, None] * C + tl.arange(0, C)[None, :])
    tl.store(out_ptr + pid * C + tl.arange(0, C), tl.sum(tile, axis=0))


@triton.jit
def _atomic_kernel(dst_ptr, rows_ptr, ROWS: tl.constexpr, C: tl.constexpr):
    pid = tl.program_id(0)
    rows = tl.load(rows_ptr + pid * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    ones = tl.full((ROWS, C), 1.0, dtype=dst_ptr.dtype.element_ty)
    tl.atomic_add(dst_ptr + rows[:, None] * C + tl.arange(0, C)[None, :], ones, sem="relaxed")


def l2_stream_gbs(mib: int = 16, repeats: int = 32) -> float:
    import torch
    from triton.testing import do_bench

    programs, block = 1024, 1024
    n = mib * (1 << 20) // 4 // programs // block * block
    src = torch.rand(programs * n, device="cuda")
    out = torch.empty(programs, device="cuda")

    def run():
        _stream_kernel[(programs,)](src, out, n, REPEATS=repeats, BLOCK=block, num_warps=4)

    ms = do_bench(run, warmup=20, rep=200, return_mode="median")
    return programs * n * 4 * repeats / (ms * 1e-3) / 1e9


def gather_gbs(table_mb: float, gathers: int = 1 << 22) -> float:
    import torch
    from triton.testing import do_bench

    table_rows = int(table_mb * (1 << 20)) // (CHANNELS * 4)
    table = torch.randn(table_rows, CHANNELS, device="cuda")
    rows = torch.randint(0, table_rows, (gathers,), device="cuda", dtype=torch.int32)
    out = torch.empty(gathers // ROWS, CHANNELS, device="cuda")
    grid = (gathers // ROWS,)

    def run():
        _gather_kernel[grid](table, rows, out, ROWS=ROWS, C=CHANNELS, num_warps=4)

    ms = do_bench(run, warmup=20, rep=200, return_mode="median")
    return gathers * CHANNELS * 4 / (ms * 1e-3) / 1e9


def atomic_gadds(dtype_name: str, dst_rows: int, adds_rows: int = 1 << 22) -> float:
    import torch
    from triton.testing import do_bench

    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    dst = torch.zeros(dst_rows, CHANNELS, device="cuda", dtype=dtype)
    rows = torch.randint(0, dst_rows, (adds_rows,), device="cuda", dtype=torch.int32)
    grid = (adds_rows // ROWS,)

    def run():
        _atomic_kernel[grid](dst, rows, ROWS=ROWS, C=CHANNELS, num_warps=2)

    ms = do_bench(run, warmup=20, rep=200, return_mode="median")
    return adds_rows * CHANNELS / (ms * 1e-3) / 1e9


def measure(table_mb: float, dst_rows: int) -> dict:
    import torch

    return {
        "device": torch.cuda.get_device_name(),
        "dram_copy_gbs": copy_bandwidth_gbs(),
        "l2_stream_gbs": l2_stream_gbs(),
        "l2_gather_gbs": {f"{mb} MiB table": gather_gbs(mb) for mb in (table_mb, 1.0, 256.0)},
        "atomic_gadds": {name: atomic_gadds(name, dst_rows) for name in ("fp32", "fp16", "bf16")},
        "method": {"rows per program": ROWS, "channels per row": CHANNELS,
                   "statistic": "triton.testing.do_bench median"},
    }


def run(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m msda_labs.gpu.opbench_limits",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench-results")
    # levels 0 and 1 of one (batch, head) at the encoder preset: (16700 + 4200) rows x 128 B
    parser.add_argument("--table-mb", type=float, default=2.55)
    # the encoder preset's grad_value: B * S * M rows of D = 32 channels
    parser.add_argument("--dst-rows", type=int, default=2 * 22223 * 8)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no GPU: nothing measured (opbench_limits times CUDA kernels)", file=sys.stderr)
        return NO_GPU_STATUS
    started = time.time()
    result = measure(args.table_mb, args.dst_rows)
    result["seconds"] = time.time() - started
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "limits.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


def main() -> None:
    raise SystemExit(run())


if __name__ == "__main__":
    main()
