"""Task 2.1: the axes multiplied in the order (b, m, s, d), heads before pixels."""


def flat_index(b, s, m, d, S, M, D):
    return b * (M * S * D) + m * (S * D) + s * D + d
