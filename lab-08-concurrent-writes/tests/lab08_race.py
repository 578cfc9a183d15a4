"""The grader's own racy histogram kernel, imported only inside the isolated worker.

Task 8.1 is graded against what this copy of the racy kernel really returns, so a submission that
edits its own ``histogram_racy`` cannot move the target. Kept out of the test module so that the
judge process never imports triton.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def racy_histogram_kernel(idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Program pid adds one to out[idx[i]] for its BLOCK elements with a plain load + store."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    bins = tl.load(idx_ptr + offs, mask=mask, other=0)
    counts = tl.load(out_ptr + bins, mask=mask, other=0.0)
    tl.store(out_ptr + bins, counts + 1.0, mask=mask)


def racy_histogram(idx: torch.Tensor, n_bins: int, BLOCK: int) -> torch.Tensor:
    out = torch.zeros(n_bins, dtype=torch.float32, device=idx.device)
    n = idx.numel()
    racy_histogram_kernel[(triton.cdiv(n, BLOCK),)](idx, out, n, BLOCK=BLOCK)
    return out


def warm_up() -> None:
    """Pay the interpreter's one-off costs once, in the worker, before it forks a child per test."""
    racy_histogram(torch.zeros(4, dtype=torch.int64), 2, 4)
