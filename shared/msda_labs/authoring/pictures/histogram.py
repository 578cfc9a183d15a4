"""Lab 08: the lost updates of the racy histogram.

The counts are what the lab's own ``histogram_racy`` returned under Triton's interpreter on a
small case (``facts.py`` runs it), next to ``torch.bincount`` of the same indices.
"""

from __future__ import annotations

from msda_labs.authoring.pictures.canvas import COLOURS, box, figure, label, png_bytes

BIN_COLOURS = ("sky", "orange", "green", "purple", "yellow", "red", "blue", "grey")


def _program(ax, idx, block, n_bins):
    lanes = idx[:block]
    colours = [COLOURS[BIN_COLOURS[b % len(BIN_COLOURS)]] for b in range(n_bins)]
    rows = (("lane i", [str(i) for i in range(block)]),
            ("bins = load(idx)", [str(b) for b in lanes]),
            ("counts = load(out + bins)", ["0"] * block),
            ("store(out + bins, counts + 1)", ["1"] * block))
    for r, (name, cells) in enumerate(rows):
        y = 3.0 - r
        label(ax, -0.3, y + 0.4, name, ha="right", fontsize=9, family="DejaVu Sans Mono")
        for i, text in enumerate(cells):
            face = "white" if r == 0 else colours[lanes[i]]
            box(ax, i, y, 1, 0.8, face=face, edge="white" if r else COLOURS["light"], lw=1,
                alpha=1.0 if r != 2 else 0.55)
            label(ax, i + 0.5, y + 0.4, text, fontsize=9, color=COLOURS["ink"],
                  fontweight="bold")
    for b in range(n_bins):
        held = sum(1 for x in lanes if x == b)
        if held:
            text = f"bin {b}: {held} lane{'s' if held > 1 else ''}, +1"
            text += f" ({held - 1} lost)" if held > 1 else ""
            x, y = (b % 3) * 5.4, -0.35 - (b // 3) * 0.6
            box(ax, x, y - 0.2, 0.4, 0.4, face=colours[b], edge="none")
            label(ax, x + 0.6, y, text, ha="left", fontsize=9)
    ax.set_xlim(-7.5, block + 0.2)
    ax.set_ylim(-1.6, 4.0)
    ax.axis("off")
    ax.set_title(f"(a) program 0, its {block} lanes at once: every lane reads the count before "
                 "any lane writes, so lanes that share a bin all store 1", loc="left")


def _bars(ax, expected, got, case, n_programs):
    n_bins = len(expected)
    xs = range(n_bins)
    ax.bar([x - 0.2 for x in xs], expected, width=0.38, color=COLOURS["grey"],
           label="expected: torch.bincount(idx)")
    ax.bar([x + 0.2 for x in xs], got, width=0.38, color=COLOURS["red"],
           label="got: histogram_racy in the interpreter")
    for x in xs:
        lost = expected[x] - got[x]
        label(ax, x, expected[x] + 0.35, f"{lost:g} lost", va="bottom", fontsize=8.5)
    ax.set_xticks(list(xs), [f"bin {b}" for b in xs])
    ax.set_ylabel("count")
    ax.set_ylim(0, max(expected) * 1.35)
    ax.legend(loc="upper right", fontsize=8.5, frameon=False)
    ax.set_title(f"(b) {case['n']} indices into {n_bins} bins, BLOCK = {case['BLOCK']} "
                 f"({n_programs} programs): {sum(expected) - sum(got):g} of {sum(expected)} "
                 "updates lost", loc="left")


def draw(facts: dict) -> bytes:
    """The lab 08 picture as PNG bytes, from the recorded interpreter run."""
    record = facts["lab08"]
    case, idx = record["case"], record["idx"]
    expected, got = record["expected"], record["got"]
    n_programs = -(-case["n"] // case["BLOCK"])
    with figure(12.5, 7.2, nrows=2, gridspec_kw={"height_ratios": [1, 1.1]}) as (fig, axes):
        _program(axes[0], idx, case["BLOCK"], case["n_bins"])
        _bars(axes[1], expected, got, case, n_programs)
        fig.text(0.01, 0.005, "The interpreter runs the programs one after another, so here "
                 "every loss happens inside one program.\nOn a GPU, programs that run at the same "
                 "time also lose updates to each other, and how many depends on timing.",
                 fontsize=8.5, ha="left", va="bottom")
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        return png_bytes(fig)
