"""What every picture shares: one fixed style, colours, and a PNG writer that gives the same bytes
for the same drawing (no timestamp, no software tag, a fixed resolution).

matplotlib is a development dependency of the kit (requirements-dev.txt), so it is imported only
inside these functions; importing the package never needs it.
"""

from __future__ import annotations

import contextlib
import io

__all__ = ["COLOURS", "figure", "png_bytes", "box", "label"]

# Okabe and Ito's palette: distinguishable with the common colour-vision deficiencies.
COLOURS = {
    "blue": "#0072B2",
    "orange": "#E69F00",
    "green": "#009E73",
    "red": "#D55E00",
    "purple": "#CC79A7",
    "sky": "#56B4E9",
    "yellow": "#F0E442",
    "grey": "#999999",
    "light": "#E8E8E8",
    "ink": "#222222",
}

DPI = 100


@contextlib.contextmanager
def figure(width: float, height: float, **subplots):
    """A fresh figure in the kit's style: ``with figure(9, 4, ncols=2) as (fig, axes): ...``.

    The style ignores the user's matplotlibrc, so every machine draws the same picture.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    style = {"font.family": "DejaVu Sans", "font.size": 10, "axes.titlesize": 11,
             "axes.titleweight": "bold", "figure.dpi": DPI, "savefig.dpi": DPI,
             "axes.spines.top": False, "axes.spines.right": False,
             "path.simplify": False, "svg.hashsalt": "msda"}
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(style)
        fig, axes = plt.subplots(figsize=(width, height), **subplots)
        try:
            yield fig, axes
        finally:
            plt.close(fig)


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes, free of anything that changes from run to run."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None},
                facecolor="white")
    return buffer.getvalue()


def box(ax, x, y, w, h, *, face="white", edge=None, hatch=None, lw=1.0, z=1, alpha=1.0):
    """A rectangle with its lower-left corner at (x, y) in data units."""
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor=edge or COLOURS["ink"],
                           hatch=hatch, linewidth=lw, zorder=z, alpha=alpha))


def label(ax, x, y, text, **kwargs):
    """Centred text in data units (keyword arguments override the defaults)."""
    options = {"ha": "center", "va": "center", "fontsize": 9, "zorder": 5}
    options.update(kwargs)
    return ax.text(x, y, text, **options)
