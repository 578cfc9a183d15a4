"""Lab 02: the flat layout of the value tensor, and where int32 offsets run out.

(a) a toy ``value`` of shape (B, S, M, D) = (2, 5, 2, 2), two levels (2 x 2 and 1 x 1), drawn as
the one flat buffer a kernel sees; one element's offset worked out, and the column past the right
edge of a row that lands on the next row's first pixel.
(b) the largest offset of real tensors on a log scale against 2**31 - 1.
"""

from __future__ import annotations

from msda_labs.authoring.pictures.canvas import COLOURS, box, figure, label, png_bytes

B, M, D = 2, 2, 2
LEVELS = ((2, 2), (1, 1))  # (H, W) of each level
S = sum(h * w for h, w in LEVELS)
PICKED = (1, 3, 1, 0)  # (b, s, m, d) of the element worked out
INT32_MAX = 2**31 - 1

# (name, B, S, M, D): the real sizes the handout quotes, plus the decoder preset of the course.
SIZES = (
    ("decoder preset\nB=4, S=22,223", 4, 22_223, 8, 32),
    ("encoder, 1333 x 800 image\nB=4, S=138,000", 4, 138_000, 8, 32),
    ("4K video pyramid\nB=2, S=4,200,000", 2, 4_200_000, 8, 32),
)


def flat(b: int, s: int, m: int, d: int) -> int:
    """Row-major offset of value[b, s, m, d] (the rule lab 02 states)."""
    return ((b * S + s) * M + m) * D + d


def _pixel(s: int) -> tuple[int, int, int]:
    """(level, row, col) of pixel s along S."""
    start = 0
    for level, (h, w) in enumerate(LEVELS):
        if s < start + h * w:
            return level, (s - start) // w, (s - start) % w
        start += h * w
    raise ValueError(s)


def _strip(ax):
    cell = 1.0
    shades = {(0, 0): "#9ecae1", (0, 1): "#4a90c4", (1, 0): "#fdd49e", (1, 1): "#f0a04b"}
    for b in range(B):
        y = (B - 1 - b) * 2.6
        label(ax, -0.6, y + 0.5, f"b = {b}", ha="right", fontsize=9.5, fontweight="bold")
        for s in range(S):
            level, row, col = _pixel(s)
            for m in range(M):
                for d in range(D):
                    off = flat(b, s, m, d)
                    x = off - b * S * M * D
                    picked = (b, s, m, d) == PICKED
                    box(ax, x, y, cell, 1, face=COLOURS["red"] if picked else shades[level, m],
                        lw=2.2 if picked else 0.6, z=2)
                    label(ax, x + 0.5, y + 0.5, str(off), fontsize=8,
                          color="white" if picked else COLOURS["ink"])
            x0 = s * M * D - 0.0
            ax.plot([x0, x0], [y - 0.15, y + 1.15], color=COLOURS["ink"], lw=1.6, zorder=3)
            label(ax, x0 + M * D / 2, y - 0.35, f"s={s}: level {level}\n(row {row}, col {col})",
                  va="top", fontsize=7.5)
        ax.plot([S * M * D] * 2, [y - 0.15, y + 1.15], color=COLOURS["ink"], lw=1.6, zorder=3)
    top = (B - 1) * 2.6 + 1
    for width, lift, text in ((D, 0.35, f"one head: D = {D}"),
                              (M * D, 1.0, f"one pixel s: M * D = {M * D}"),
                              (S * M * D, 1.65, f"one batch: S * M * D = {S * M * D} elements")):
        ax.annotate("", (width, top + lift), (0, top + lift),
                    arrowprops={"arrowstyle": "|-|", "color": COLOURS["ink"], "lw": 0.9,
                                "shrinkA": 0, "shrinkB": 0, "mutation_scale": 3})
        label(ax, width / 2, top + lift + 0.08, text, va="bottom", fontsize=8,
              bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none"})
    b, s, m, d = PICKED
    off = flat(*PICKED)
    label(ax, 0, -2.1, f"value[{b}, {s}, {m}, {d}] sits at ((b * S + s) * M + m) * D + d = "
          f"(({b} * {S} + {s}) * {M} + {m}) * {D} + {d} = {off}  (the red cell)", ha="left",
          fontsize=9)
    h, w = LEVELS[0]
    label(ax, 0, -2.95, f"Validity is per axis: level 0 is {h} x {w}, so (row 0, col {w}) is "
          f"outside it, yet its flat position 0 * {w} + {w} = {w} is a real pixel,\n"
          f"s = {w} (row 1, col 0): a test on the flat index would read it. Test "
          "0 <= col < W and 0 <= row < H.", ha="left", fontsize=9)
    y0 = (B - 1) * 2.6
    ax.annotate(f"(row 0, col {w}) would land here", (w * M * D + M * D / 2, y0 + 1.05),
                (w * M * D + M * D / 2 + 3.2, y0 + 1.6), fontsize=8, color=COLOURS["red"],
                ha="left", arrowprops={"arrowstyle": "->", "color": COLOURS["red"]})
    for i, (colour, text) in enumerate((("#4a90c4", f"level 0 ({LEVELS[0][0]} x {LEVELS[0][1]})"),
                                        ("#f0a04b", f"level 1 ({LEVELS[1][0]} x {LEVELS[1][1]})"),
                                        (None, "lighter: head m = 0, darker: m = 1"))):
        if colour:
            box(ax, 21.2, top - 0.3 - i * 0.75, 0.7, 0.45, face=colour, lw=0.6)
        label(ax, 22.1, top - 0.08 - i * 0.75, text, ha="left", fontsize=8)
    ax.set_xlim(-2.2, S * M * D + 6.5)
    ax.set_ylim(-3.4, top + 2.2)
    ax.axis("off")
    ax.set_title(f"(a) value (B, S, M, D) = ({B}, {S}, {M}, {D}) as the flat buffer a kernel "
                 "reads: the last axis moves fastest", loc="left")


def _boundary(ax):
    ax.set_xscale("log")
    ax.axvspan(INT32_MAX, 1e11, color=COLOURS["red"], alpha=0.12, lw=0)
    ax.axvline(INT32_MAX, color=COLOURS["red"], lw=2)
    label(ax, INT32_MAX * 1.08, 3.35, "2**31 - 1 = 2,147,483,647:\nthe largest int32", ha="left",
          fontsize=8.5, color=COLOURS["red"])
    for i, (name, b, s, m, d) in enumerate(SIZES):
        last = b * s * m * d - 1
        fits = last <= INT32_MAX
        # A marker past the end sits a hair to the right of the red line (the 4K pyramid: by
        # 0.14 %): dark with a white rim, drawn over the line, so that it does not vanish in it.
        colour = COLOURS["green"] if fits else COLOURS["ink"]
        ax.plot(last, i, "o" if fits else "X", color=colour, ms=10 if fits else 13, zorder=5,
                markeredgecolor="white", markeredgewidth=1.2)
        share = f"{100 * last / INT32_MAX:.1f} % of the range" if fits else \
            f"past the end by {last - INT32_MAX:,}"
        label(ax, last / 1.25, i, f"{name}, M=8, D=32\nlast offset {last:,}: {share}",
              ha="right", fontsize=8.5)
    ax.set_xlim(1e5, 1e11)
    ax.set_ylim(-0.7, 3.9)
    ax.set_yticks([])
    ax.spines["left"].set_visible(False)
    ax.set_xlabel("largest flat offset B * S * M * D - 1 (log scale)")
    ax.set_title("(b) where int32 offsets run out: a tensor of 2**31 elements still fits "
                 "(last offset 2**31 - 1), one more does not", loc="left")


def draw() -> bytes:
    """The lab 02 picture as PNG bytes."""
    with figure(12, 7.6, nrows=2, gridspec_kw={"height_ratios": [1.35, 1]}) as (fig, axes):
        _strip(axes[0])
        _boundary(axes[1])
        fig.tight_layout()
        return png_bytes(fig)
