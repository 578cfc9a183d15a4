"""The pictures of the handouts, drawn by code so that they never drift from the course.

Each picture is one function that returns PNG bytes; :data:`PICTURES` says which lab shows it,
where it lives (``lab-NN-*/img/<name>.png``) and its alt text. ``python -m msda_labs pictures``
redraws them all; ``--check`` only compares what the code draws now with the checked-in files.
Some pictures draw facts measured by running the course's own kernels (``facts.py``: Triton's
interpreter and its ahead-of-time compiler, each in a short subprocess).

matplotlib (requirements-dev.txt) is needed to draw; importing this package does not need it.
"""

from __future__ import annotations

import importlib
import io
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Picture", "PICTURES", "render", "compare_png", "sync_pictures", "image_line"]


@dataclass(frozen=True)
class Picture:
    name: str  # the file is lab folder / img / <name>.png
    lab: str  # the lab whose handout shows it
    module: str  # the module of this package whose draw() makes it
    facts: bool  # draw() takes the measured facts (facts.py)
    alt: str  # the alt text in the handout

    def path(self, root: Path, folder: str) -> Path:
        return Path(root) / folder / "img" / f"{self.name}.png"


PICTURES = (
    Picture("bilinear-corners", "lab01", "corners", False,
            "Two samples on a 3 by 4 pixel grid. Left: a sample inside the image, its four "
            "corner pixels and their weights, each the area of the rectangle opposite the "
            "corner. Right: a sample at x_pix = -0.3, where floor gives column -1; the two "
            "corners in that column lie outside the image and add zero."),
    Picture("flat-layout", "lab02", "layout", False,
            "Top: a value tensor of shape (2, 5, 2, 2) drawn as one flat buffer of 40 numbered "
            "elements, grouped by head, pixel and batch, with value[1, 3, 1, 0] at offset 34. "
            "Bottom: the largest flat offset of three real tensors on a log scale against the "
            "int32 limit 2,147,483,647; the 4K video pyramid lies past it."),
    Picture("warp-sectors", "lab03", "sectors", False,
            "Six rows, one warp load each, drawn as the 32-byte sectors it touches: contiguous "
            "fp32 touches 4 full sectors, strided by 2 touches 8 half-used ones, strided by 8 "
            "and random touch 32 sectors using an eighth of each; the MSDA query-block tiling "
            "touches 2 full sectors and the point-parallel tiling 32 sectors, a sixteenth used."),
    Picture("copy2d-memory", "lab04", "memory", True,
            "Two 8 by 8 grids of lanes, for the loads from x and the stores into out of "
            "copy2d_kernel on a 5 by 7 matrix in 4 by 4 tiles: the 35 lanes inside the matrix "
            "each touch their own element, coloured by program; the 29 lanes past the edges are "
            "masked off and touch nothing; no lane touches memory outside the tensors."),
    Picture("program-grid", "lab05", "grid", True,
            "Left: the launch grid of the lab 05 kernel, 3 query blocks by 6 (batch, head) "
            "pairs, with program (2, 4) highlighted. Middle: that program's 4 by 8 tile of the "
            "output for batch 1, head 1; the rows past Q and the channels past D are masked off. "
            "Right: the loop the program runs over levels and points."),
    Picture("wide-vs-narrow", "lab06", "race", False,
            "Left: one 64-byte corner row split among programs for CHUNK_D 32, 16, 8, 4 and 2; "
            "the narrower the chunk, the more programs and the more sectors delivered, up to 16 "
            "sectors for 64 useful bytes. Right: device times measured on an H200 at the "
            "decoder preset in fp16, from 144.6 us at CHUNK_D 2 down to 13.2 us at CHUNK_D 32."),
    Picture("lost-updates", "lab08", "histogram", True,
            "Top: the 16 lanes of one program of the racy histogram: each loads the count of "
            "its bin, all read 0 and all store 1, so lanes sharing a bin lose their updates. "
            "Bottom: for 40 indices into 6 bins, the expected counts beside the much smaller "
            "counts the racy kernel returned in Triton's interpreter."),
    Picture("atomic-ptx", "lab09", "ptx", True,
            "Two PTX excerpts of the same bfloat16 atomic add. SM 8.0: a retry loop that "
            "reads a 32-bit word, adds in registers, writes it back with a compare-and-swap "
            "and branches back if another thread changed it. SM 9.0: one red.global.add.bf16 "
            "instruction."),
)


def image_line(picture: Picture) -> str:
    """The Markdown line that shows the picture in its handout."""
    return f"![{picture.alt}](img/{picture.name}.png)"


def render(pictures=PICTURES, facts: dict | None = None) -> dict[str, bytes]:
    """{name: PNG bytes} for ``pictures``; measures the facts once if any picture needs them."""
    if facts is None and any(p.facts for p in pictures):
        from msda_labs.authoring.pictures.facts import measure_all

        facts = measure_all()
    out = {}
    for picture in pictures:
        module = importlib.import_module(f"{__name__}.{picture.module}")
        out[picture.name] = module.draw(facts) if picture.facts else module.draw()
    return out


def compare_png(old: bytes, new: bytes, tolerance: float = 3 / 255) -> str | None:
    """None when the two PNGs show the same drawing: equal bytes, or the same size with every
    pixel within ``tolerance`` (0..1 scale; another PNG encoder, or anti-aliasing rounded one
    step differently); else what differs. Any changed text or line moves some pixel by far more.
    """
    if old == new:
        return None
    import numpy as np
    from matplotlib import image

    a, b = image.imread(io.BytesIO(old)), image.imread(io.BytesIO(new))
    if a.shape != b.shape:
        return f"size {a.shape[1]}x{a.shape[0]} is now {b.shape[1]}x{b.shape[0]}"
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64)).max(axis=-1)
    changed = int((diff > tolerance).sum())
    return None if not changed else f"{changed} pixels differ"


def sync_pictures(root: Path, folders: dict[str, str], check: bool = False,
                  names=None) -> tuple[list[str], list[str]]:
    """Draw every picture (or those named: picture names or lab ids) and write it where it
    differs. ``folders`` maps a lab id to its folder; with ``check`` nothing is written.

    Returns (the files that differed, the handouts that do not show their picture with its alt
    text: those need a hand edit).
    """
    chosen = [p for p in PICTURES if not names or p.name in names or p.lab in names]
    unknown = set(names or ()) - {p.name for p in PICTURES} - {p.lab for p in PICTURES}
    if unknown:
        raise ValueError(f"no picture or lab with pictures named {sorted(unknown)}; the "
                         f"pictures are {[p.name for p in PICTURES]}")
    drawn = render(chosen)
    drift, problems = [], []
    for picture in chosen:
        path = picture.path(root, folders[picture.lab])
        old = path.read_bytes() if path.is_file() else None
        why = "missing" if old is None else compare_png(old, drawn[picture.name])
        if why:
            drift.append(f"{path} ({why})")
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(drawn[picture.name])
        handout = Path(root) / folders[picture.lab] / "README.md"
        if handout.is_file() and image_line(picture) not in handout.read_text():
            problems.append(f"{handout} does not show img/{picture.name}.png with its alt text; "
                            f"add this line where the picture explains the text:\n"
                            f"{image_line(picture)}")
    return drift, problems
