"""Task 2.1: the offset built from numpy int32 numbers (wraps past 2**31 - 1)."""
import numpy as np


def flat_index(b, s, m, d, S, M, D):
    i32 = np.int32
    with np.errstate(over="ignore"):
        off = ((i32(b) * i32(S) + i32(s)) * i32(M) + i32(m)) * i32(D) + i32(d)
    return int(off)
