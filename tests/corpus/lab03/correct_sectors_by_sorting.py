"""Task 3.1 right, written another way than the reference: a warp's distinct sectors counted by
sorting its sector numbers and counting where they change; the efficiency from the lanes."""
import numpy as np

from msda_labs.student.memsim import SECTOR_BYTES


def sectors_touched(pattern):
    count = 0
    for addresses in pattern.warps:
        sectors = np.sort(np.asarray(addresses, dtype=np.int64) // SECTOR_BYTES)
        if sectors.size:
            count += 1 + int(np.count_nonzero(sectors[1:] != sectors[:-1]))
    return count


def efficiency(pattern):
    wanted = sum(len(addresses) for addresses in pattern.warps) * pattern.itemsize
    return float(wanted) / float(sectors_touched(pattern) * SECTOR_BYTES)
