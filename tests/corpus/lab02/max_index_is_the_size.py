"""Task 2.3: the largest offset taken as the element count (no - 1)."""


def max_flat_index(B, S, M, D):
    return B * S * M * D
