"""The graded cases: the named MSDA cases every lab is graded on.

How a case's random inputs are drawn (:class:`Case`, :func:`make_inputs`, the salted
:func:`seeded_generator`) and the tolerance table are public and live in
:mod:`msda_labs.student.cases`, so that the process running a submission can draw inputs without
holding anything of the grader's; they are re-exported here for the judge's code.
"""

from __future__ import annotations

from msda_labs.student.cases import (
    BWD_TOL,
    FWD_TOL,
    Case,
    MSDAInputs,
    case_salt,
    image_and_points,
    make_inputs,
    seeded_generator,
    tolerance,
)

__all__ = [
    "Case",
    "MSDAInputs",
    "make_inputs",
    "STANDARD_CASES",
    "EXACT_KNOTS",
    "DECODER",
    "FWD_TOL",
    "BWD_TOL",
    "tolerance",
    "case_salt",
    "seeded_generator",
    "image_and_points",
]

MULTI_LEVEL = Case("multi_level", B=2, Q=5, M=2, D=4, shapes=((5, 7), (3, 4)), K=3)
SINGLE = Case("single_level_point", B=1, Q=7, M=1, D=3, shapes=((4, 6),), K=1)
OUT_OF_BOUNDS = Case("out_of_bounds", B=1, Q=4, M=2, D=5, shapes=((6, 5), (3, 3)), K=2,
                     loc_lo=-0.4, loc_hi=1.4)
EXACT_KNOTS = Case("exact_knots", B=1, Q=6, M=2, D=3, shapes=((4, 8), (2, 4)), K=2, seed=1,
                   knots=True)
# The standard edge cases: multi-level + non-square, single level and point with odd D,
# out-of-bounds with odd D, exact knots (floor at integers, the 0 and 1 borders).
STANDARD_CASES = (MULTI_LEVEL, SINGLE, OUT_OF_BOUNDS, EXACT_KNOTS)

# The decoder preset the text and lab 03 use for sizes (GPU stages run it for real).
DECODER = Case("decoder", B=4, Q=300, M=8, D=32,
               shapes=((100, 167), (50, 84), (25, 42), (13, 21)), K=4)
