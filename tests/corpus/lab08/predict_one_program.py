"""Task 8.1: all elements taken as one program: each bin counts at most once."""
import torch


def predict_racy_histogram(idx, n_bins, BLOCK):
    counts = torch.zeros(n_bins, dtype=torch.float32, device=idx.device)
    counts[torch.unique(idx.long())] = 1.0
    return counts
