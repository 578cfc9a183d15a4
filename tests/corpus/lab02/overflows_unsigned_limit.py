"""Task 2.3: int32 taken as unsigned: compared with 2**32 - 1."""


def overflows_int32(B, S, M, D):
    return max_flat_index(B, S, M, D) > 4294967295  # noqa: F821
