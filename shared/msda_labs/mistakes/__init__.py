"""Wrong versions of MSDA that the graded tests must tell apart from a right one.

Every known mistake is a small named function in a catalogue (:mod:`.registry`): forward ones in
:mod:`.forward` (``FORWARD``), backward ones in :mod:`.gradients` (``GRAD``). The lab tests import
only the names below (loaded on first use).
"""

from __future__ import annotations

import importlib

_HOMES = {
    "msda_labs.mistakes.forward": ("FORWARD", "FORWARD_MISTAKES", "LAYOUT_MISTAKES", "MISTAKES",
                                   "PIXEL_MISTAKES", "msda_variant", "msda_variants",
                                   "pixel_reads", "pixel_variants"),
    "msda_labs.mistakes.gradients": ("GRAD", "GRAD_MISTAKES", "grad_variants",
                                     "lost_update_grad_value", "msda_backward_variant"),
}
__all__ = ["FORWARD", "FORWARD_MISTAKES", "GRAD", "GRAD_MISTAKES", "LAYOUT_MISTAKES", "MISTAKES",
           "PIXEL_MISTAKES", "grad_variants", "lost_update_grad_value", "msda_backward_variant",
           "msda_variant", "msda_variants", "pixel_reads", "pixel_variants"]


def __getattr__(name: str):
    # Loaded on first use: the catalogues import torch, and tools that only need one torch-free
    # module of this package (gpu.prove reads mistakes.submissions) should not pay for it.
    for module, names in _HOMES.items():
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'msda_labs.mistakes' has no attribute {name!r}")
