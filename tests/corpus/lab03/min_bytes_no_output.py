"""Task 3.2: the output write left out of the count."""


def forward_min_bytes(B=4, Q=300, M=8, D=32, L=4, K=4, itemsize=2):
    n = B * Q * M * L * K
    reads = n * (4 * D + 3)
    return reads * itemsize
