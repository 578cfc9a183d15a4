"""Issue 10, session 20: experimental kernels for the H200 probe (none is shipped).

* ``msda_backward_tma_kernel``: the shipped point-row backward for grad_loc and grad_attn (no
  atomics there), but grad_value is scattered with Hopper's bulk tensor reductions
  (``cp.reduce.async.bulk.tensor``, reached through a tensor descriptor's ``atomic_add``)
  instead of per-thread vector atomics. grad_value is seen as (B*S, M, D); one reduction adds a
  (2, 1, D) box, the two corners (x0, x0+1) of one image row of one sample point. A point then
  costs 2 bulk reductions instead of 4*D/4 (fp32) or 4*D/8 (half) vector atomics. A corner
  outside its level gets weight 0 (the box may then add zeros into a neighbouring pixel, which
  changes nothing); boxes outside (B*S) are clipped by the hardware.
* ``msda_forward_loop_kernel``: the shipped forward with the K points of a level in a loop that
  is not unrolled (the unrolled fp32 forward holds 224 registers a thread on SM 9.0).
* ``msda_forward_evict_kernel`` / ``msda_backward_evict_kernel``: the shipped kernels with L2
  eviction hints: the streamed tensors (locations, weights, grad_out, the outputs) evict first,
  value's gathered rows evict last, so that more of value stays in the 50 MB L2.
"""

import triton
import triton.language as tl

from msda_labs.student.shipped_kernels import _pixel_offset, _point_rows, _program_coords


@triton.jit
def msda_backward_tma_kernel(
    value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, grad_out_ptr,
    gv_desc, grad_loc_ptr, grad_attn_ptr,
    Q, S,
    M: tl.constexpr, D: tl.constexpr, L: tl.constexpr, K: tl.constexpr, LK: tl.constexpr,
    ORDER: tl.constexpr, BLOCK_D: tl.constexpr, SKIP: tl.constexpr,
):
    """Program: one query x all L*K points x all D channels of one (batch, head)."""
    b, m, pid_q = _program_coords(M, ORDER)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    (pq, p, ok, a, lx, ly, h_f, w_f, pix00, w,
     m00, m01, m10, m11) = _point_rows(shapes_ptr, starts_ptr, loc_ptr, attn_ptr, b, m, pid_q, Q,
                                       M, L, K, LK, 1, False)
    dm = mask_d[None, :]
    g = tl.load(grad_out_ptr + (pq * D)[:, None] + offs_d[None, :], mask=ok[:, None] & dm,
                other=0.0).to(tl.float32)
    base = (b * S * M + m) * D + offs_d[None, :]
    off00 = _pixel_offset(pix00, M, D, False)[:, None]
    step_y = _pixel_offset(w, M, D, False)[:, None]
    off01 = off00 + M * D
    off10 = off00 + step_y
    off11 = off10 + M * D
    v00 = tl.load(value_ptr + base + off00, mask=m00[:, None] & dm, other=0.0).to(tl.float32)
    v01 = tl.load(value_ptr + base + off01, mask=m01[:, None] & dm, other=0.0).to(tl.float32)
    v10 = tl.load(value_ptr + base + off10, mask=m10[:, None] & dm, other=0.0).to(tl.float32)
    v11 = tl.load(value_ptr + base + off11, mask=m11[:, None] & dm, other=0.0).to(tl.float32)
    w00 = (1.0 - lx) * (1.0 - ly)
    w01 = lx * (1.0 - ly)
    w10 = (1.0 - lx) * ly
    w11 = lx * ly
    sampled = w00[:, None] * v00 + w01[:, None] * v01 + w10[:, None] * v10 + w11[:, None] * v11
    grad_a = tl.sum(g * sampled, axis=1)
    d_x = (v01 - v00) * (1.0 - ly)[:, None] + (v11 - v10) * ly[:, None]
    d_y = (v10 - v00) * (1.0 - lx)[:, None] + (v11 - v01) * lx[:, None]
    grad_x = a * w_f * tl.sum(g * d_x, axis=1)
    grad_y = a * h_f * tl.sum(g * d_y, axis=1)
    tl.store(grad_attn_ptr + p, grad_a.to(grad_attn_ptr.dtype.element_ty), mask=ok)
    loc_ty = grad_loc_ptr.dtype.element_ty
    tl.store(grad_loc_ptr + 2 * p, grad_x.to(loc_ty), mask=ok)
    tl.store(grad_loc_ptr + 2 * p + 1, grad_y.to(loc_ty), mask=ok)

    # grad_value: per point, two bulk reductions of a (2, 1, D) box. The point's scalars are
    # recomputed from scalar loads (the rows above are spread over the warp's threads).
    q = pid_q
    gq = tl.load(grad_out_ptr + ((b * Q + q) * M + m) * D + offs_d, mask=mask_d,
                 other=0.0).to(tl.float32)  # [BLOCK_D]
    two = tl.arange(0, 2)
    row_b = (b * S).to(tl.int32)
    out_ty = gv_desc.dtype
    for lvl in tl.static_range(L):
        h = tl.load(shapes_ptr + 2 * lvl).to(tl.int32)
        wl = tl.load(shapes_ptr + 2 * lvl + 1).to(tl.int32)
        start = tl.load(starts_ptr + lvl).to(tl.int32)
        hl_f = h.to(tl.float32)
        wl_f = wl.to(tl.float32)
        for k in tl.static_range(K):
            pt = ((b * Q + q) * M + m) * (L * K) + (lvl * K + k)
            sx = tl.load(loc_ptr + 2 * pt).to(tl.float32)
            sy = tl.load(loc_ptr + 2 * pt + 1).to(tl.float32)
            sa = tl.load(attn_ptr + pt).to(tl.float32)
            x = tl.minimum(tl.maximum(sx * wl_f - 0.5, -2.0), wl_f + 1.0)
            y = tl.minimum(tl.maximum(sy * hl_f - 0.5, -2.0), hl_f + 1.0)
            x0f = tl.floor(x)
            y0f = tl.floor(y)
            fx = x - x0f
            fy = y - y0f
            x0 = x0f.to(tl.int32)
            y0 = y0f.to(tl.int32)
            # weight of the box's two columns (x0, x0 + 1), zero outside the level
            cx = x0 + two  # [2]
            wx = tl.where(two == 0, 1.0 - fx, fx) * ((cx >= 0) & (cx < wl)).to(tl.float32)
            wy0 = (1.0 - fy) * ((y0 >= 0) & (y0 < h)).to(tl.float32) * sa
            wy1 = fy * ((y0 + 1 >= 0) & (y0 + 1 < h)).to(tl.float32) * sa
            pix = row_b + start + y0 * wl + x0
            t0 = (wx * wy0)[:, None] * gq[None, :]
            t1 = (wx * wy1)[:, None] * gq[None, :]
            if SKIP:
                if (y0 >= 0) & (y0 < h):
                    gv_desc.atomic_add([pix, m, 0], t0.to(out_ty)[:, None, :])
                if (y0 + 1 >= 0) & (y0 + 1 < h):
                    gv_desc.atomic_add([pix + wl, m, 0], t1.to(out_ty)[:, None, :])
            else:
                gv_desc.atomic_add([pix, m, 0], t0.to(out_ty)[:, None, :])
                gv_desc.atomic_add([pix + wl, m, 0], t1.to(out_ty)[:, None, :])


@triton.jit
def msda_forward_evict_kernel(
    value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, out_ptr,
    Q, S,
    M: tl.constexpr, D: tl.constexpr, L: tl.constexpr, K: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr, STREAM: tl.constexpr, GATHER: tl.constexpr,
):
    """The shipped forward (int32 offsets, ORDER 0) with eviction hints."""
    b, m, pid_q = _program_coords(M, 0)
    offs_q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    mask_q = offs_q < Q
    mask_d = offs_d < D
    pq = (b.to(tl.int32) * Q + offs_q) * M + m
    head = value_ptr + (b * S * M + m) * D + offs_d[None, :]
    dm = mask_d[None, :]
    two = tl.arange(0, 2)
    acc = tl.zeros((BLOCK_Q, BLOCK_D), dtype=tl.float32)
    for lvl in tl.static_range(L):
        h = tl.load(shapes_ptr + 2 * lvl).to(tl.int32)
        w = tl.load(shapes_ptr + 2 * lvl + 1).to(tl.int32)
        start = tl.load(starts_ptr + lvl).to(tl.int32)
        h_f = h.to(tl.float32)
        w_f = w.to(tl.float32)
        step_y = w * (M * D)
        for k in tl.static_range(K):
            p = pq * (L * K) + (lvl * K + k)
            xy = tl.load(loc_ptr + 2 * p[:, None] + two[None, :], mask=mask_q[:, None],
                         other=0.0, eviction_policy=STREAM).to(tl.float32)
            loc_x, loc_y = tl.split(xy)
            a = tl.load(attn_ptr + p, mask=mask_q, other=0.0,
                        eviction_policy=STREAM).to(tl.float32)
            x = tl.minimum(tl.maximum(loc_x * w_f - 0.5, -2.0), w_f + 1.0)
            y = tl.minimum(tl.maximum(loc_y * h_f - 0.5, -2.0), h_f + 1.0)
            x0f = tl.floor(x)
            y0f = tl.floor(y)
            lx = x - x0f
            ly = y - y0f
            x0 = x0f.to(tl.int32)
            y0 = y0f.to(tl.int32)
            vx0 = mask_q & (x0 >= 0) & (x0 < w)
            vx1 = mask_q & (x0 + 1 >= 0) & (x0 + 1 < w)
            vy0 = (y0 >= 0) & (y0 < h)
            vy1 = (y0 + 1 >= 0) & (y0 + 1 < h)
            off00 = ((start + y0 * w + x0) * (M * D))[:, None]
            v00 = tl.load(head + off00, mask=(vy0 & vx0)[:, None] & dm, other=0.0,
                          eviction_policy=GATHER)
            v01 = tl.load(head + (off00 + M * D), mask=(vy0 & vx1)[:, None] & dm, other=0.0,
                          eviction_policy=GATHER)
            v10 = tl.load(head + (off00 + step_y), mask=(vy1 & vx0)[:, None] & dm, other=0.0,
                          eviction_policy=GATHER)
            v11 = tl.load(head + (off00 + step_y + M * D), mask=(vy1 & vx1)[:, None] & dm,
                          other=0.0, eviction_policy=GATHER)
            w00 = a * (1.0 - lx) * (1.0 - ly)
            w01 = a * lx * (1.0 - ly)
            w10 = a * (1.0 - lx) * ly
            w11 = a * lx * ly
            acc += (w00[:, None] * v00.to(tl.float32) + w01[:, None] * v01.to(tl.float32)
                    + w10[:, None] * v10.to(tl.float32) + w11[:, None] * v11.to(tl.float32))
    tl.store(out_ptr + (pq * D)[:, None] + offs_d[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask_q[:, None] & dm, eviction_policy=STREAM)


@triton.jit
def msda_forward_loop_kernel(
    value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, out_ptr,
    Q, S,
    M: tl.constexpr, D: tl.constexpr, L: tl.constexpr, K: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr, STREAM: tl.constexpr, GATHER: tl.constexpr,
):
    """The shipped forward (int32 offsets, ORDER 0, no hints) with the points of a level in a
    loop that is not unrolled, so that fewer gathers are in flight and fewer registers live."""
    b, m, pid_q = _program_coords(M, 0)
    offs_q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    mask_q = offs_q < Q
    mask_d = offs_d < D
    pq = (b.to(tl.int32) * Q + offs_q) * M + m
    head = value_ptr + (b * S * M + m) * D + offs_d[None, :]
    dm = mask_d[None, :]
    two = tl.arange(0, 2)
    acc = tl.zeros((BLOCK_Q, BLOCK_D), dtype=tl.float32)
    for lvl in tl.static_range(L):
        h = tl.load(shapes_ptr + 2 * lvl).to(tl.int32)
        w = tl.load(shapes_ptr + 2 * lvl + 1).to(tl.int32)
        start = tl.load(starts_ptr + lvl).to(tl.int32)
        h_f = h.to(tl.float32)
        w_f = w.to(tl.float32)
        step_y = w * (M * D)
        for k in tl.range(0, K):
            p = pq * (L * K) + (lvl * K + k)
            xy = tl.load(loc_ptr + 2 * p[:, None] + two[None, :], mask=mask_q[:, None],
                         other=0.0, eviction_policy=STREAM).to(tl.float32)
            loc_x, loc_y = tl.split(xy)
            a = tl.load(attn_ptr + p, mask=mask_q, other=0.0,
                        eviction_policy=STREAM).to(tl.float32)
            x = tl.minimum(tl.maximum(loc_x * w_f - 0.5, -2.0), w_f + 1.0)
            y = tl.minimum(tl.maximum(loc_y * h_f - 0.5, -2.0), h_f + 1.0)
            x0f = tl.floor(x)
            y0f = tl.floor(y)
            lx = x - x0f
            ly = y - y0f
            x0 = x0f.to(tl.int32)
            y0 = y0f.to(tl.int32)
            vx0 = mask_q & (x0 >= 0) & (x0 < w)
            vx1 = mask_q & (x0 + 1 >= 0) & (x0 + 1 < w)
            vy0 = (y0 >= 0) & (y0 < h)
            vy1 = (y0 + 1 >= 0) & (y0 + 1 < h)
            off00 = ((start + y0 * w + x0) * (M * D))[:, None]
            v00 = tl.load(head + off00, mask=(vy0 & vx0)[:, None] & dm, other=0.0,
                          eviction_policy=GATHER)
            v01 = tl.load(head + (off00 + M * D), mask=(vy0 & vx1)[:, None] & dm, other=0.0,
                          eviction_policy=GATHER)
            v10 = tl.load(head + (off00 + step_y), mask=(vy1 & vx0)[:, None] & dm, other=0.0,
                          eviction_policy=GATHER)
            v11 = tl.load(head + (off00 + step_y + M * D), mask=(vy1 & vx1)[:, None] & dm,
                          other=0.0, eviction_policy=GATHER)
            w00 = a * (1.0 - lx) * (1.0 - ly)
            w01 = a * lx * (1.0 - ly)
            w10 = a * (1.0 - lx) * ly
            w11 = a * lx * ly
            acc += (w00[:, None] * v00.to(tl.float32) + w01[:, None] * v01.to(tl.float32)
                    + w10[:, None] * v10.to(tl.float32) + w11[:, None] * v11.to(tl.float32))
    tl.store(out_ptr + (pq * D)[:, None] + offs_d[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask_q[:, None] & dm, eviction_policy=STREAM)


@triton.jit
def msda_backward_evict_kernel(
    value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, grad_out_ptr,
    grad_value_ptr, grad_loc_ptr, grad_attn_ptr,
    Q, S,
    M: tl.constexpr, D: tl.constexpr, L: tl.constexpr, K: tl.constexpr, LK: tl.constexpr,
    ORDER: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr,
    STREAM: tl.constexpr, GATHER: tl.constexpr,
):
    """The shipped point-row backward (int32 offsets) with eviction hints."""
    b, m, pid_q = _program_coords(M, ORDER)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    rows = tl.arange(0, BLOCK_Q * LK)
    q = pid_q * BLOCK_Q + rows // LK
    pt = rows % LK
    ok = (q < Q) & (pt < L * K)
    lvl = pt // K
    h = tl.load(shapes_ptr + 2 * lvl, mask=ok, other=1).to(tl.int32)
    w = tl.load(shapes_ptr + 2 * lvl + 1, mask=ok, other=1).to(tl.int32)
    start = tl.load(starts_ptr + lvl, mask=ok, other=0).to(tl.int32)
    pq = (b.to(tl.int32) * Q + q) * M + m
    p = pq * (L * K) + pt
    loc_x = tl.load(loc_ptr + 2 * p, mask=ok, other=0.0, eviction_policy=STREAM).to(tl.float32)
    loc_y = tl.load(loc_ptr + 2 * p + 1, mask=ok, other=0.0,
                    eviction_policy=STREAM).to(tl.float32)
    a = tl.load(attn_ptr + p, mask=ok, other=0.0, eviction_policy=STREAM).to(tl.float32)
    w_f = w.to(tl.float32)
    h_f = h.to(tl.float32)
    x = tl.minimum(tl.maximum(loc_x * w_f - 0.5, -2.0), w_f + 1.0)
    y = tl.minimum(tl.maximum(loc_y * h_f - 0.5, -2.0), h_f + 1.0)
    x0f = tl.floor(x)
    y0f = tl.floor(y)
    lx = x - x0f
    ly = y - y0f
    x0 = x0f.to(tl.int32)
    y0 = y0f.to(tl.int32)
    vx0 = ok & (x0 >= 0) & (x0 < w)
    vx1 = ok & (x0 + 1 >= 0) & (x0 + 1 < w)
    vy0 = (y0 >= 0) & (y0 < h)
    vy1 = (y0 + 1 >= 0) & (y0 + 1 < h)
    dm = mask_d[None, :]
    g = tl.load(grad_out_ptr + (pq * D)[:, None] + offs_d[None, :], mask=ok[:, None] & dm,
                other=0.0, eviction_policy=STREAM).to(tl.float32)
    base = (b * S * M + m) * D + offs_d[None, :]
    off00 = ((start + y0 * w + x0) * (M * D))[:, None]
    step_y = (w * (M * D))[:, None]
    off01 = off00 + M * D
    off10 = off00 + step_y
    off11 = off10 + M * D
    k00 = (vy0 & vx0)[:, None] & dm
    k01 = (vy0 & vx1)[:, None] & dm
    k10 = (vy1 & vx0)[:, None] & dm
    k11 = (vy1 & vx1)[:, None] & dm
    v00 = tl.load(value_ptr + base + off00, mask=k00, other=0.0,
                  eviction_policy=GATHER).to(tl.float32)
    v01 = tl.load(value_ptr + base + off01, mask=k01, other=0.0,
                  eviction_policy=GATHER).to(tl.float32)
    v10 = tl.load(value_ptr + base + off10, mask=k10, other=0.0,
                  eviction_policy=GATHER).to(tl.float32)
    v11 = tl.load(value_ptr + base + off11, mask=k11, other=0.0,
                  eviction_policy=GATHER).to(tl.float32)
    w00 = (1.0 - lx) * (1.0 - ly)
    w01 = lx * (1.0 - ly)
    w10 = (1.0 - lx) * ly
    w11 = lx * ly
    sampled = w00[:, None] * v00 + w01[:, None] * v01 + w10[:, None] * v10 + w11[:, None] * v11
    grad_a = tl.sum(g * sampled, axis=1)
    d_x = (v01 - v00) * (1.0 - ly)[:, None] + (v11 - v10) * ly[:, None]
    d_y = (v10 - v00) * (1.0 - lx)[:, None] + (v11 - v01) * lx[:, None]
    grad_x = a * w_f * tl.sum(g * d_x, axis=1)
    grad_y = a * h_f * tl.sum(g * d_y, axis=1)
    tl.store(grad_attn_ptr + p, grad_a.to(grad_attn_ptr.dtype.element_ty), mask=ok,
             eviction_policy=STREAM)
    loc_ty = grad_loc_ptr.dtype.element_ty
    tl.store(grad_loc_ptr + 2 * p, grad_x.to(loc_ty), mask=ok, eviction_policy=STREAM)
    tl.store(grad_loc_ptr + 2 * p + 1, grad_y.to(loc_ty), mask=ok, eviction_policy=STREAM)
    share = g * a[:, None]
    gv = grad_value_ptr + base
    out_ty = grad_value_ptr.dtype.element_ty
    tl.atomic_add(gv + off00, (share * w00[:, None]).to(out_ty), mask=k00, sem="relaxed")
    tl.atomic_add(gv + off01, (share * w01[:, None]).to(out_ty), mask=k01, sem="relaxed")
    tl.atomic_add(gv + off10, (share * w10[:, None]).to(out_ty), mask=k10, sem="relaxed")
    tl.atomic_add(gv + off11, (share * w11[:, None]).to(out_ty), mask=k11, sem="relaxed")
