"""Task 6.1: H read from the second column of spatial_shapes and W from the first."""
import triton
import triton.language as tl


@triton.jit
def msda_forward_chunked_kernel(value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, out_ptr,
                                Q, S, M: tl.constexpr, D: tl.constexpr, L: tl.constexpr,
                                K: tl.constexpr, BLOCK_Q: tl.constexpr, CHUNK_D: tl.constexpr):
    b = (tl.program_id(1) // M).to(tl.int64)
    m = tl.program_id(1) % M
    qs = (tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)).to(tl.int64)
    ds = tl.program_id(2) * CHUNK_D + tl.arange(0, CHUNK_D)
    q_ok = qs < Q
    d_ok = ds < D
    row = (b * Q + qs) * M + m
    vbase = value_ptr + b * S * M * D + m * D + ds[None, :]
    total = tl.zeros((BLOCK_Q, CHUNK_D), dtype=tl.float32)
    for l in tl.static_range(L):
        hh = tl.load(shapes_ptr + 2 * l + 1)
        ww = tl.load(shapes_ptr + 2 * l)
        s0 = tl.load(starts_ptr + l)
        for k in tl.static_range(K):
            p = row * (L * K) + l * K + k
            px = tl.load(loc_ptr + 2 * p, mask=q_ok, other=0.0).to(tl.float32) * ww - 0.5
            py = tl.load(loc_ptr + 2 * p + 1, mask=q_ok, other=0.0).to(tl.float32) * hh - 0.5
            a = tl.load(attn_ptr + p, mask=q_ok, other=0.0).to(tl.float32)
            fx = tl.floor(px)
            fy = tl.floor(py)
            ax = px - fx
            ay = py - fy
            c0 = fx.to(tl.int64)
            r0 = fy.to(tl.int64)
            for dy in tl.static_range(2):
                for dx in tl.static_range(2):
                    r = r0 + dy
                    c = c0 + dx
                    wt = (ax if dx == 1 else 1 - ax) * (ay if dy == 1 else 1 - ay) * a
                    ok = q_ok & (r >= 0) & (r < hh) & (c >= 0) & (c < ww)
                    v = tl.load(vbase + ((s0 + r * ww + c) * M * D)[:, None],
                                mask=ok[:, None] & d_ok[None, :], other=0.0)
                    total += wt[:, None] * v.to(tl.float32)
    tl.store(out_ptr + (row * D)[:, None] + ds[None, :], total.to(out_ptr.dtype.element_ty),
             mask=q_ok[:, None] & d_ok[None, :])
