"""Lab 03: what one warp load costs on the paper GPU (``msda_labs.student.memsim``).

Every row is the first warp load of one of the model's patterns. Each box is a 32-byte sector
the load touches (in address order; a gap means the next sector is not adjacent), cut into the
element slots it holds; dark slots are the bytes a lane asked for (drawn at least a sixth of a
sector wide), light ones the bytes delivered for nothing.
"""

from __future__ import annotations

import numpy as np

from msda_labs.authoring.pictures.canvas import COLOURS, box, figure, label, png_bytes

GAP = 0.3


def _patterns():
    from msda_labs.student import memsim

    return (
        ("contiguous, fp32", memsim.contiguous(n=32, itemsize=4)),
        ("strided x2, fp32", memsim.strided(2, n=32, itemsize=4)),
        ("strided x8, fp32", memsim.strided(8, n=32, itemsize=4)),
        ("random gather, fp32", memsim.random_gather(n=32, itemsize=4, seed=0)),
        ("MSDA query-block, fp16, D = 32 (lanes across one row's channels)",
         memsim.msda_query_block(n_queries=1, D=32, itemsize=2, seed=0)),
        ("MSDA point-parallel, fp16, D = 32 (lanes across 32 queries' rows)",
         memsim.msda_point_parallel(n_queries=32, D=32, itemsize=2, seed=0)),
    ), memsim.SECTOR_BYTES


def _row(ax, y, name, pattern, sector_bytes):
    addresses = np.asarray(pattern.warps[0], dtype=np.int64)
    slots = sector_bytes // pattern.itemsize
    sectors = np.unique(addresses // sector_bytes)
    wanted = set((addresses // pattern.itemsize).tolist())
    x = 0.0
    for i, sector in enumerate(sectors):
        if i and sector != sectors[i - 1] + 1:
            x += GAP
        for j in range(slots):
            element = int(sector) * slots + j
            if element in wanted:
                # at least a sixth of a sector wide, so that one 2-byte slot stays visible
                width = max(1 / slots, 0.16)
                box(ax, x + min(j / slots, 1 - width), y, width, 0.8, face=COLOURS["blue"],
                    edge="none", z=4)
        box(ax, x, y, 1, 0.8, face=COLOURS["light"], edge="none", z=1)
        box(ax, x, y, 1, 0.8, face="none", edge=COLOURS["ink"], lw=0.8, z=5)
        x += 1
    useful = len(addresses) * pattern.itemsize
    delivered = len(sectors) * sector_bytes
    label(ax, -0.6, y + 0.4, f"{name}\n{len(sectors)} sector{'s' if len(sectors) > 1 else ''}"
          f": {useful} of {delivered} bytes useful,\nefficiency {useful / delivered:.3g}",
          ha="right", fontsize=8.5)


def draw() -> bytes:
    """The lab 03 picture as PNG bytes."""
    patterns, sector_bytes = _patterns()
    with figure(14, 6.2) as (fig, ax):
        for i, (name, pattern) in enumerate(patterns):
            _row(ax, (len(patterns) - 1 - i) * 1.25, name, pattern, sector_bytes)
        box(ax, 0, -1.0, 0.5, 0.4, face=COLOURS["blue"], edge="none")
        label(ax, 0.8, -0.8, "bytes a lane asked for", ha="left", fontsize=8.5)
        box(ax, 9, -1.0, 0.5, 0.4, face=COLOURS["light"], edge="none")
        label(ax, 9.8, -0.8, "bytes delivered for nothing", ha="left", fontsize=8.5)
        box(ax, 20, -1.0, 1, 0.4, face="none", lw=0.8)
        label(ax, 21.3, -0.8, f"one {sector_bytes}-byte sector (a gap: the next sector is not "
              "adjacent in memory)", ha="left", fontsize=8.5)
        ax.set_xlim(-16.5, 42)
        ax.set_ylim(-1.3, len(patterns) * 1.25)
        ax.axis("off")
        ax.set_title("One warp load of 32 lanes on the paper GPU: it costs one 32-byte sector per "
                     "distinct sector its addresses fall in", loc="left")
        fig.tight_layout()
        return png_bytes(fig)
