"""Task 8.3: grad_value updated with a load, an add and a store (updates lost where samples share a pixel)."""
import triton
import triton.language as tl


@triton.jit
def msda_backward_kernel(value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, grad_out_ptr,
                         grad_value_ptr, grad_loc_ptr, grad_attn_ptr, Q, S, M: tl.constexpr,
                         D: tl.constexpr, L: tl.constexpr, K: tl.constexpr,
                         BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr):
    b = (tl.program_id(1) // M).to(tl.int64)
    m = tl.program_id(1) % M
    q = (tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    q_ok = q < Q
    d_ok = d < D
    row = (b * Q + q) * M + m
    g = tl.load(grad_out_ptr + (row * D)[:, None] + d[None, :],
                mask=q_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
    base = b * S * M * D + m * D + d[None, :]
    for l in tl.static_range(L):
        hh = tl.load(shapes_ptr + 2 * l)
        ww = tl.load(shapes_ptr + 2 * l + 1)
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
            ok_c0 = (c0 >= 0) & (c0 < ww)
            ok_c1 = (c0 + 1 >= 0) & (c0 + 1 < ww)
            ok_r0 = q_ok & (r0 >= 0) & (r0 < hh)
            ok_r1 = q_ok & (r0 + 1 >= 0) & (r0 + 1 < hh)
            k00 = (ok_r0 & ok_c0)[:, None] & d_ok[None, :]
            k01 = (ok_r0 & ok_c1)[:, None] & d_ok[None, :]
            k10 = (ok_r1 & ok_c0)[:, None] & d_ok[None, :]
            k11 = (ok_r1 & ok_c1)[:, None] & d_ok[None, :]
            o00 = base + ((s0 + r0 * ww + c0) * M * D)[:, None]
            o01 = o00 + M * D
            o10 = o00 + ww * M * D
            o11 = o10 + M * D
            t00 = tl.load(value_ptr + o00, mask=k00, other=0.0).to(tl.float32)
            t01 = tl.load(value_ptr + o01, mask=k01, other=0.0).to(tl.float32)
            t10 = tl.load(value_ptr + o10, mask=k10, other=0.0).to(tl.float32)
            t11 = tl.load(value_ptr + o11, mask=k11, other=0.0).to(tl.float32)
            e00 = (1 - ax) * (1 - ay)
            e01 = ax * (1 - ay)
            e10 = (1 - ax) * ay
            e11 = ax * ay
            s = e00[:, None] * t00 + e01[:, None] * t01 + e10[:, None] * t10 + e11[:, None] * t11
            tl.store(grad_attn_ptr + p, tl.sum(s * g, 1).to(grad_attn_ptr.dtype.element_ty),
                     mask=q_ok)
            gx = tl.sum(g * ((t01 - t00) * (1 - ay)[:, None] + (t11 - t10) * ay[:, None]), 1)
            gy = tl.sum(g * ((t10 - t00) * (1 - ax)[:, None] + (t11 - t01) * ax[:, None]), 1)
            tl.store(grad_loc_ptr + 2 * p, (a * ww.to(tl.float32) * gx).to(grad_loc_ptr.dtype.element_ty),
                     mask=q_ok)
            tl.store(grad_loc_ptr + 2 * p + 1,
                     (a * hh.to(tl.float32) * gy).to(grad_loc_ptr.dtype.element_ty), mask=q_ok)
            ag = g * a[:, None]
            ty = grad_value_ptr.dtype.element_ty
            old00 = tl.load(grad_value_ptr + o00, mask=k00, other=0.0).to(tl.float32)
            tl.store(grad_value_ptr + o00, (old00 + ag * e00[:, None]).to(ty), mask=k00)
            old01 = tl.load(grad_value_ptr + o01, mask=k01, other=0.0).to(tl.float32)
            tl.store(grad_value_ptr + o01, (old01 + ag * e01[:, None]).to(ty), mask=k01)
            old10 = tl.load(grad_value_ptr + o10, mask=k10, other=0.0).to(tl.float32)
            tl.store(grad_value_ptr + o10, (old10 + ag * e10[:, None]).to(ty), mask=k10)
            old11 = tl.load(grad_value_ptr + o11, mask=k11, other=0.0).to(tl.float32)
            tl.store(grad_value_ptr + o11, (old11 + ag * e11[:, None]).to(ty), mask=k11)
