"""Lab 08's ground truth for Task 8.1, on the judge's side: the racy histogram's rule and the
known wrong models of the race, and nothing else.

The rule is the answer to Task 8.1 (predict what the racy kernel leaves behind), so lab 08's
template repository does not carry this file: the export writes in its place a module that looks
up what these functions gave on the calls the tests make (``truth_lab08.pt``, recorded by
``python scripts/record_truth.py lab08``; :mod:`msda_labs.grading.judge.owntruth`). A grade with a
secret seed draws other indices and runs on the judge's copy of the lab, which computes them.
"""

import torch

from msda_labs.grading.judge.guards import cdiv
from msda_labs.grading.judge.owntruth import judged

__all__ = ["racy_rule", "wrong_models"]
# No module of the kit answers Task 8.1; the answer lives in this file only.
ANSWERING_MODULES = ()

_judged = judged(__file__, "lab08")


def _by_program(idx: torch.Tensor, n_bins: int, program: torch.Tensor) -> torch.Tensor:
    """One +1 per (program, distinct bin) pair, for any assignment of elements to programs."""
    held = torch.zeros(int(program.max()) + 1 if program.numel() else 1, n_bins)
    held[program, idx] = 1.0
    return held.sum(0)


@_judged
def racy_rule(idx: torch.Tensor, n_bins: int, block: int) -> torch.Tensor:
    """The judge's own prediction: each program adds one to each distinct bin it holds."""
    return _by_program(idx, n_bins, torch.arange(idx.numel()) // block)


@_judged
def wrong_models(idx: torch.Tensor, n_bins: int, block: int) -> dict:
    """The known wrong models of the race, {name: what that model predicts}: every graded case
    must tell each of them from the rule (``judge_lab08.separating_indices``)."""
    n = idx.numel()
    programs = cdiv(n, block)
    pos = torch.arange(n)
    exact = torch.bincount(idx, minlength=n_bins).float()
    models = {
        "exact": exact,
        "one_block": (exact > 0).float(),
        "strided": _by_program(idx, n_bins, pos % programs),
        "clamped": exact.clamp(max=programs),
        "block_minus_1": _by_program(idx, n_bins, pos // max(block - 1, 1)),
        "block_plus_1": _by_program(idx, n_bins, pos // (block + 1)),
    }
    pow2 = 1 << (block - 1).bit_length()
    if pow2 != block:
        models["pow2_block"] = _by_program(idx, n_bins, pos // pow2)
    return models
