"""Task 5.6: the sum kept in the output's dtype (fp16 for fp16 inputs)."""
import triton
import triton.language as tl


@triton.jit
def msda_forward_kernel(value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, out_ptr, Q, S,
                        M: tl.constexpr, D: tl.constexpr, L: tl.constexpr, K: tl.constexpr,
                        BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr):
    bm = tl.program_id(1)
    b = (bm // M).to(tl.int64)
    m = bm % M
    q = (tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    q_ok = q < Q
    d_ok = d < D
    row = (b * Q + q) * M + m
    base = value_ptr + b * S * M * D + m * D + d[None, :]
    total = tl.zeros((BLOCK_Q, BLOCK_D), dtype=out_ptr.dtype.element_ty)
    for l in tl.static_range(L):
        H = tl.load(shapes_ptr + l * 2)
        W = tl.load(shapes_ptr + l * 2 + 1)
        s0 = tl.load(starts_ptr + l)
        for k in tl.static_range(K):
            x, y, a = load_point(loc_ptr, attn_ptr, row * (L * K) + l * K + k, q_ok, H, W)  # noqa: F821
            total += sample_point(base, s0, H, W, x, y, a, q_ok, d_ok, M, D).to(out_ptr.dtype.element_ty)  # noqa: F821
    dest = out_ptr + (row * D)[:, None] + d[None, :]
    tl.store(dest, total.to(out_ptr.dtype.element_ty), mask=q_ok[:, None] & d_ok[None, :])
