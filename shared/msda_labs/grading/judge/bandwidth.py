"""Bytes and bandwidth: what turns a measured time into GB/s (the GPU stages of labs 06 on).

The times come from :mod:`msda_labs.grading.speed.timing`; the byte counts here are algorithmic
(each item once per use), so the effective bandwidth ``bytes / time`` says how close a kernel runs
to what memory can deliver, and can exceed it where caches serve repeated reads.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["forward_bytes", "effective_bandwidth_gbs", "bandwidth_table", "plot_bandwidth"]


def forward_bytes(B: int, Q: int, M: int, D: int, L: int, K: int, itemsize: int) -> int:
    """Bytes the MSDA forward asks memory for: the algorithmic count, each item once per use.

    Every one of the B*Q*M*L*K samples reads its four corner rows of D channels, reads its two
    coordinates and its weight, and every (b, q, m) writes D channels:

        bytes = B*Q*M*L*K * (4*D + 3) * itemsize  +  B*Q*M*D * itemsize
                (corner rows + x, y, weight)          (output)

    It ignores the few bytes of spatial_shapes and level_start_index, and it counts a corner
    row that two samples share twice: caches may serve the second read, so the effective
    bandwidth bytes / time can exceed what DRAM delivers. At the decoder preset (B=4, Q=300,
    M=8, D=32, L=4, K=4) in fp16 that is 39,321,600 + 921,600 + 614,400 = 40,857,600 bytes.

    Args:
        B, Q, M, D, L, K: batch, queries, heads, channels per head, levels, points per level.
        itemsize: bytes per element (2 for fp16/bf16, 4 for fp32).

    Returns:
        The byte count (int).
    """
    for name, val in (("B", B), ("Q", Q), ("M", M), ("D", D), ("L", L), ("K", K),
                      ("itemsize", itemsize)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 0:
            raise ValueError(f"{name} must be a non-negative int, got {val!r}")
    samples = B * Q * M * L * K
    return samples * (4 * D + 3) * itemsize + B * Q * M * D * itemsize


def effective_bandwidth_gbs(nbytes: int | float, time_us: float) -> float:
    """Effective bandwidth in GB/s (10**9 bytes per second): ``nbytes / time``.

    Args:
        nbytes: bytes moved (e.g. :func:`forward_bytes`).
        time_us: device time in microseconds (> 0).
    """
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    if not time_us > 0:
        raise ValueError(f"time_us must be > 0, got {time_us!r}")
    return nbytes / (time_us * 1e-6) / 1e9


def bandwidth_table(times_us: Mapping[str, float], nbytes: int, label: str = "variant") -> str:
    """A plain-text table of time and effective bandwidth per variant, formula included."""
    lines = [f"{label:>10} | {'time (us)':>10} | {'GB/s':>8}",
             f"{'-' * 10}-+-{'-' * 10}-+-{'-' * 8}"]
    for name, us in times_us.items():
        lines.append(f"{name:>10} | {us:>10.2f} | {effective_bandwidth_gbs(nbytes, us):>8.1f}")
    lines.append(f"GB/s = {nbytes:,} bytes / time; bytes = B*Q*M*L*K*(4*D + 3)*itemsize + "
                 f"B*Q*M*D*itemsize")
    return "\n".join(lines)


def plot_bandwidth(rows, path, *, xlabel: str, title: str) -> str:
    """A bar chart of effective GB/s per variant, each bar labelled with its time.

    Args:
        rows: ``[(variant, time_us, gbs), ...]`` in the order of the bars.
        path: the image file to write (PNG).
        xlabel: what the variants are.
        title: the chart's title.

    Returns:
        What happened, for the report: where the plot went, or why there is none.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install matplotlib)"
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    bars = ax.bar([str(name) for name, _, _ in rows], [g for _, _, g in rows], color="#3b75af")
    for bar, (_, us, _) in zip(bars, rows):
        ax.annotate(f"{us:.1f} us", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("effective bandwidth (GB/s)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot saved to {path}"
