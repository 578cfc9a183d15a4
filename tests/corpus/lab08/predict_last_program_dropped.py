"""Task 8.1: the programs walked with range(0, n - BLOCK, BLOCK): the last one is dropped."""
import torch


def predict_racy_histogram(idx, n_bins, BLOCK):
    counts = torch.zeros(n_bins, dtype=torch.float32, device=idx.device)
    n = idx.numel()
    for first in range(0, n - BLOCK, BLOCK):
        seen = torch.unique(idx[first:first + BLOCK].long())
        counts[seen] += 1
    return counts
