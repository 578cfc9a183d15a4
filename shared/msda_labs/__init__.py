"""msda_labs: the runtime, ground truth, reference solutions ("chips") and grader of the MSDA
Triton course kit. Student modules may import only :mod:`msda_labs.runtime`,
:mod:`msda_labs.stage` and :mod:`msda_labs.memsim` (and, through the stage loader, the chips of
earlier labs); the grader flags anything else."""

__version__ = "0.1.0"
