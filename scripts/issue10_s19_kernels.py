"""Experimental kernels of the session 19 probe (issue 10): measured on an H200, not shipped.

Results and reasons: docs/results/h200-msda-operator.md, "Session 19". The shipped kernels are
msda_labs.student.shipped_kernels; these are kept here so that the probe can be run again.
"""

import triton
import triton.language as tl

from msda_labs.student.shipped_kernels import _point_rows

# ------------------------------------------------------------------------------------------------
# Forward on channel slices (issue 10, session 19 probe).
# ------------------------------------------------------------------------------------------------


@triton.jit
def _forward_point(loc_ptr, attn_ptr, p, mask_q, h, w, start, PIX: tl.constexpr):
    """One point of each query row: the offset of corner (y0, x0), the corners' validity as
    [rows, 1] masks and their weights (attention weight included) as [rows, 1]."""
    two = tl.arange(0, 2)
    xy = tl.load(loc_ptr + 2 * p[:, None] + two[None, :], mask=mask_q[:, None],
                 other=0.0).to(tl.float32)
    loc_x, loc_y = tl.split(xy)
    a = tl.load(attn_ptr + p, mask=mask_q, other=0.0).to(tl.float32)
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
    vx0 = mask_q & (x0 >= 0) & (x0 < w)
    vx1 = mask_q & (x0 + 1 >= 0) & (x0 + 1 < w)
    vy0 = (y0 >= 0) & (y0 < h)
    vy1 = (y0 + 1 >= 0) & (y0 + 1 < h)
    off00 = ((start + y0 * w + x0) * PIX)[:, None]
    return (off00, (vy0 & vx0)[:, None], (vy0 & vx1)[:, None], (vy1 & vx0)[:, None],
            (vy1 & vx1)[:, None], (a * (1.0 - lx) * (1.0 - ly))[:, None],
            (a * lx * (1.0 - ly))[:, None], (a * (1.0 - lx) * ly)[:, None],
            (a * lx * ly)[:, None])


@triton.jit
def _bilinear(head, off00, step_y, PIX: tl.constexpr, m00, m01, m10, m11, w00, w01, w10, w11):
    v00 = tl.load(head + off00, mask=m00, other=0.0).to(tl.float32)
    v01 = tl.load(head + (off00 + PIX), mask=m01, other=0.0).to(tl.float32)
    v10 = tl.load(head + (off00 + step_y), mask=m10, other=0.0).to(tl.float32)
    v11 = tl.load(head + (off00 + step_y + PIX), mask=m11, other=0.0).to(tl.float32)
    return w00 * v00 + w01 * v01 + w10 * v10 + w11 * v11


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
    acc = tl.zeros((BLOCK_Q, C), dtype=tl.float32)
    for lvl in tl.static_range(L):
        h = tl.load(shapes_ptr + 2 * lvl).to(tl.int32)
        w = tl.load(shapes_ptr + 2 * lvl + 1).to(tl.int32)
        start = tl.load(starts_ptr + lvl).to(tl.int32)
        step_y = w * PIX
        for k in tl.static_range(K):
            p = pq * (L * K) + (lvl * K + k)
            off00, m00, m01, m10, m11, w00, w01, w10, w11 = _forward_point(
                loc_ptr, attn_ptr, p, mask_q, h, w, start, PIX)
            if lvl < EVICT_FROM:
                v00 = tl.load(head + off00, mask=m00, other=0.0, eviction_policy="evict_first")
                v01 = tl.load(head + (off00 + PIX), mask=m01, other=0.0,
                              eviction_policy="evict_first")
                v10 = tl.load(head + (off00 + step_y), mask=m10, other=0.0,
                              eviction_policy="evict_first")
                v11 = tl.load(head + (off00 + step_y + PIX), mask=m11, other=0.0,
                              eviction_policy="evict_first")
                acc += (w00 * v00.to(tl.float32) + w01 * v01.to(tl.float32)
                        + w10 * v10.to(tl.float32) + w11 * v11.to(tl.float32))
            else:
                acc += _bilinear(head, off00, step_y, PIX, m00, m01, m10, m11, w00, w01, w10,
                                 w11)
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


# ------------------------------------------------------------------------------------------------
# Forward with a thread's channels split over SPLIT register tiles (issue 10, session 19 probe).
#
# The slice probe found the forward's time growing with the number of (query, point) rows that
# threads work on, not with the bytes: a row's scalar work (location, floor, masks, weights,
# addresses) is done by every thread that holds part of the row. With the whole row in one tile
# of 32 fp32 channels, 8 threads share a row (one 16-byte vector each). Splitting the channels
# over SPLIT tiles of D / SPLIT gives each thread SPLIT vectors of the same row, so SPLIT times
# fewer threads per row and SPLIT times less scalar work, with the same bytes loaded.
# ------------------------------------------------------------------------------------------------


@triton.jit
def msda_forward_split_kernel(
    value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, out_ptr,
    Q, S,
    M: tl.constexpr, D: tl.constexpr, L: tl.constexpr, K: tl.constexpr,
    SPLIT: tl.constexpr, BLOCK_Q: tl.constexpr,
):
    """Program: BLOCK_Q queries x all D channels of one (batch, head), D in SPLIT tiles."""
    pid_q = tl.program_id(0)
    pid_bm = tl.program_id(1)
    b = (pid_bm // M).to(tl.int64)
    m = pid_bm % M
    DC: tl.constexpr = D // SPLIT
    offs_q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_c = tl.arange(0, DC)
    mask_q = offs_q < Q
    pq = (b.to(tl.int32) * Q + offs_q) * M + m
    head = value_ptr + (b * S * M + m) * D + offs_c[None, :]
    PIX: tl.constexpr = M * D
    acc0 = tl.zeros((BLOCK_Q, DC), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_Q, DC), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_Q, DC), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_Q, DC), dtype=tl.float32)
    for lvl in tl.static_range(L):
        h = tl.load(shapes_ptr + 2 * lvl).to(tl.int32)
        w = tl.load(shapes_ptr + 2 * lvl + 1).to(tl.int32)
        start = tl.load(starts_ptr + lvl).to(tl.int32)
        step_y = w * PIX
        for k in tl.static_range(K):
            p = pq * (L * K) + (lvl * K + k)
            off00, m00, m01, m10, m11, w00, w01, w10, w11 = _forward_point(
                loc_ptr, attn_ptr, p, mask_q, h, w, start, PIX)
            acc0 += _bilinear(head, off00, step_y, PIX, m00, m01, m10, m11, w00, w01, w10, w11)
            if SPLIT >= 2:
                acc1 += _bilinear(head + DC, off00, step_y, PIX, m00, m01, m10, m11,
                                  w00, w01, w10, w11)
            if SPLIT >= 4:
                acc2 += _bilinear(head + 2 * DC, off00, step_y, PIX, m00, m01, m10, m11,
                                  w00, w01, w10, w11)
                acc3 += _bilinear(head + 3 * DC, off00, step_y, PIX, m00, m01, m10, m11,
                                  w00, w01, w10, w11)
    out = out_ptr + (pq * D)[:, None] + offs_c[None, :]
    ty = out_ptr.dtype.element_ty
    tl.store(out, acc0.to(ty), mask=mask_q[:, None])
    if SPLIT >= 2:
        tl.store(out + DC, acc1.to(ty), mask=mask_q[:, None])
    if SPLIT >= 4:
        tl.store(out + 2 * DC, acc2.to(ty), mask=mask_q[:, None])
        tl.store(out + 3 * DC, acc3.to(ty), mask=mask_q[:, None])


# ------------------------------------------------------------------------------------------------
# Backward with the channels split over SPLIT register tiles (issue 10, session 19 probe): the
# shipped point-row backward, with each thread holding SPLIT vectors of a row (see the split
# forward above), so that the row's scalar work is repeated by SPLIT times fewer threads.
# ------------------------------------------------------------------------------------------------


@triton.jit
def msda_backward_split_kernel(
    value_ptr, shapes_ptr, starts_ptr, loc_ptr, attn_ptr, grad_out_ptr,
    grad_value_ptr, grad_loc_ptr, grad_attn_ptr,
    Q, S,
    M: tl.constexpr, D: tl.constexpr, L: tl.constexpr, K: tl.constexpr, LK: tl.constexpr,
    SPLIT: tl.constexpr, BLOCK_Q: tl.constexpr,
):
    """Program: BLOCK_Q queries x all L*K points x all D channels of one (batch, head)."""
    pid_q = tl.program_id(0)
    pid_bm = tl.program_id(1)
    b = (pid_bm // M).to(tl.int64)
    m = pid_bm % M
    DC: tl.constexpr = D // SPLIT
    (pq, p, ok, a, lx, ly, h_f, w_f, pix00, w,
     ok00, ok01, ok10, ok11) = _point_rows(shapes_ptr, starts_ptr, loc_ptr, attn_ptr, b, m, pid_q,
                                          Q, M, L, K, LK, BLOCK_Q, False)
    PIX: tl.constexpr = M * D
    off00 = (pix00 * PIX)[:, None]
    step_y = (w * PIX)[:, None]
    m00 = ok00[:, None]
    m01 = ok01[:, None]
    m10 = ok10[:, None]
    m11 = ok11[:, None]
    w00 = (1.0 - lx) * (1.0 - ly)
    w01 = lx * (1.0 - ly)
    w10 = (1.0 - lx) * ly
    w11 = lx * ly
    offs_c = tl.arange(0, DC)[None, :]
    head = (b * S * M + m) * D + offs_c
    sum_a = tl.zeros_like(lx)
    sum_x = tl.zeros_like(lx)
    sum_y = tl.zeros_like(lx)
    out_ty = grad_value_ptr.dtype.element_ty
    for t in tl.static_range(SPLIT):
        g = tl.load(grad_out_ptr + (pq * D + t * DC)[:, None] + offs_c, mask=ok[:, None],
                    other=0.0).to(tl.float32)
        at = head + t * DC + off00
        v00 = tl.load(value_ptr + at, mask=m00, other=0.0).to(tl.float32)
        v01 = tl.load(value_ptr + at + PIX, mask=m01, other=0.0).to(tl.float32)
        v10 = tl.load(value_ptr + at + step_y, mask=m10, other=0.0).to(tl.float32)
        v11 = tl.load(value_ptr + at + step_y + PIX, mask=m11, other=0.0).to(tl.float32)
        sampled = (w00[:, None] * v00 + w01[:, None] * v01 + w10[:, None] * v10
                   + w11[:, None] * v11)
        d_x = (v01 - v00) * (1.0 - ly)[:, None] + (v11 - v10) * ly[:, None]
        d_y = (v10 - v00) * (1.0 - lx)[:, None] + (v11 - v01) * lx[:, None]
        sum_a += tl.sum(g * sampled, axis=1)
        sum_x += tl.sum(g * d_x, axis=1)
        sum_y += tl.sum(g * d_y, axis=1)
        share = g * a[:, None]
        gv = grad_value_ptr + at
        tl.atomic_add(gv, (share * w00[:, None]).to(out_ty), mask=m00, sem="relaxed")
        tl.atomic_add(gv + PIX, (share * w01[:, None]).to(out_ty), mask=m01, sem="relaxed")
        tl.atomic_add(gv + step_y, (share * w10[:, None]).to(out_ty), mask=m10, sem="relaxed")
        tl.atomic_add(gv + step_y + PIX, (share * w11[:, None]).to(out_ty), mask=m11,
                      sem="relaxed")
    tl.store(grad_attn_ptr + p, sum_a.to(grad_attn_ptr.dtype.element_ty), mask=ok)
    loc_ty = grad_loc_ptr.dtype.element_ty
    tl.store(grad_loc_ptr + 2 * p, (a * w_f * sum_x).to(loc_ty), mask=ok)
    tl.store(grad_loc_ptr + 2 * p + 1, (a * h_f * sum_y).to(loc_ty), mask=ok)
