"""Lab 09: one ``tl.atomic_add`` of the lab 08 backward kernel into a bfloat16 ``grad_value``, as
PTX for SM 8.0 (a compare-and-swap retry loop) and for SM 9.0 (one native reduction).

The PTX is what lab 09's ``compile_backward`` makes of the lab 08 chip's kernel when the picture
is drawn (``facts.py``); the excerpts are its first atomic site.
"""

from __future__ import annotations

import re

from msda_labs.authoring.pictures.canvas import COLOURS, box, figure, label, png_bytes

# What each step of the emulated add does, keyed by the instruction's opcode.
STEPS = (
    (("ld.",), "sky", "1. read the 32-bit word that holds the bf16"),
    (("shr.", "cvt.u16"), "grey", "2. take our 16-bit half out of the word"),
    (("mov.b16", "fma.", "add."), "orange", "3. add in registers"),
    (("cvt.u32", "shl.", "and.", "or."), "grey", "4. put the new half back into the word"),
    (("atom.",), "red", "5. compare-and-swap: write only if the word\n    is still what we read"),
    (("setp.", "mov.b32", "@%p"), "purple", "6. someone changed it first? go back to the label"),
)


def _instructions(ptx: str) -> list[str]:
    """The PTX lines without debug info, comments and blank lines, tabs made spaces."""
    out = []
    for line in ptx.splitlines():
        code = line.split("//")[0].rstrip()
        if not code.strip() or code.strip().startswith((".loc", ".file")):
            continue
        out.append(re.sub(r"\s+", " ", code.strip()))
    return out


def cas_loop(ptx: str) -> tuple[list[str], int]:
    """(the first compare-and-swap loop: the read before it, its label, its body up to the branch
    back; how many compare-and-swap instructions the whole listing has)."""
    lines = _instructions(ptx)
    count = sum(".cas." in line for line in lines)
    at = next(i for i, line in enumerate(lines) if line.startswith("atom.") and ".cas." in line)
    top = max(i for i in range(at) if re.fullmatch(r"\$\w+:", lines[i]))
    start = max(i for i in range(top) if lines[i].startswith("ld."))
    end = next(i for i in range(at, len(lines)) if re.search(r"\bbra\b", lines[i]))
    return lines[start:end + 1], count


def reduction(ptx: str, before: int = 2) -> tuple[list[str], int]:
    """(the first ``red.`` instruction with the ``before`` instructions ahead of it; how many
    ``red.`` instructions the whole listing has)."""
    lines = _instructions(ptx)
    found = [i for i, line in enumerate(lines) if re.match(r"(@%p\w+ )?red\.", line)]
    at = found[0]
    return [line for line in lines[at - before:at + 1] if "inline asm" not in line], len(found)


def _step(line: str):
    if re.fullmatch(r"\$\w+:", line):
        return "light", "the loop starts at this label"
    opcode = line.split(" ")[0] if not line.startswith("@") else " ".join(line.split(" ")[:2])
    for prefixes, colour, text in STEPS:
        if any(opcode.startswith(p) or (p == "@%p" and line.startswith("@%p") and "bra" in line)
               for p in prefixes):
            return colour, text
    return None


def _listing(ax, lines, title, *, annotate):
    n = len(lines)
    seen = set()
    for i, line in enumerate(lines):
        y = n - 1 - i
        if annotate:
            step = _step(line)
        elif "red." in line:
            step = "green", "the memory system does the add: one instruction, no loop"
        else:
            step = "light", "the value to add, computed in fp32 and rounded to bf16"
        if step:
            colour, text = step
            box(ax, -0.1, y - 0.45, 10.3, 0.9, face=COLOURS[colour], edge="none", alpha=0.22)
            if text not in seen:
                seen.add(text)
                label(ax, 10.4, y, text, ha="left", fontsize=8.5)
        label(ax, 0 if line.endswith(":") else 0.3, y, line, ha="left", fontsize=8.5,
              family="DejaVu Sans Mono", fontweight="bold" if ("atom." in line or "red." in line)
              else "normal")
    ax.set_xlim(-0.2, 17.5)
    ax.set_ylim(-0.8, n)
    ax.axis("off")
    ax.set_title(title, loc="left")


def draw(facts: dict) -> bytes:
    """The lab 09 picture as PNG bytes, from the PTX compiled when the facts were measured."""
    ptx = facts["lab09"]
    loop, n_cas = cas_loop(ptx["sm_80"])
    native, n_red = reduction(ptx["sm_90"])
    rows = len(loop) + len(native) + 3
    with figure(13, 0.36 * rows + 1.6, nrows=2,
                gridspec_kw={"height_ratios": [len(loop) + 1, len(native) + 1.5]}) as (fig, axes):
        _listing(axes[0], loop, f"SM 8.0 (A100): the add is emulated by a retry loop "
                 f"({n_cas} such loops in the whole kernel)", annotate=True)
        _listing(axes[1], native, f"SM 9.0 (H100, H200): one native reduction "
                 f"({n_red} red. instructions in the kernel)", annotate=False)
        fig.suptitle("tl.atomic_add(grad_value_ptr + ..., ..., sem=\"relaxed\") with a bfloat16 "
                     "grad_value, in the PTX of the lab 08 backward kernel", fontsize=11)
        fig.tight_layout()
        return png_bytes(fig)
