"""Lab 11 - Toy: a lab that exists only to show what adding a lab takes.

Goal: scale a tensor by two.

In this lab you will:
  * write one function and see it graded.
"""

import torch


def double(x: torch.Tensor) -> torch.Tensor:
    """Twice ``x``, same shape and dtype.

    Args:
        x: any tensor.

    Returns:
        ``2 * x``.
    """
    # BEGIN SOLUTION
    return x * 2
    # STARTER
    # # TODO(Task 11.1): return twice x (about 1 line).
    # raise NotImplementedError("Task 11.1: double")
    # END SOLUTION
