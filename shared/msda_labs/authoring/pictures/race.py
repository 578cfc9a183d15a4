"""Lab 06: the wide-vs-narrow race.

(a) a model: how the programs of each ``CHUNK_D`` split one corner row (D = 32 fp16 channels,
64 bytes, two 32-byte sectors), and how many sectors the paper GPU of lab 03 delivers for it.
(b) a measurement: the five widths raced on an NVIDIA H200, taken from the kit's recorded GPU
run (``RECORDED``), not measured when the picture is drawn.
"""

from __future__ import annotations

import math

from msda_labs.authoring.pictures.canvas import COLOURS, box, figure, label, png_bytes

D, ITEMSIZE, SECTOR = 32, 2, 32
WIDTHS = (32, 16, 8, 4, 2)
# Device time (us) per CHUNK_D of the lab 06 chip at the decoder preset in fp16 (B=4, Q=300,
# M=8, D=32, L=4, K=4; CUDA-graph replay, L2 flushed, median), NVIDIA H200, 2026-12-01:
# docs/results/h200-gpu-stages/lab06-race.md (the widths 32 and 2 in its text, all five in
# its plot docs/results/h200-gpu-stages/lab06-race.png).
RECORDED = {"source": "docs/results/h200-gpu-stages/lab06-race.md",
            "device": "NVIDIA H200", "times_us": {2: 144.6, 4: 49.7, 8: 31.8, 16: 21.0, 32: 13.2},
            "wide_over_narrow": 10.93}
DECODER = {"B": 4, "Q": 300, "M": 8, "D": 32, "L": 4, "K": 4, "itemsize": 2}


def sectors_per_row(chunk: int) -> tuple[int, int]:
    """(programs that read one corner row, sectors the paper GPU delivers for it)."""
    programs = math.ceil(D / chunk)
    per_program = math.ceil(chunk * ITEMSIZE / SECTOR)
    return programs, programs * per_program


def _model(ax):
    palette = (COLOURS["blue"], COLOURS["orange"])
    for i, chunk in enumerate(WIDTHS):
        y = (len(WIDTHS) - 1 - i) * 1.5
        for d in range(D):
            box(ax, d, y, 1, 0.8, face=palette[(d // chunk) % 2], edge="white", lw=0.5)
        for s in range(D * ITEMSIZE // SECTOR + 1):
            x = s * SECTOR / ITEMSIZE
            ax.plot([x, x], [y - 0.12, y + 0.92], color=COLOURS["ink"], lw=1.6, zorder=4)
        programs, sectors = sectors_per_row(chunk)
        label(ax, -0.8, y + 0.4, f"CHUNK_D = {chunk}", ha="right", fontsize=9.5,
              fontweight="bold")
        extra = "" if programs == 1 else ", each reloads x, y, weight"
        label(ax, D + 0.8, y + 0.4, f"{programs} program{'s' if programs > 1 else ''} "
              f"x {chunk * ITEMSIZE} B{extra}\n{sectors} sectors = {sectors * SECTOR} B delivered "
              f"for {D * ITEMSIZE} B", ha="left", fontsize=8.5)
    label(ax, D / 4, len(WIDTHS) * 1.5 - 0.3, "sector 0 (32 B)", fontsize=8.5)
    label(ax, 3 * D / 4, len(WIDTHS) * 1.5 - 0.3, "sector 1 (32 B)", fontsize=8.5)
    ax.set_xlim(-9, D + 24)
    ax.set_ylim(-0.5, len(WIDTHS) * 1.5 + 0.1)
    ax.axis("off")
    ax.set_title("(a) model (lab 03's paper GPU): one corner row of D = 32 fp16 channels;\n"
                 "colours alternate between the programs that share it",
                 loc="left")


def _race(ax):
    from msda_labs.grading.judge.bandwidth import forward_bytes

    nbytes = forward_bytes(**DECODER)
    times = RECORDED["times_us"]
    xs = range(len(WIDTHS))
    bars = [times[c] for c in reversed(WIDTHS)]
    ax.bar(xs, bars, color=[COLOURS["orange"] if c == 2 else COLOURS["blue"] if c == 32
                            else COLOURS["grey"] for c in reversed(WIDTHS)], width=0.65)
    for x, chunk in zip(xs, reversed(WIDTHS)):
        t = times[chunk]
        gbs = nbytes / (t * 1e-6) / 1e9
        label(ax, x, t + 3, f"{t:.1f} us\n{gbs:,.0f} GB/s", va="bottom", fontsize=8.5)
    ax.set_xticks(list(xs), [str(c) for c in reversed(WIDTHS)])
    ax.set_xlabel("CHUNK_D (channels per program)")
    ax.set_ylabel("device time per call (us), lower is faster")
    ax.set_ylim(0, max(bars) * 1.3)
    ratio = RECORDED["wide_over_narrow"]  # from the unrounded times
    ax.set_title(f"(b) measured on an {RECORDED['device']}: wide is {ratio:.2f}x faster",
                 loc="left")
    ax.text(0.98, 0.97, f"decoder preset, fp16: {nbytes:,} bytes per call\n"
            "CUDA-graph replay, L2 flushed, median\n"
            f"recorded in {RECORDED['source']}", transform=ax.transAxes, ha="right", va="top",
            fontsize=8)


def draw() -> bytes:
    """The lab 06 picture as PNG bytes."""
    with figure(14, 5.2, ncols=2, gridspec_kw={"width_ratios": [1.5, 1]}) as (fig, axes):
        _model(axes[0])
        _race(axes[1])
        fig.tight_layout()
        return png_bytes(fig)
