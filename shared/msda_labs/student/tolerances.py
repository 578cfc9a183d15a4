"""The one tolerance table: how close a result of each dtype must come to the float64 spec.

The grader (``msda_labs.truth.cases`` hands these on) and ``python labNN.py`` compare with the
same numbers.
"""

from __future__ import annotations

import torch

__all__ = ["FWD_TOL", "BWD_TOL", "tolerance"]

# rtol, atol per dtype. The kernels accumulate in fp32, so half-precision forward error is the
# rounding of inputs and output; gradients are looser (atomic order, the W/H chain factor).
FWD_TOL = {
    torch.float64: (1e-9, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (3e-2, 3e-2),
}
BWD_TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (3e-2, 3e-2),
    torch.bfloat16: (8e-2, 8e-2),
}


def tolerance(dtype: torch.dtype, backward: bool = False) -> tuple[float, float]:
    """(rtol, atol) for comparing a result of this dtype with the fp32/fp64 reference."""
    table = BWD_TOL if backward else FWD_TOL
    if dtype not in table:
        raise ValueError(f"no tolerance for dtype {dtype}; expected one of {list(table)}")
    return table[dtype]
