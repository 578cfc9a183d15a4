"""Task 8.1: the prediction is the true histogram (no update lost inside a program)."""
import torch


def predict_racy_histogram(idx, n_bins, BLOCK):
    return torch.bincount(idx.long(), minlength=n_bins).to(torch.float32)
