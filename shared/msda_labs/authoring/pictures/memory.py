"""Lab 04: the memory ``copy2d_kernel`` touched on a small matrix, lane by lane.

Every lane of every ``tl.load`` and ``tl.store`` the lab 04 chip issued under Triton's
interpreter is recorded (``facts.py``): its program, its address and whether its mask let it
through. The picture lays the lanes out where the tiles put them, so the lanes past the matrix,
which the mask switches off, hang over its edge; an active lane outside the tensor would be red.
"""

from __future__ import annotations

from msda_labs.authoring.pictures.canvas import COLOURS, box, figure, label, png_bytes

PROGRAM_COLOURS = ("blue", "orange", "green", "purple", "sky", "red")


def lanes_by_cell(record: dict, kind: str, tensor: str):
    """{(row, col) of the tile layout: (program, active, element or None)} for one access kind;
    ``element`` is the flat index the lane's address points at (None when outside the tensor)."""
    block, info = record["case"]["BLOCK"], record["tensors"][tensor]
    cells = {}
    for access in (a for a in record["lanes"] if a["kind"] == kind):
        pid_r, pid_c = access["pid"]
        for i, (addresses, actives) in enumerate(zip(access["address"], access["active"])):
            for j, (address, active) in enumerate(zip(addresses, actives)):
                offset = address - info["base"]
                element = offset // info["itemsize"]
                inside = 0 <= element < info["numel"] and offset % info["itemsize"] == 0
                cells[pid_r * block + i, pid_c * block + j] = (
                    (pid_r, pid_c), bool(active), element if inside else None)
    return cells


def _panel(ax, record, kind, tensor):
    R, C = record["case"]["R"], record["case"]["C"]
    grid = record["tensors"]["grid"]
    cells = lanes_by_cell(record, kind, tensor)
    rows, cols = grid[0] * record["case"]["BLOCK"], grid[1] * record["case"]["BLOCK"]
    active = outside = wrong = 0
    for (r, c), (pid, on, element) in sorted(cells.items()):
        y = rows - 1 - r
        if not on:
            box(ax, c, y, 1, 1, face="white", edge=COLOURS["grey"], hatch="///", lw=0.5)
            continue
        active += 1
        if element is None:
            outside += 1
            box(ax, c, y, 1, 1, face=COLOURS["red"], lw=0.5)
            continue
        wrong += element != r * C + c
        colour = PROGRAM_COLOURS[(pid[0] * grid[1] + pid[1]) % len(PROGRAM_COLOURS)]
        box(ax, c, y, 1, 1, face=COLOURS[colour], edge="white", lw=0.8, alpha=0.85)
        label(ax, c + 0.5, y + 0.5, str(element), fontsize=8)
    box(ax, 0, rows - R, C, R, face="none", edge=COLOURS["ink"], lw=2.4, z=4)
    block = record["case"]["BLOCK"]
    for k in range(1, grid[0]):
        ax.plot([0, cols], [rows - k * block] * 2, color=COLOURS["ink"], lw=1, ls="--", zorder=5)
    for k in range(1, grid[1]):
        ax.plot([k * block] * 2, [0, rows], color=COLOURS["ink"], lw=1, ls="--", zorder=5)
    ax.set_xlim(-0.2, cols + 0.2)
    ax.set_ylim(-1.9, rows + 0.2)
    ax.set_aspect("equal")
    ax.axis("off")
    what = "tl.load from x" if kind == "load" else "tl.store into out"
    ax.set_title(f"{what}: {active} lanes touched memory", loc="left")
    label(ax, 0, -0.5, f"{len(cells) - active} lanes masked off (hatched): no access\n"
          f"{outside} active lanes outside {tensor}, {wrong} at the wrong element",
          ha="left", va="top", fontsize=9)
    return active, outside


def draw(facts: dict) -> bytes:
    """The lab 04 picture as PNG bytes, from the recorded interpreter run."""
    record = facts["lab04"]
    case, grid = record["case"], record["tensors"]["grid"]
    with figure(11, 5.4, ncols=2) as (fig, axes):
        _panel(axes[0], record, "load", "x")
        _panel(axes[1], record, "store", "out")
        fig.suptitle(f"copy2d of a {case['R']} x {case['C']} matrix in {case['BLOCK']} x "
                     f"{case['BLOCK']} tiles: grid {tuple(grid)}, one colour per program; the "
                     "number is the element the lane's address points at", fontsize=10.5)
        note = "Thick outline: the matrix; dashed: the tiles."
        _, _, element = lanes_by_cell(record, "load", "x").get((0, case["C"]), (0, 0, None))
        if element is not None:
            note += (f" The masked lane just past the right edge, (row 0, col {case['C']}), "
                     f"points at element {element},\nwhich is x[{element // case['C']}, "
                     f"{element % case['C']}]: a real element; only the mask keeps the lane "
                     "from reading it.")
        fig.text(0.01, 0.01, note, fontsize=8.5, ha="left", va="bottom")
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        return png_bytes(fig)
