"""Wrong versions of MSDA that the graded tests must tell apart from a right one."""

from msda_labs.mistakes.forward import msda_variants, pixel_reads, pixel_variants
from msda_labs.mistakes.gradients import grad_variants, lost_update_grad_value

__all__ = ["msda_variants", "pixel_reads", "pixel_variants", "grad_variants",
           "lost_update_grad_value"]
