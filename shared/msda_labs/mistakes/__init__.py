"""Wrong versions of MSDA that the graded tests must tell apart from a right one."""

from msda_labs.mistakes.forward import msda_variants, pixel_reads, pixel_variants

__all__ = ["msda_variants", "pixel_reads", "pixel_variants"]
