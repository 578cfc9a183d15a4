"""Judge side of lab 00: grading a layer (or ``deform_attend``) apart from the parts it is built on.

The child runs the function under test twice in one request (``probes_lab00``): with the parts
replaced by stand-ins that read a map in a way of their own (``probes_lab00.smooth_msda``: not
the answer to any task), and with your own parts. The judge computes its reference both ways, in
float64: with the stand-in reader put in place of the reference's, and with the spec itself
(``truth_lab00.py``). A test passes when either run matches its reference, so a bug in a part
costs points in that part's task only, and no ground truth ever reaches the child.
"""

from msda_labs.grading.judge import probes

__all__ = ["expect_either", "STAND_IN_NOTE"]

STAND_IN_NOTE = ("graded with the grader's stand-in reader in place of your bilinear_sample, "
                 "deform_attend and msda, so that a bug in those counts in their own tasks only")


def expect_either(result, check_stand_in, check_own) -> None:
    """The stand-in run passes ``check_stand_in`` or your own run ``check_own``
    (:func:`msda_labs.grading.judge.probes.expect_either`)."""
    probes.expect_either(result, check_stand_in, check_own, note=STAND_IN_NOTE)
