"""Lab 01: the four corners of one bilinear read and their weights, with the half-pixel shift.

Two samples on a 4 x 5 level: one inside the image, and one near the left border where ``floor``
(not truncation) picks column -1 and the two corners outside the image count zero.
"""

from __future__ import annotations

import math

from msda_labs.authoring.pictures.canvas import COLOURS, box, figure, label, png_bytes

H, W = 3, 4
# (normalized x, normalized y) of the two samples drawn.
INSIDE = (0.56, 0.60)
BORDER = (0.05, 0.45)
CORNER_COLOURS = ("blue", "orange", "green", "purple")
# Where each corner's note goes: (dx, dy, alignment), in the order of corners().
NOTES = ((-0.22, -0.45, "right"), (0.22, -0.45, "left"), (-0.22, 0.45, "right"),
         (0.22, 0.45, "left"))


def corners(x: float, y: float, height: int = H, width: int = W):
    """[(row, col, weight, inside)] of the four corners of normalized (x, y), lab 01's rule."""
    x_pix, y_pix = x * width - 0.5, y * height - 0.5
    x0, y0 = math.floor(x_pix), math.floor(y_pix)
    lx, ly = x_pix - x0, y_pix - y0
    out = []
    for dr, dc, weight in ((0, 0, (1 - lx) * (1 - ly)), (0, 1, lx * (1 - ly)),
                           (1, 0, (1 - lx) * ly), (1, 1, lx * ly)):
        row, col = y0 + dr, x0 + dc
        out.append((row, col, weight, 0 <= row < height and 0 <= col < width))
    return out


def _image(ax):
    box(ax, -0.5, -0.5, W, H, face=COLOURS["light"], edge=COLOURS["ink"], lw=1.6, z=0)
    for c in range(1, W):
        ax.plot([c - 0.5, c - 0.5], [-0.5, H - 0.5], color="white", lw=1.2, zorder=0.5)
    for r in range(1, H):
        ax.plot([-0.5, W - 0.5], [r - 0.5, r - 0.5], color="white", lw=1.2, zorder=0.5)
    for r in range(H):
        for c in range(W):
            ax.plot(c, r, "o", color=COLOURS["grey"], ms=3, zorder=1)
    ax.set_xlim(-2.75, W + 0.25)
    ax.set_ylim(H + 0.05, -1.05)
    ax.set_aspect("equal")
    ax.set_xticks(range(-1, W))
    ax.set_yticks(range(-1, H))
    ax.set_xlabel("column: x_pix = x * W - 0.5 (pixel centres at integers)")
    ax.set_ylabel("row: y_pix = y * H - 0.5")
    top = ax.secondary_xaxis("top", functions=(lambda p: (p + 0.5) / W, lambda x: x * W - 0.5))
    top.set_xticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    top.set_xlabel("normalized x (what the model gives)", fontsize=9)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)


def _sample(ax, x, y, *, note_offsets):
    x_pix, y_pix = x * W - 0.5, y * H - 0.5
    x0, y0 = math.floor(x_pix), math.floor(y_pix)
    found = corners(x, y)
    # Each corner's weight is the area of the sub-rectangle opposite it.
    for (row, col, _weight, inside), colour in zip(found, CORNER_COLOURS):
        ox, oy = 2 * x0 + 1 - col, 2 * y0 + 1 - row  # the opposite corner
        left, bottom = min(x_pix, ox), min(y_pix, oy)
        box(ax, left, bottom, abs(ox - x_pix), abs(oy - y_pix), face=COLOURS[colour],
            edge="none", alpha=0.5 if inside else 0.15, z=2)
    box(ax, x0, y0, 1, 1, face="none", edge=COLOURS["ink"], lw=1.0, z=3)
    ax.plot(x_pix, y_pix, marker="*", color=COLOURS["red"], ms=15, zorder=6,
            markeredgecolor="white")
    for (row, col, weight, inside), colour, (dx, dy, ha) in zip(found, CORNER_COLOURS,
                                                                 note_offsets):
        if inside:
            ax.plot(col, row, "o", color=COLOURS[colour], ms=7 + 14 * weight, zorder=4,
                    markeredgecolor=COLOURS["ink"])
            text = f"({row}, {col})  w = {weight:.3f}"
        else:
            ax.plot(col, row, "X", color=COLOURS[colour], ms=10, zorder=4,
                    markeredgecolor=COLOURS["ink"])
            text = f"({row}, {col}) outside: 0"
        label(ax, col + dx, row + dy, text, ha=ha, fontsize=8.5,
              bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": COLOURS[colour]})
    lx, ly = x_pix - x0, y_pix - y0
    arrow = {"arrowstyle": "<->", "color": COLOURS["ink"], "lw": 0.8}
    ax.annotate("", (x_pix, y0 + 1.12), (x0, y0 + 1.12), arrowprops=arrow)
    label(ax, x0 + lx / 2, y0 + 1.25, f"lx = {lx:.2f}", fontsize=8.5, va="top")
    ax.annotate("", (x0 + 1.12, y_pix), (x0 + 1.12, y0), arrowprops=arrow)
    label(ax, x0 + 1.2, y0 + ly / 2, f"ly = {ly:.2f}", fontsize=8.5, ha="left")
    return x_pix, y_pix, x0, y0, found


def _caption(ax, text):
    ax.text(0.0, -0.2, text, transform=ax.transAxes, ha="left", va="top", fontsize=9)


def draw() -> bytes:
    """The lab 01 picture as PNG bytes."""
    with figure(12, 5.0, ncols=2) as (fig, (left, right)):
        _image(left)
        x, y = INSIDE
        x_pix, y_pix, x0, y0, found = _sample(
            left, x, y, note_offsets=NOTES)
        left.set_title("(a) inside: four corners, each weighted by the opposite area")
        _caption(left, f"(x, y) = {INSIDE}:  x_pix = {x} * {W} - 0.5 = "
              f"{x_pix:.2f},\ny_pix = {y} * {H} - 0.5 = {y_pix:.2f};  x0 = floor({x_pix:.2f}) = "
              f"{x0},  y0 = {y0};  the weights add up to "
              f"{sum(w for *_, w, _ in found):.0f}")

        _image(right)
        x, y = BORDER
        x_pix, y_pix, x0, y0, found = _sample(
            right, x, y, note_offsets=NOTES)
        kept = sum(w for *_, w, inside in found if inside)
        right.set_title("(b) at the border: floor, and zero outside the image")
        _caption(right, f"(x, y) = {BORDER}:  x_pix = {x_pix:.2f},  "
              f"x0 = floor({x_pix:.2f}) = {x0}\n(int() would give 0 and read the wrong columns);\n"
              f"column {x0} lies outside: only {kept:.2f} of the weight is read (zero padding)")
        fig.tight_layout()
        return png_bytes(fig)
