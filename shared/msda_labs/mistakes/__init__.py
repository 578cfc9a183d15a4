"""Wrong versions of MSDA that the graded tests must tell apart from a right one.

Every known mistake is a small named function in a catalogue (:mod:`.registry`): forward ones in
:mod:`.forward` (``FORWARD``), backward ones in :mod:`.gradients` (``GRAD``). The lab tests import
only the names below.
"""

from msda_labs.mistakes.forward import (
    FORWARD,
    FORWARD_MISTAKES,
    MISTAKES,
    PIXEL_MISTAKES,
    msda_variant,
    msda_variants,
    pixel_reads,
    pixel_variants,
)
from msda_labs.mistakes.gradients import (
    GRAD,
    GRAD_MISTAKES,
    grad_variants,
    lost_update_grad_value,
    msda_backward_variant,
)

__all__ = ["FORWARD", "FORWARD_MISTAKES", "GRAD", "GRAD_MISTAKES", "MISTAKES", "PIXEL_MISTAKES",
           "grad_variants", "lost_update_grad_value", "msda_backward_variant", "msda_variant",
           "msda_variants", "pixel_reads", "pixel_variants"]
