"""The grader's test kernels for lab 05's helpers (Tasks 5.1-5.3), imported only in the worker.

Each kernel is one program that calls the student's ``@triton.jit`` helper (passed in as a
``tl.constexpr`` argument) on one small tile and stores everything the helper returns, so the
judge can compare it lane by lane. The tiles are tiny: the interpreter runs them in milliseconds.
Kept out of the probes module's top level so that the judge process never imports triton.
"""

import triton
import triton.language as tl


@triton.jit
def point_kernel(loc_ptr, attn_ptr, p_ptr, on_ptr, shape_ptr, out_ptr,
                 helper: tl.constexpr, BLOCK_Q: tl.constexpr):
    """out = [x_pix | y_pix | a], three rows of BLOCK_Q, from helper(loc, attn, p, on, H, W)."""
    lanes = tl.arange(0, BLOCK_Q)
    p = tl.load(p_ptr + lanes)  # int64 point indices
    on = tl.load(on_ptr + lanes) != 0
    H = tl.load(shape_ptr)
    W = tl.load(shape_ptr + 1)
    x, y, a = helper(loc_ptr, attn_ptr, p, on, H, W)
    tl.store(out_ptr + lanes, x)
    tl.store(out_ptr + BLOCK_Q + lanes, y)
    tl.store(out_ptr + 2 * BLOCK_Q + lanes, a)


@triton.jit
def corner_kernel(value_ptr, level_ptr, row_ptr, col_ptr, on_ptr, out_ptr, m,
                  helper: tl.constexpr, M: tl.constexpr, D: tl.constexpr,
                  BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr):
    """out[BLOCK_Q, BLOCK_D] = helper(val_base, start, row, col, H, W, on, mask_d, M, D) for head
    m of batch 0; level_ptr holds (H, W, start)."""
    lanes = tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    row = tl.load(row_ptr + lanes)
    col = tl.load(col_ptr + lanes)
    on = tl.load(on_ptr + lanes) != 0
    H = tl.load(level_ptr)
    W = tl.load(level_ptr + 1)
    start = tl.load(level_ptr + 2)
    val_base = value_ptr + m * D + offs_d[None, :]
    tile = helper(val_base, start, row, col, H, W, on, offs_d < D, M, D)
    tl.store(out_ptr + lanes[:, None] * BLOCK_D + offs_d[None, :], tile)


@triton.jit
def sample_kernel(value_ptr, level_ptr, xy_ptr, a_ptr, on_ptr, out_ptr, m,
                  helper: tl.constexpr, M: tl.constexpr, D: tl.constexpr,
                  BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr):
    """out[BLOCK_Q, BLOCK_D] = helper(val_base, start, H, W, x, y, a, on, mask_d, M, D) for head m
    of batch 0; xy holds (x, y) pixel pairs, level_ptr (H, W, start)."""
    lanes = tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    x = tl.load(xy_ptr + 2 * lanes)
    y = tl.load(xy_ptr + 2 * lanes + 1)
    a = tl.load(a_ptr + lanes)
    on = tl.load(on_ptr + lanes) != 0
    H = tl.load(level_ptr)
    W = tl.load(level_ptr + 1)
    start = tl.load(level_ptr + 2)
    val_base = value_ptr + m * D + offs_d[None, :]
    tile = helper(val_base, start, H, W, x, y, a, on, offs_d < D, M, D)
    tl.store(out_ptr + lanes[:, None] * BLOCK_D + offs_d[None, :], tile)
