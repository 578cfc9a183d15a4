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
    ATOMIC_LEVELS: tl.constexpr,
):
    """Program: BLOCK_Q queries x all L*K points x all D channels of one (batch, head).

    grad_value gets the adds of the levels below ATOMIC_LEVELS; the other levels' adds are
    left to :func:`msda_backward_merge_kernel`.
    """
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
    if ATOMIC_LEVELS < L:
        mine = ((tl.arange(0, BLOCK_Q * LK) % LK) // K < ATOMIC_LEVELS)[:, None]
        a00 = k00 & mine
        a01 = k01 & mine
        a10 = k10 & mine
        a11 = k11 & mine
    else:
        a00 = k00
        a01 = k01
        a10 = k10
        a11 = k11
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
    tl.atomic_add(gv + off00, (share * w00[:, None]).to(out_ty), mask=a00, sem="relaxed")
    tl.atomic_add(gv + off01, (share * w01[:, None]).to(out_ty), mask=a01, sem="relaxed")
    tl.atomic_add(gv + off10, (share * w10[:, None]).to(out_ty), mask=a10, sem="relaxed")
    tl.atomic_add(gv + off11, (share * w11[:, None]).to(out_ty), mask=a11, sem="relaxed")


# ------------------------------------------------------------------------------------------------
# Forward on channel slices (issue 10, session 19 probe).
# ------------------------------------------------------------------------------------------------


@triton.jit
def msda_forward_slices_kernel(
    value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, out_ptr,
    Q, S,
    M: tl.constexpr, D: tl.constexpr, L: tl.constexpr, K: tl.constexpr,
    C: tl.constexpr, SLICED: tl.constexpr, EVICT_FROM: tl.constexpr, BLOCK_Q: tl.constexpr,
):
    """Program: BLOCK_Q queries x one slice of C channels of one (batch, head).

    SLICED: value was laid out as (B, M, D // C, S, C), so one slice of one head is a dense
    (S, C) block and the coarse levels' slices stay in L1 while every SM works on the same
    slice (programs of one slice are neighbours in the grid). Otherwise value is (B, S, M, D).
    Levels below EVICT_FROM are loaded with evict_first, so that they do not push the coarse
    levels out of L1.
    """
    pid_q = tl.program_id(0)
    g = tl.program_id(1)  # ((b * M + m) * (D // C) + j)
    NC: tl.constexpr = D // C
    j = g % NC
    m = (g // NC) % M
    b = (g // (NC * M)).to(tl.int64)
    offs_q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_c = tl.arange(0, C)
    mask_q = offs_q < Q
    pq = (b * Q + offs_q.to(tl.int64)) * M + m
    if SLICED:
        head = value_ptr + g.to(tl.int64) * S * C + offs_c[None, :]
        PIX: tl.constexpr = C
    else:
        head = value_ptr + (b * S * M + m) * D + j * C + offs_c[None, :]
        PIX: tl.constexpr = M * D
    two = tl.arange(0, 2)
    acc = tl.zeros((BLOCK_Q, C), dtype=tl.float32)
    for lvl in tl.static_range(L):
        h = tl.load(shapes_ptr + 2 * lvl).to(tl.int32)
        w = tl.load(shapes_ptr + 2 * lvl + 1).to(tl.int32)
        start = tl.load(starts_ptr + lvl).to(tl.int32)
        h_f = h.to(tl.float32)
        w_f = w.to(tl.float32)
        step_y = w * PIX
        for k in tl.static_range(K):
            p = pq * (L * K) + (lvl * K + k)
            xy = tl.load(loc_ptr + 2 * p[:, None] + two[None, :], mask=mask_q[:, None],
                         other=0.0).to(tl.float32)
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
            off00 = ((start + y0 * w + x0) * PIX)[:, None]
            if lvl < EVICT_FROM:
                v00 = tl.load(head + off00, mask=(vy0 & vx0)[:, None], other=0.0,
                              eviction_policy="evict_first")
                v01 = tl.load(head + (off00 + PIX), mask=(vy0 & vx1)[:, None], other=0.0,
                              eviction_policy="evict_first")
                v10 = tl.load(head + (off00 + step_y), mask=(vy1 & vx0)[:, None], other=0.0,
                              eviction_policy="evict_first")
                v11 = tl.load(head + (off00 + step_y + PIX), mask=(vy1 & vx1)[:, None],
                              other=0.0, eviction_policy="evict_first")
            else:
                v00 = tl.load(head + off00, mask=(vy0 & vx0)[:, None], other=0.0)
                v01 = tl.load(head + (off00 + PIX), mask=(vy0 & vx1)[:, None], other=0.0)
                v10 = tl.load(head + (off00 + step_y), mask=(vy1 & vx0)[:, None], other=0.0)
                v11 = tl.load(head + (off00 + step_y + PIX), mask=(vy1 & vx1)[:, None],
                              other=0.0)
            w00 = a * (1.0 - lx) * (1.0 - ly)
            w01 = a * lx * (1.0 - ly)
            w10 = a * (1.0 - lx) * ly
            w11 = a * lx * ly
            acc += (w00[:, None] * v00.to(tl.float32) + w01[:, None] * v01.to(tl.float32)
                    + w10[:, None] * v10.to(tl.float32) + w11[:, None] * v11.to(tl.float32))
    tl.store(out_ptr + (pq * D + j * C)[:, None] + offs_c[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=mask_q[:, None])


# ------------------------------------------------------------------------------------------------
# Backward by cells (issue 10, session 19): points grouped by the cell of pixels they fall into.
#
# A point at (x, y) of a level reads the 2 x 2 pixels whose top-left corner is (floor(x),
# floor(y)): its cell. Cells run over y0 in [-1, H - 1] and x0 in [-1, W - 1], (H + 1) x (W + 1)
# per level, so that a point is in a cell exactly when at least one of its corners is inside the
# level. Per (batch, head), the cells of the levels follow each other; their number is at most
# 2 * S + 2 * L (H * W >= H + W - 1), which the host uses as the bound CB without reading shapes.
#
# 1. count: each point adds one to its cell's counter and keeps the old count as its rank.
# 2. (host) ends = inclusive prefix sum of the counts.
# 3. place: each point writes (lx, ly, weight, index) at ends[cell] - count[cell] + rank.
# 4. cells: a program owns one cell: it loads the cell's four value rows once, walks the cell's
#    points, writes their grad_loc and grad_attn, and sums their adds to each corner; the four
#    sums go to grad_value with one atomic each. Atomics drop from 4 per point to 4 per cell.
# ------------------------------------------------------------------------------------------------


@triton.jit
def _cell_of_point(shapes_ptr, loc_ptr, p, ok, Q, CB,
                   M: tl.constexpr, L: tl.constexpr, K: tl.constexpr):
    """Cell key (over all (batch, head)s), whether the point has a cell, and its fractions."""
    pt = p % (L * K)
    lvl = pt // K
    pq = p // (L * K)
    m = pq % M
    b = pq // (Q * M)
    h = tl.load(shapes_ptr + 2 * lvl, mask=ok, other=0).to(tl.int32)
    w = tl.load(shapes_ptr + 2 * lvl + 1, mask=ok, other=0).to(tl.int32)
    base = tl.zeros_like(lvl)
    for earlier in tl.static_range(L):
        he = tl.load(shapes_ptr + 2 * earlier).to(tl.int32)
        we = tl.load(shapes_ptr + 2 * earlier + 1).to(tl.int32)
        cells = tl.where((he > 0) & (we > 0), (he + 1) * (we + 1), 0)
        base += tl.where(lvl > earlier, cells, 0)
    loc_x = tl.load(loc_ptr + 2 * p, mask=ok, other=0.0).to(tl.float32)
    loc_y = tl.load(loc_ptr + 2 * p + 1, mask=ok, other=0.0).to(tl.float32)
    w_f = w.to(tl.float32)
    h_f = h.to(tl.float32)
    x = tl.minimum(tl.maximum(loc_x * w_f - 0.5, -2.0), w_f + 1.0)
    y = tl.minimum(tl.maximum(loc_y * h_f - 0.5, -2.0), h_f + 1.0)
    x0f = tl.floor(x)
    y0f = tl.floor(y)
    x0 = x0f.to(tl.int32)
    y0 = y0f.to(tl.int32)
    inside = ok & (h > 0) & (w > 0) & (x0 >= -1) & (x0 < w) & (y0 >= -1) & (y0 < h)
    key = (b * M + m) * CB + base + (y0 + 1) * (w + 1) + (x0 + 1)
    return key, inside, x - x0f, y - y0f


@triton.jit
def msda_cells_count_kernel(shapes_ptr, loc_ptr, counts_ptr, rank_ptr, grad_loc_ptr,
                            grad_attn_ptr, NP, Q, CB, M: tl.constexpr, L: tl.constexpr,
                            K: tl.constexpr, BLOCK: tl.constexpr):
    """Step 1: every point's rank in its cell; points outside every cell get zero gradients."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = p < NP
    key, inside, _, _ = _cell_of_point(shapes_ptr, loc_ptr, p, ok, Q, CB, M, L, K)
    rank = tl.atomic_add(counts_ptr + key, tl.full((BLOCK,), 1, tl.int32), mask=inside,
                         sem="relaxed")
    tl.store(rank_ptr + p, rank, mask=inside)
    outside = ok & (inside == 0)
    tl.store(grad_attn_ptr + p, tl.zeros((BLOCK,), grad_attn_ptr.dtype.element_ty), mask=outside)
    zero = tl.zeros((BLOCK,), grad_loc_ptr.dtype.element_ty)
    tl.store(grad_loc_ptr + 2 * p, zero, mask=outside)
    tl.store(grad_loc_ptr + 2 * p + 1, zero, mask=outside)


@triton.jit
def msda_cells_place_kernel(shapes_ptr, loc_ptr, attn_ptr, counts_ptr, ends_ptr, rank_ptr,
                            records_ptr, NP, Q, CB, M: tl.constexpr, L: tl.constexpr,
                            K: tl.constexpr, BLOCK: tl.constexpr):
    """Step 3: each point's record (lx, ly, weight, point index) at its place in its cell."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = p < NP
    key, inside, lx, ly = _cell_of_point(shapes_ptr, loc_ptr, p, ok, Q, CB, M, L, K)
    first = tl.load(ends_ptr + key, mask=inside, other=0) - tl.load(counts_ptr + key,
                                                                    mask=inside, other=0)
    at = (first + tl.load(rank_ptr + p, mask=inside, other=0)) * 4
    a = tl.load(attn_ptr + p, mask=inside, other=0.0).to(tl.float32)
    tl.store(records_ptr + at, lx, mask=inside)
    tl.store(records_ptr + at + 1, ly, mask=inside)
    tl.store(records_ptr + at + 2, a, mask=inside)
    tl.store(records_ptr + at + 3, p.to(tl.float32, bitcast=True), mask=inside)


@triton.jit
def msda_cells_backward_kernel(
    value_ptr, shapes_ptr, starts_ptr, counts_ptr, ends_ptr, records_ptr, grad_out_ptr,
    grad_value_ptr, grad_loc_ptr, grad_attn_ptr,
    S, CB,
    M: tl.constexpr, D: tl.constexpr, L: tl.constexpr, K: tl.constexpr,
    BLOCK_D: tl.constexpr, CHUNK: tl.constexpr,
):
    """Step 4: one cell of one (batch, head); see the section's comment."""
    c = CB - 1 - tl.program_id(0)  # the coarse levels' crowded cells start first
    bm = tl.program_id(1)
    b = (bm // M).to(tl.int64)
    m = bm % M
    key = bm * CB + c
    end = tl.load(ends_ptr + key)
    first = end - tl.load(counts_ptr + key)
    # Which level the cell is in, and where (a cell past the last level has no points).
    base = 0
    h = 0
    w = 0
    start = 0
    cell0 = 0
    for lvl in tl.static_range(L):
        hl = tl.load(shapes_ptr + 2 * lvl).to(tl.int32)
        wl = tl.load(shapes_ptr + 2 * lvl + 1).to(tl.int32)
        cells = tl.where((hl > 0) & (wl > 0), (hl + 1) * (wl + 1), 0)
        here = (c >= base) & (c < base + cells)
        h = tl.where(here, hl, h)
        w = tl.where(here, wl, w)
        start = tl.where(here, tl.load(starts_ptr + lvl).to(tl.int32), start)
        cell0 = tl.where(here, base, cell0)
        base += cells
    local = c - cell0
    y0 = local // (w + 1) - 1
    x0 = local % (w + 1) - 1
    offs_d = tl.arange(0, BLOCK_D)
    dm = offs_d < D
    head = (b * S * M + m) * D + offs_d
    pix00 = (start + y0 * w + x0).to(tl.int64) * (M * D)
    # The corners' validity as [BLOCK_D] vectors (a scalar mask combined with a vector one is
    # not a valid mask for the interpreter).
    y0v = y0 + tl.zeros_like(offs_d)
    x0v = x0 + tl.zeros_like(offs_d)
    ok00 = dm & (y0v >= 0) & (x0v >= 0)
    ok01 = dm & (y0v >= 0) & (x0v + 1 < w)
    ok10 = dm & (y0v + 1 < h) & (x0v >= 0)
    ok11 = dm & (y0v + 1 < h) & (x0v + 1 < w)
    step_y = w.to(tl.int64) * (M * D)
    v00 = tl.load(value_ptr + head + pix00, mask=ok00, other=0.0).to(tl.float32)
    v01 = tl.load(value_ptr + head + pix00 + M * D, mask=ok01, other=0.0).to(tl.float32)
    v10 = tl.load(value_ptr + head + pix00 + step_y, mask=ok10, other=0.0).to(tl.float32)
    v11 = tl.load(value_ptr + head + pix00 + step_y + M * D, mask=ok11,
                  other=0.0).to(tl.float32)
    w_f = w.to(tl.float32)
    h_f = h.to(tl.float32)
    acc00 = tl.zeros((BLOCK_D,), tl.float32)
    acc01 = tl.zeros((BLOCK_D,), tl.float32)
    acc10 = tl.zeros((BLOCK_D,), tl.float32)
    acc11 = tl.zeros((BLOCK_D,), tl.float32)
    rows = tl.arange(0, CHUNK)
    loc_ty = grad_loc_ptr.dtype.element_ty
    for i in range(first, end, CHUNK):
        r = i + rows
        ok = r < end
        lx = tl.load(records_ptr + 4 * r, mask=ok, other=0.0)
        ly = tl.load(records_ptr + 4 * r + 1, mask=ok, other=0.0)
        a = tl.load(records_ptr + 4 * r + 2, mask=ok, other=0.0)
        p = tl.load(records_ptr + 4 * r + 3, mask=ok, other=0.0).to(tl.int32, bitcast=True)
        pq = (p // (L * K)).to(tl.int64)
        g = tl.load(grad_out_ptr + (pq * D)[:, None] + offs_d[None, :],
                    mask=ok[:, None] & dm[None, :], other=0.0).to(tl.float32)
        w00 = (1.0 - lx) * (1.0 - ly)
        w01 = lx * (1.0 - ly)
        w10 = (1.0 - lx) * ly
        w11 = lx * ly
        sampled = (w00[:, None] * v00[None, :] + w01[:, None] * v01[None, :]
                   + w10[:, None] * v10[None, :] + w11[:, None] * v11[None, :])
        d_x = (v01 - v00)[None, :] * (1.0 - ly)[:, None] + (v11 - v10)[None, :] * ly[:, None]
        d_y = (v10 - v00)[None, :] * (1.0 - lx)[:, None] + (v11 - v01)[None, :] * lx[:, None]
        tl.store(grad_attn_ptr + p, tl.sum(g * sampled, axis=1).to(
            grad_attn_ptr.dtype.element_ty), mask=ok)
        tl.store(grad_loc_ptr + 2 * p, (a * w_f * tl.sum(g * d_x, axis=1)).to(loc_ty), mask=ok)
        tl.store(grad_loc_ptr + 2 * p + 1, (a * h_f * tl.sum(g * d_y, axis=1)).to(loc_ty),
                 mask=ok)
        share = g * a[:, None]
        acc00 += tl.sum(share * w00[:, None], axis=0)
        acc01 += tl.sum(share * w01[:, None], axis=0)
        acc10 += tl.sum(share * w10[:, None], axis=0)
        acc11 += tl.sum(share * w11[:, None], axis=0)
    some = (end + tl.zeros_like(offs_d)) > first
    gv = grad_value_ptr + head + pix00
    out_ty = grad_value_ptr.dtype.element_ty
    tl.atomic_add(gv, acc00.to(out_ty), mask=ok00 & some, sem="relaxed")
    tl.atomic_add(gv + M * D, acc01.to(out_ty), mask=ok01 & some, sem="relaxed")
    tl.atomic_add(gv + step_y, acc10.to(out_ty), mask=ok10 & some, sem="relaxed")
    tl.atomic_add(gv + step_y + M * D, acc11.to(out_ty), mask=ok11 & some, sem="relaxed")
