"""Task 3.1: efficiency with integer division (//), which gives 0 for any partial use."""


def efficiency(pattern):
    delivered = sectors_touched(pattern) * SECTOR_BYTES  # noqa: F821
    return float(pattern.useful_bytes // delivered)
