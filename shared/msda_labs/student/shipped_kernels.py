"""The Triton kernels of :mod:`msda_labs.student.shipped` (lab 10's operator).

The launchers, the reasons for each choice and the measurements are in ``shipped.py``; this
module holds only the ``@triton.jit`` functions, so that each file stays readable. It carries
the answers of labs 05-08 in full, so exports of earlier labs leave it out (like shipped.py).
"""

import triton
import triton.language as tl

# ------------------------------------------------------------------------------------------------
# Which program does which (batch, head, query block).
#   ORDER 0: grid (query blocks, B * M): neighbouring programs share a (batch, head).
#   ORDER 1: grid (M, query blocks, B): neighbouring programs are the heads of one query block,
#            so programs running at once spread their atomics over M times more cache lines.
# ------------------------------------------------------------------------------------------------


@triton.jit
def _program_coords(M: tl.constexpr, ORDER: tl.constexpr):
    if ORDER == 0:
        pid_q = tl.program_id(0)
        pid_bm = tl.program_id(1)
        b = (pid_bm // M).to(tl.int64)
        m = pid_bm % M
    else:
        m = tl.program_id(0)
        pid_q = tl.program_id(1)
        b = tl.program_id(2).to(tl.int64)
    return b, m, pid_q


# ------------------------------------------------------------------------------------------------
# The sample-point part both kernels share.
# ------------------------------------------------------------------------------------------------


@triton.jit
def _point_rows(shapes_ptr, starts_ptr, loc_ptr, attn_ptr, b, m, pid_q, Q,
                M: tl.constexpr, L: tl.constexpr, K: tl.constexpr, LK: tl.constexpr,
                BLOCK_Q: tl.constexpr, IDX64: tl.constexpr):
    """Per row (query, point) of the tile: query index, point index, validity, level sizes,
    bilinear fractions, the four corner pixel indices along S and their validity."""
    rows = tl.arange(0, BLOCK_Q * LK)  # [R]
    q = pid_q * BLOCK_Q + rows // LK  # query of the row
    pt = rows % LK  # point (l * K + k) of the row
    ok = (q < Q) & (pt < L * K)
    lvl = pt // K
    h = tl.load(shapes_ptr + 2 * lvl, mask=ok, other=1).to(tl.int32)
    w = tl.load(shapes_ptr + 2 * lvl + 1, mask=ok, other=1).to(tl.int32)
    start = tl.load(starts_ptr + lvl, mask=ok, other=0).to(tl.int32)
    if IDX64:
        pq = (b * Q + q.to(tl.int64)) * M + m  # row (b, q, m) of loc, attn, out
    else:
        pq = (b.to(tl.int32) * Q + q) * M + m
    p = pq * (L * K) + pt  # index of (b, q, m, l, k)
    loc_x = tl.load(loc_ptr + 2 * p, mask=ok, other=0.0).to(tl.float32)
    loc_y = tl.load(loc_ptr + 2 * p + 1, mask=ok, other=0.0).to(tl.float32)
    a = tl.load(attn_ptr + p, mask=ok, other=0.0).to(tl.float32)
    w_f = w.to(tl.float32)
    h_f = h.to(tl.float32)
    # Clamping to [-2, size + 1] changes nothing inside the level (both corners of an axis stay
    # invalid outside it) and keeps far-away locations from overflowing the int32 cast.
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
    pix00 = start + y0 * w + x0  # pixel index along S of corner (y0, x0)
    return (pq, p, ok, a, lx, ly, h_f, w_f, pix00, w,
            vy0 & vx0, vy0 & vx1, vy1 & vx0, vy1 & vx1)


@triton.jit
def _pixel_offset(pix, M: tl.constexpr, D: tl.constexpr, IDX64: tl.constexpr):
    """Element offset of pixel ``pix`` relative to value[b, 0, m, 0]."""
    if IDX64:
        return pix.to(tl.int64) * (M * D)
    else:
        return pix * (M * D)


# ------------------------------------------------------------------------------------------------
# Forward.
# ------------------------------------------------------------------------------------------------


@triton.jit
def msda_forward_tiles_kernel(
    value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, out_ptr,
    Q, S, Q_BUCKET,  # Q_BUCKET: only part of the autotune key
    M: tl.constexpr, D: tl.constexpr, L: tl.constexpr, K: tl.constexpr,
    IDX64: tl.constexpr, ORDER: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Program: BLOCK_Q queries x all D channels of one (batch, head), the points in turn.

    Lab 06's tiling with cheaper bookkeeping: int32 offsets unless IDX64, the (x, y) pair of a
    point loaded as one 2-vector, the level's sizes read once per level.
    """
    b, m, pid_q = _program_coords(M, ORDER)
    offs_q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    mask_q = offs_q < Q
    mask_d = offs_d < D
    if IDX64:
        pq = (b * Q + offs_q.to(tl.int64)) * M + m
    else:
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
        step_y = _pixel_offset(w, M, D, IDX64)
        for k in tl.static_range(K):
            p = pq * (L * K) + (lvl * K + k)
            xy = tl.load(loc_ptr + 2 * p[:, None] + two[None, :], mask=mask_q[:, None],
                         other=0.0).to(tl.float32)  # [BLOCK_Q, 2]
            loc_x, loc_y = tl.split(xy)
            a = tl.load(attn_ptr + p, mask=mask_q, other=0.0).to(tl.float32)
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
            off00 = _pixel_offset(start + y0 * w + x0, M, D, IDX64)[:, None]
            v00 = tl.load(head + off00, mask=(vy0 & vx0)[:, None] & dm, other=0.0)
            v01 = tl.load(head + (off00 + M * D), mask=(vy0 & vx1)[:, None] & dm, other=0.0)
            v10 = tl.load(head + (off00 + step_y), mask=(vy1 & vx0)[:, None] & dm, other=0.0)
            v11 = tl.load(head + (off00 + step_y + M * D), mask=(vy1 & vx1)[:, None] & dm,
                          other=0.0)
            w00 = a * (1.0 - lx) * (1.0 - ly)
            w01 = a * lx * (1.0 - ly)
            w10 = a * (1.0 - lx) * ly
            w11 = a * lx * ly
            acc += (w00[:, None] * v00.to(tl.float32) + w01[:, None] * v01.to(tl.float32)
                    + w10[:, None] * v10.to(tl.float32) + w11[:, None] * v11.to(tl.float32))
    tl.store(out_ptr + (pq * D)[:, None] + offs_d[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask_q[:, None] & dm)


# ------------------------------------------------------------------------------------------------
# Backward.
# ------------------------------------------------------------------------------------------------


@triton.jit
def msda_backward_rows_kernel(
    value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, grad_out_ptr,
    grad_value_ptr, grad_loc_ptr, grad_attn_ptr,
    Q, S,
    M: tl.constexpr, D: tl.constexpr, L: tl.constexpr, K: tl.constexpr, LK: tl.constexpr,
    IDX64: tl.constexpr, ORDER: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Program: BLOCK_Q queries x all L*K points x all D channels of one (batch, head)."""
    b, m, pid_q = _program_coords(M, ORDER)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    (pq, p, ok, a, lx, ly, h_f, w_f, pix00, w,
     m00, m01, m10, m11) = _point_rows(shapes_ptr, starts_ptr, loc_ptr, attn_ptr, b, m, pid_q, Q,
                                       M, L, K, LK, BLOCK_Q, IDX64)
    dm = mask_d[None, :]
    # The upstream gradient of each row's query (a row of L*K rows reads the same line: cached).
    g = tl.load(grad_out_ptr + (pq * D)[:, None] + offs_d[None, :], mask=ok[:, None] & dm,
                other=0.0).to(tl.float32)  # [R, BLOCK_D]
    base = (b * S * M + m) * D + offs_d[None, :]  # [1, BLOCK_D] element of (b, 0, m, d)
    off00 = _pixel_offset(pix00, M, D, IDX64)[:, None]
    step_x = M * D
    step_y = _pixel_offset(w, M, D, IDX64)[:, None]
    off01 = off00 + step_x
    off10 = off00 + step_y
    off11 = off10 + step_x
    k00 = m00[:, None] & dm
    k01 = m01[:, None] & dm
    k10 = m10[:, None] & dm
    k11 = m11[:, None] & dm
    v00 = tl.load(value_ptr + base + off00, mask=k00, other=0.0).to(tl.float32)
    v01 = tl.load(value_ptr + base + off01, mask=k01, other=0.0).to(tl.float32)
    v10 = tl.load(value_ptr + base + off10, mask=k10, other=0.0).to(tl.float32)
    v11 = tl.load(value_ptr + base + off11, mask=k11, other=0.0).to(tl.float32)
    w00 = (1.0 - lx) * (1.0 - ly)
    w01 = lx * (1.0 - ly)
    w10 = (1.0 - lx) * ly
    w11 = lx * ly
    sampled = w00[:, None] * v00 + w01[:, None] * v01 + w10[:, None] * v10 + w11[:, None] * v11
    grad_a = tl.sum(g * sampled, axis=1)  # [R]
    d_x = (v01 - v00) * (1.0 - ly)[:, None] + (v11 - v10) * ly[:, None]
    d_y = (v10 - v00) * (1.0 - lx)[:, None] + (v11 - v01) * lx[:, None]
    grad_x = a * w_f * tl.sum(g * d_x, axis=1)
    grad_y = a * h_f * tl.sum(g * d_y, axis=1)
    tl.store(grad_attn_ptr + p, grad_a.to(grad_attn_ptr.dtype.element_ty), mask=ok)
    loc_ty = grad_loc_ptr.dtype.element_ty
    tl.store(grad_loc_ptr + 2 * p, grad_x.to(loc_ty), mask=ok)
    tl.store(grad_loc_ptr + 2 * p + 1, grad_y.to(loc_ty), mask=ok)
    share = g * a[:, None]
    gv = grad_value_ptr + base
    out_ty = grad_value_ptr.dtype.element_ty
    # Four channels (fp32) or eight (fp16, bf16) of one corner row are contiguous in a thread's
    # registers, so on SM 9.0 Triton emits one vector atomic for them (atom...add.v4.f32,
    # .v8.f16, .v8.bf16: read off the PTX on an H200 with triton 3.6, and here with 3.9).
    tl.atomic_add(gv + off00, (share * w00[:, None]).to(out_ty), mask=k00, sem="relaxed")
    tl.atomic_add(gv + off01, (share * w01[:, None]).to(out_ty), mask=k01, sem="relaxed")
    tl.atomic_add(gv + off10, (share * w10[:, None]).to(out_ty), mask=k10, sem="relaxed")
    tl.atomic_add(gv + off11, (share * w11[:, None]).to(out_ty), mask=k11, sem="relaxed")
