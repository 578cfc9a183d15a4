"""Lab 05: the program grid of the forward kernel and the tile one program owns.

The grid and block sizes are the ones the lab 05 chip really launched on a small case under
Triton's interpreter (``facts.py`` records the launch), so the picture follows the chip.
"""

from __future__ import annotations

from msda_labs.authoring.pictures.canvas import COLOURS, box, figure, label, png_bytes

CELL = 1.7  # width of one program's box in panel (a)


def _launch(facts: dict):
    record = facts["lab05"]
    launch = record["launches"][0]
    case = record["case"]
    return case, launch["kernel"], launch["grid"], launch["meta"]


def _grid(ax, case, grid, meta, chosen):
    n_q, n_bm = grid
    M = meta["M"]
    for pid_q in range(n_q):
        for pid_bm in range(n_bm):
            b, m = divmod(pid_bm, M)
            picked = (pid_q, pid_bm) == chosen
            box(ax, pid_q * CELL, n_bm - 1 - pid_bm, CELL, 1,
                face=COLOURS["orange"] if picked else COLOURS["sky"], lw=2.2 if picked else 0.8)
            label(ax, (pid_q + 0.5) * CELL, n_bm - 0.5 - pid_bm,
                  f"({pid_q}, {pid_bm})\nb={b}, m={m}", fontsize=8)
    for pid_q in range(n_q):
        lo = pid_q * meta["BLOCK_Q"]
        hi = min(lo + meta["BLOCK_Q"], case["Q"]) - 1
        label(ax, (pid_q + 0.5) * CELL, n_bm + 0.15, f"queries\n{lo}..{hi}", fontsize=8,
              va="bottom")
    ax.set_xlim(-0.1, n_q * CELL + 0.1)
    ax.set_ylim(-0.2, n_bm + 1.1)
    ax.set_xticks([(i + 0.5) * CELL for i in range(n_q)], [str(i) for i in range(n_q)])
    ax.set_yticks([n_bm - 0.5 - i for i in range(n_bm)], [str(i) for i in range(n_bm)])
    ax.set_xlabel(f"pid_q = program_id(0):\n{n_q} = cdiv(Q={case['Q']}, BLOCK_Q="
                  f"{meta['BLOCK_Q']})")
    ax.set_ylabel(f"pid_bm = program_id(1): {n_bm} = B * M = {case['B']} * {M}")
    ax.set_title(f"(a) the grid ({n_q}, {n_bm}): one box per program", loc="left")


def _tile(ax, case, meta, chosen):
    Q, D = case["Q"], meta["D"]
    BQ, BD = meta["BLOCK_Q"], meta["BLOCK_D"]
    pid_q, pid_bm = chosen
    b, m = divmod(pid_bm, meta["M"])
    top = max(Q, (pid_q + 1) * BQ)
    for q in range(Q):
        for d in range(D):
            box(ax, d, top - 1 - q, 1, 1, face=COLOURS["light"], edge="white", lw=1)
    q0 = pid_q * BQ
    for i in range(BQ):
        for j in range(BD):
            q, d = q0 + i, j
            real = q < Q and d < D
            box(ax, d, top - 1 - q, 1, 1, face=COLOURS["orange"] if real else "white",
                edge=COLOURS["ink"], hatch=None if real else "///", lw=0.6, z=2)
    box(ax, 0, top - q0 - BQ, BD, BQ, face="none", edge=COLOURS["red"], lw=2.4, z=3)
    ax.set_xlim(-0.3, BD + 6.2)
    ax.set_ylim(-0.5, top + 0.6)
    ax.set_aspect("equal")
    ax.set_xticks([d + 0.5 for d in range(BD)], [str(d) for d in range(BD)])
    ax.set_yticks([top - 0.5 - q for q in range(top)], [str(q) for q in range(top)])
    ax.set_xlabel("channel d (offs_d = arange(0, BLOCK_D))")
    ax.set_ylabel("query q (offs_q = pid_q * BLOCK_Q + arange(0, BLOCK_Q))")
    notes = (f"program ({pid_q}, {pid_bm}): b = {pid_bm} // {meta['M']} = {b},\n"
             f"m = {pid_bm} % {meta['M']} = {m}; it writes\nout[{b}, {q0}:{q0 + BQ}, {m}, 0:{D}]",
             f"its accumulator is\n[BLOCK_Q, BLOCK_D] = [{BQ}, {BD}] fp32",
             f"hatched: masked off\nrows q >= Q = {Q} (mask_q)\ncolumns d >= D = {D} (mask_d)",
             f"grey: out[{b}, :, {m}, :],\nwritten by the other\nprograms of row "
             f"pid_bm = {pid_bm} in (a)")
    for i, text in enumerate(notes):
        label(ax, BD + 0.5, top - 0.4 - i * 2.6, text, ha="left", va="top", fontsize=8.5)
    ax.set_title(f"(b) one program's tile of out[{b}, :, {m}, :] (Q = {Q}, D = {D})", loc="left")


def _gather(ax, case, meta):
    BQ, BD, D = meta["BLOCK_Q"], meta["BLOCK_D"], meta["D"]
    lines = (
        "for l in static_range(L):          # unrolled",
        "    H, W, start  <- three int64 scalars",
        "    for k in static_range(K):      # unrolled",
        f"        x, y, a  <- three [BLOCK_Q] = [{BQ}] vectors",
        "        x0, y0, lx, ly, the four weights  [BLOCK_Q]",
        f"        v00, v01, v10, v11  <- four [BLOCK_Q, BLOCK_D] = [{BQ}, {BD}] gathers:",
        "            row i = the D contiguous channels of",
        "            query i's corner pixel; masked outside",
        "            the level, past Q and past D",
        "        acc += a * (w00 * v00 + w01 * v01",
        "                    + w10 * v10 + w11 * v11)",
        "store acc once, cast to out's dtype, masked",
    )
    for i, line in enumerate(lines):
        label(ax, 0.02, 0.95 - i * 0.075, line, ha="left", va="top", fontsize=8.5,
              family="DejaVu Sans Mono", transform=ax.transAxes)
    ax.axis("off")
    ax.set_title(f"(c) what the program computes (L = {meta['L']} levels, K = {meta['K']}, "
                 f"D = {D})", loc="left")


def draw(facts: dict) -> bytes:
    """The lab 05 picture as PNG bytes, from the recorded launch."""
    case, kernel, grid, meta = _launch(facts)
    chosen = (grid[0] - 1, grid[1] - 2)  # a ragged last query block, a head that is not 0
    with figure(14.5, 5.6, ncols=3, gridspec_kw={"width_ratios": [1.0, 1.25, 1.35]}) as (fig, axes):
        _grid(axes[0], case, grid, meta, chosen)
        _tile(axes[1], case, meta, chosen)
        _gather(axes[2], case, meta)
        fig.suptitle(f"{kernel}[grid] as the lab 05 chip launches it on a small case: B = "
                     f"{case['B']}, Q = {case['Q']}, M = {meta['M']}, D = {meta['D']}, "
                     f"BLOCK_Q = {meta['BLOCK_Q']}, BLOCK_D = next_power_of_2(D) = "
                     f"{meta['BLOCK_D']}", fontsize=11)
        fig.tight_layout()
        return png_bytes(fig)
