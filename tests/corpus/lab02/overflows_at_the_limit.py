"""Task 2.3: >= where > is meant: the offset 2**31 - 1 still fits."""


def overflows_int32(B, S, M, D):
    biggest = B * S * M * D - 1
    return bool(biggest >= 2 ** 31 - 1)
