"""The report of `nox -s bench` (:mod:`msda_labs.gpu.opbench`): Markdown table, JSON and chart.

Split from the measuring module so that each stays short; nothing here needs a GPU (``python -m
msda_labs.gpu.opbench --render bench.json`` re-renders a saved run anywhere).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

PROFILED_CALLS = 20  # calls summed under the profiler per fwd/bwd time (opbench uses these)
STEP_ROUNDS = 5  # rounds in which the operators' steps alternate


def build_table(result: dict) -> str:
    """Markdown: one row per (preset, dtype); kit, reference and peers; ratios."""
    names = result["operators"]
    peers = [n for n in names if n not in ("kit", "reference")]
    head = ["case", "dtype"]
    for what in ("fwd", "bwd", "step"):
        head += [f"{what} {n}" for n in names]
    head += ["fwd ref/kit", "bwd ref/kit", "step ref/kit"]
    for p in peers:
        head += [f"fwd {p}/kit", f"bwd {p}/kit", f"step {p}/kit"]
    head += ["fwd kit x floor", "bwd kit x floor"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(entry, key):
        if "error" in entry:
            return "error"
        mark = "" if entry.get("correct", False) else " (WRONG)"
        return f"{entry[key]:.1f}{mark}"

    def ratio(a, b, key):
        if "error" in a or "error" in b or not b.get(key):
            return "-"
        return f"{a[key] / b[key]:.2f}x"

    for row in result["rows"]:
        ops = row["ops"]
        cells = [row["preset"], row["dtype"]]
        for key in ("fwd_us", "bwd_us", "step_us"):
            cells += [cell(ops[n], key) for n in names]
        kit = ops["kit"]
        for key in ("fwd_us", "bwd_us", "step_us"):
            cells.append(ratio(ops["reference"], kit, key))
        for p in peers:
            for key in ("fwd_us", "bwd_us", "step_us"):
                cells.append(ratio(ops[p], kit, key))
        for key, floor in (("fwd_us", row["floor_fwd_us"]), ("bwd_us", row["floor_bwd_us"])):
            cells.append("-" if "error" in kit else f"{kit[key] / floor:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_chart(result: dict, path: Path) -> str | None:
    """A grouped bar chart (log scale) of fwd, bwd and step per case; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no chart written"
    names = result["operators"]
    rows = result["rows"]
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))
    width = 0.8 / max(1, len(names))
    for ax, (key, title) in zip(axes, (("fwd_us", "forward kernels"),
                                       ("bwd_us", "backward kernels"),
                                       ("step_us", "training step (wall)"))):
        labels = [f"{r['preset']}\n{r['dtype']}" for r in rows]
        for i, name in enumerate(names):
            vals = [r["ops"][name].get(key, math.nan) for r in rows]
            ax.bar([x + i * width for x in range(len(rows))], vals, width, label=name)
        ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(rows))])
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("µs per call (log)")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"MSDA on {result['device']}: kit vs reference and peers (one run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def write_outputs(result: dict, out_dir: Path) -> str:
    """bench.json, bench.md and (with matplotlib) bench.png in out_dir; returns the table."""
    table = build_table(result)
    (out_dir / "bench.json").write_text(json.dumps(result, indent=2))
    chart_note = write_chart(result, out_dir / "bench.png")
    md = [f"# MSDA operator benchmark on {result['device']}", "",
          f"torch {result['torch']}, triton {result['triton']}; copy bandwidth "
          f"{result['copy_bandwidth_gbs'] / 1e3:.2f} TB/s; all numbers from one run.", "",
          "Times in µs per call. fwd/bwd: summed CUDA kernel time under torch.profiler over "
          f"{PROFILED_CALLS} calls after warm-up (no L2 flush). step: do_bench median of forward "
          "+ torch.autograd.grad over value, locations, weights. `a/kit` is a's time over the "
          "kit's (above 1: the kit is faster). `x floor`: kit time over the compulsory DRAM "
          "traffic (value at most once, locations, weights and output once; backward: plus the "
          "three gradients written once) at the copy bandwidth measured in the same run. "
          "(WRONG) marks an operator whose output or gradients missed the fp32 reference "
          "(relative L2 error over 1e-4 fp32, 1e-2 fp16, 5e-2 bf16; the reference itself, run "
          "in the row's dtype, is not judged)." + (
              f" Steps alternate between the operators over {STEP_ROUNDS} rounds after the GPU "
              f"is kept busy; the median round counts." if any(
                  "step_samples_us" in e for r in result["rows"] for e in r["ops"].values())
              else " Steps: one do_bench per operator, in turn."), "", table, ""]
    if chart_note:
        md.append(f"_{chart_note}_")
    (out_dir / "bench.md").write_text("\n".join(md) + "\n")
    print(f"wrote {out_dir / 'bench.md'}, {out_dir / 'bench.json'}"
          + ("" if chart_note else f", {out_dir / 'bench.png'}"))
    return table
