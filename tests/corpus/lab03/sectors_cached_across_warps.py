"""Task 3.1: distinct sectors over the whole pattern, as if a sector fetched once were cached."""
import numpy as np


def sectors_touched(pattern):
    everything = np.concatenate([np.asarray(w) for w in pattern.warps])
    return int(len(set((everything // SECTOR_BYTES).tolist())))  # noqa: F821
