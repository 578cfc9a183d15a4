"""Lab 05 - The forward kernel, correct: multi-scale deformable attention as one Triton kernel.

Goal: write the complete MSDA forward kernel with query-block tiling, and make it agree with the
reference on every edge: ragged query blocks, a non-power-of-two head dim, corners outside the
image, half precision, and tensors too large for 32-bit offsets.

In this lab you will:
  * decode a 2-D grid into (query block, batch, head) and tile BLOCK_Q queries x all D channels;
  * unroll the level and point loops at compile time with tl.static_range;
  * gather four corner rows per point with masks that do three jobs (ragged queries,
    non-power-of-two D, zero padding outside the image);
  * accumulate in fp32 whatever the input dtype, and compute addresses in int64.

Conventions (the same in every lab):
  value               (B, S, M, D)        levels flattened row-major and concatenated along S
  spatial_shapes      (L, 2) int64        rows are (H_l, W_l), height first
  level_start_index   (L,) int64          where each level begins along S (or None: derived)
  sampling_locations  (B, Q, M, L, K, 2)  normalized (x, y); x runs along the width
  attention_weights   (B, Q, M, L, K)
  output              (B, Q, M * D)       heads concatenated: channel m * D + d

Flat element indices of the contiguous tensors (what the kernel computes itself):
  value[b, s, m, d]                ((b * S + s) * M + m) * D + d
  loc[b, q, m, l, k, :]            2 * p and 2 * p + 1, with p = ((b * Q + q) * M + m) * L * K + l * K + k
  attn[b, q, m, l, k]              p
  out[b, q, m, d]                  ((b * Q + q) * M + m) * D + d
"""

from msda_labs.student import runtime

# No GPU on this machine? Then Triton's interpreter runs the kernels (it must be chosen before
# triton is imported). The grader sets it for you.
runtime.auto()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# ------------------------------------------------------------------------------------------------
# The parallel decomposition.
#
#   grid = (cdiv(Q, BLOCK_Q), B * M)
#   program (pid_q, pid_bm) with b = pid_bm // M, m = pid_bm % M owns
#       out[b, pid_q * BLOCK_Q + [0, BLOCK_Q), m, 0:D]       a [BLOCK_Q, BLOCK_D] tile, D <= BLOCK_D
#
#   acc = zeros [BLOCK_Q, BLOCK_D] in fp32
#   for l in static_range(L):                          unrolled: L and K are constexpr
#       H, W, start = shapes[l, 0], shapes[l, 1], starts[l]      scalars
#       for k in static_range(K):
#           x, y, a = loc x, loc y, attn of point (l, k)  [BLOCK_Q] each, one per query
#           x_pix = x * W - 0.5; y_pix = y * H - 0.5; floor, fractions, corners (int64)
#           for each of the 4 corners (row, col, weight):
#               gather value[b, start + row * W + col, m, :]   [BLOCK_Q, BLOCK_D], 0 outside
#               acc += (a * weight)[:, None] * corner
#   store acc (cast to out's dtype) under mask_q x mask_d
# ------------------------------------------------------------------------------------------------


@triton.jit
def msda_forward_kernel(
    value_ptr,  # (B, S, M, D) the value pyramid
    shapes_ptr,  # (L, 2) int64, rows (H_l, W_l)
    starts_ptr,  # (L,) int64, where level l begins along S
    loc_ptr,  # (B, Q, M, L, K, 2) normalized (x, y)
    attn_ptr,  # (B, Q, M, L, K) attention weights
    out_ptr,  # (B, Q, M, D) output, every element written by exactly one program
    Q,  # queries per batch
    S,  # pixels of all levels together
    M: tl.constexpr,  # heads
    D: tl.constexpr,  # channels per head
    L: tl.constexpr,  # levels
    K: tl.constexpr,  # points per level
    BLOCK_Q: tl.constexpr,  # queries per program
    BLOCK_D: tl.constexpr,  # next power of two >= D
):
    """Program (pid_q, pid_bm) computes out[b, q, m, :] for BLOCK_Q consecutive queries q of one
    (batch b, head m) = divmod(pid_bm, M), all D channels at once."""
    pid_q = tl.program_id(0)  # which block of BLOCK_Q queries
    pid_bm = tl.program_id(1)  # which (batch, head): pid_bm = b * M + m
    # TODO(Task 5.1): decode b and m, build offs_q (int64!), offs_d, mask_q, mask_d and the
    # (b, q, m) row index pq; zero an fp32 accumulator; loop over levels (load H, W, start) and
    # points (load x, y, a for the BLOCK_Q queries); gather the four corners with masks that fold
    # in mask_q, the range tests and mask_d; accumulate; store in out's dtype under
    # mask_q x mask_d (about 45 lines).
    # BEGIN SOLUTION
    b = (pid_bm // M).to(tl.int64)  # int64: b * S * M * D can pass 2**31
    m = pid_bm % M
    offs_q = (pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)).to(tl.int64)  # [BLOCK_Q]
    offs_d = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    mask_q = offs_q < Q  # [BLOCK_Q] ragged last query block
    mask_d = offs_d < D  # [BLOCK_D] non-power-of-two D
    pq = (b * Q + offs_q) * M + m  # [BLOCK_Q] row of (b, q, m) in loc, attn and out
    val_base = value_ptr + (b * S * M + m) * D + offs_d[None, :]  # [1, BLOCK_D] at s = 0
    d_ok = mask_d[None, :]  # [1, BLOCK_D]
    acc = tl.zeros((BLOCK_Q, BLOCK_D), dtype=tl.float32)
    for lvl in tl.static_range(L):
        H = tl.load(shapes_ptr + 2 * lvl)  # int64 scalars
        W = tl.load(shapes_ptr + 2 * lvl + 1)
        start = tl.load(starts_ptr + lvl)
        Hf = H.to(tl.float32)
        Wf = W.to(tl.float32)
        for k in tl.static_range(K):
            p = pq * (L * K) + (lvl * K + k)  # [BLOCK_Q] point index into loc and attn
            x = tl.load(loc_ptr + 2 * p, mask=mask_q, other=0.0).to(tl.float32) * Wf - 0.5
            y = tl.load(loc_ptr + 2 * p + 1, mask=mask_q, other=0.0).to(tl.float32) * Hf - 0.5
            a = tl.load(attn_ptr + p, mask=mask_q, other=0.0).to(tl.float32)
            x0f = tl.floor(x)
            y0f = tl.floor(y)
            lx = x - x0f
            ly = y - y0f
            x0 = x0f.to(tl.int64)
            y0 = y0f.to(tl.int64)
            x1 = x0 + 1
            y1 = y0 + 1
            # mask_q rides on the x tests: a masked lane (loc 0, so x1 = 0) never dereferences.
            vx0 = mask_q & (x0 >= 0) & (x0 < W)
            vx1 = mask_q & (x1 >= 0) & (x1 < W)
            vy0 = (y0 >= 0) & (y0 < H)
            vy1 = (y1 >= 0) & (y1 < H)
            row0 = start + y0 * W  # [BLOCK_Q] pixel index along S of (y0, 0)
            row1 = row0 + W
            v00 = tl.load(val_base + ((row0 + x0) * (M * D))[:, None],
                          mask=(vy0 & vx0)[:, None] & d_ok, other=0.0).to(tl.float32)
            v01 = tl.load(val_base + ((row0 + x1) * (M * D))[:, None],
                          mask=(vy0 & vx1)[:, None] & d_ok, other=0.0).to(tl.float32)
            v10 = tl.load(val_base + ((row1 + x0) * (M * D))[:, None],
                          mask=(vy1 & vx0)[:, None] & d_ok, other=0.0).to(tl.float32)
            v11 = tl.load(val_base + ((row1 + x1) * (M * D))[:, None],
                          mask=(vy1 & vx1)[:, None] & d_ok, other=0.0).to(tl.float32)
            w00 = a * (1 - lx) * (1 - ly)
            w01 = a * lx * (1 - ly)
            w10 = a * (1 - lx) * ly
            w11 = a * lx * ly
            acc += (w00[:, None] * v00 + w01[:, None] * v01
                    + w10[:, None] * v10 + w11[:, None] * v11)
    out_offs = (pq * D)[:, None] + offs_d[None, :]  # [BLOCK_Q, BLOCK_D]
    tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty), mask=mask_q[:, None] & d_ok)
    # STARTER
    # raise NotImplementedError("Task 5.1: msda_forward_kernel")
    # END SOLUTION


def msda_forward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                 BLOCK_Q: int = 32):
    """MSDA forward through ``msda_forward_kernel`` (given: the launch, not the math).

    Args:
        value: (B, S, M, D).
        spatial_shapes: (L, 2) integer, rows (H_l, W_l).
        level_start_index: (L,) integer, or None to derive it from ``spatial_shapes``.
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y).
        attention_weights: (B, Q, M, L, K).
        BLOCK_Q: queries per program.

    Returns:
        (B, Q, M * D) tensor of ``value``'s dtype and device.
    """
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    value = value.contiguous()
    loc = sampling_locations.contiguous()
    attn = attention_weights.contiguous()
    shapes = spatial_shapes.to(device=value.device, dtype=torch.int64).contiguous()
    if level_start_index is None:
        sizes = shapes[:, 0] * shapes[:, 1]
        starts = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    else:
        starts = level_start_index.to(device=value.device, dtype=torch.int64).contiguous()
    # empty, not zeros: an element the kernel forgets to write holds garbage, not a lucky 0.
    out = torch.empty(B, Q, M, D, dtype=value.dtype, device=value.device)
    grid = (triton.cdiv(Q, BLOCK_Q), B * M)
    msda_forward_kernel[grid](value, shapes, starts, loc, attn, out, Q, S, M=M, D=D, L=L, K=K,
                              BLOCK_Q=BLOCK_Q, BLOCK_D=triton.next_power_of_2(D))
    return out.view(B, Q, M * D)
