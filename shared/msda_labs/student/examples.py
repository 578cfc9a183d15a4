"""Example inputs for running a lab module by hand (``python labNN.py``).

These are ordinary seeded inputs, the same kind the graded tests build; they hold no answers, so a
lab module may use them. The graded cases themselves live with the grader (``msda_labs.truth``).
"""

from __future__ import annotations

import torch

from msda_labs.truth.cases import MULTI_LEVEL, MSDAInputs, make_inputs


def example_inputs(dtype: torch.dtype = torch.float32, device="cpu") -> MSDAInputs:
    """Seeded MSDA inputs with two levels: (value, spatial_shapes, level_start_index,
    sampling_locations, attention_weights), cast to ``dtype`` and placed on ``device``."""
    return make_inputs(MULTI_LEVEL, dtype, device)
