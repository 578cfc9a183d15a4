"""Task 3.1: a warp's sectors counted as the span from its lowest to its highest sector, so the
gaps of a gather count too (an overcount)."""


def sectors_touched(pattern):
    count = 0
    for addrs in pattern.warps:
        if len(addrs) == 0:
            continue
        count += int(addrs.max() // SECTOR_BYTES - addrs.min() // SECTOR_BYTES) + 1  # noqa: F821
    return count
