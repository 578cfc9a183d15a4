"""The MSDA forward's minimum memory traffic (lab 03, Task 3.2), and the sizes it is asked about
by default. Apart from :mod:`msda_labs.truth.memory` (sector counts), which answers lab 03's own
Task 3.1 and so stays out of lab 03's template; the mistake library builds on this module.
"""

from __future__ import annotations

__all__ = ["DEFAULT_SIZES", "forward_bytes"]

# forward_min_bytes' defaults: the decoder preset.
DEFAULT_SIZES = {"B": 4, "Q": 300, "M": 8, "D": 32, "L": 4, "K": 4, "itemsize": 2}


def forward_bytes(B, Q, M, D, L, K, itemsize) -> tuple[int, int, int]:
    """The MSDA forward's minimum traffic in bytes: (corner rows, sampling parameters, output).

    Each of the B * Q * M * L * K samples reads four corner rows of D channels and three numbers
    (x, y, weight); the (B, Q, M, D) output is written once.
    """
    samples = B * Q * M * L * K
    return samples * 4 * D * itemsize, samples * 3 * itemsize, B * Q * M * D * itemsize
