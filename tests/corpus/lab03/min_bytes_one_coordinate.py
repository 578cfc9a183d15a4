"""Task 3.2: the sampling parameters counted as 2 numbers (the weight forgotten)."""


def forward_min_bytes(B=4, Q=300, M=8, D=32, L=4, K=4, itemsize=2):
    per_sample = 4 * D + 2
    out_elems = B * Q * M * D
    return (B * Q * M * L * K * per_sample + out_elems) * itemsize
