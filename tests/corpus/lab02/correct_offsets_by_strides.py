"""Tasks 2.1 and 2.3 right, written another way than the reference: offsets as a sum of strides,
the last offset from flat_index itself, and the int32 test against the limit's count."""


def flat_index(b, s, m, d, S, M, D):
    stride_d = 1
    stride_m = D * stride_d
    stride_s = M * stride_m
    stride_b = S * stride_s
    return b * stride_b + s * stride_s + m * stride_m + d * stride_d


def max_flat_index(B, S, M, D):
    return flat_index(B - 1, S - 1, M - 1, D - 1, S, M, D)


def overflows_int32(B, S, M, D):
    int32_values = 2 ** 31  # offsets 0 .. 2**31 - 1 fit
    return B * S * M * D > int32_values
