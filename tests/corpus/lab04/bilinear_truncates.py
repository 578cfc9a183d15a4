"""Task 4.3: the corner found by casting to int (truncation toward zero), not floor."""
import triton
import triton.language as tl


@triton.jit
def bilinear_kernel(value_ptr, loc_ptr, out_ptr, Q, H, W, D: tl.constexpr,
                    BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr):
    q = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    d = tl.arange(0, BLOCK_D)
    mask_q = q < Q
    mask_d = d < D
    px = tl.load(loc_ptr + q * 2, mask=mask_q, other=0.0).to(tl.float32) * W - 0.5
    py = tl.load(loc_ptr + q * 2 + 1, mask=mask_q, other=0.0).to(tl.float32) * H - 0.5
    fx = px.to(tl.int32).to(tl.float32)
    fy = py.to(tl.int32).to(tl.float32)
    ax = px - fx
    ay = py - fy
    c0 = fx.to(tl.int32)
    r0 = fy.to(tl.int32)
    acc = tl.zeros((BLOCK_Q, BLOCK_D), dtype=tl.float32)
    for dy in tl.static_range(2):
        for dx in tl.static_range(2):
            r = r0 + dy
            c = c0 + dx
            wy = ay if dy == 1 else 1 - ay
            wx = ax if dx == 1 else 1 - ax
            ok = mask_q & (r >= 0) & (r < H) & (c >= 0) & (c < W)
            ptr = value_ptr + (r * W + c)[:, None] * D + d[None, :]
            v = tl.load(ptr, mask=ok[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
            acc += (wx * wy)[:, None] * v
    tl.store(out_ptr + q[:, None] * D + d[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask_q[:, None] & mask_d[None, :])
