"""Lab 05 - The forward kernel, correct: multi-scale deformable attention as one Triton kernel.

Goal: write the complete MSDA forward kernel with query-block tiling, and make it agree with the
reference on every edge: ragged query blocks, a non-power-of-two head dim, corners outside the
image, half precision, and tensors too large for 32-bit offsets.

In this lab you will build the kernel in four graded steps:
  * Task 5.1 load_point: read one sampling point for BLOCK_Q queries and map it to pixels;
  * Task 5.2 gather_corner: read one corner's D channels, zero outside the image (masks that do
    three jobs: ragged queries, non-power-of-two D, zero padding);
  * Task 5.3 sample_point: floor, the four corners and their bilinear weights;
  * Task 5.4 msda_forward_kernel: decode a 2-D grid into (query block, batch, head), unroll the
    level and point loops with tl.static_range and compose the three helpers;
and then make it hold on every edge: ragged query tiles (5.5), fp32 accumulation whatever the
input dtype (5.6), int64 addresses (5.7), and a real GPU (5.8).

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
#           x, y, a = load_point(...)                  Task 5.1: [BLOCK_Q] each, in pixels
#           acc += sample_point(...)                   Task 5.3: a * bilinear, four corners,
#                                                      each one gather_corner(...) (Task 5.2)
#   store acc (cast to out's dtype) under mask_q x mask_d          Task 5.4: the kernel
#
# The three helpers are @triton.jit functions that the kernel calls like Python functions; the
# compiler inlines them, so they cost nothing at run time. Each one is graded on its own, by a
# tiny test kernel that calls it on one small tile and stores what it returns.
# ------------------------------------------------------------------------------------------------


@triton.jit
def load_point(
    loc_ptr,  # (B, Q, M, L, K, 2) normalized (x, y)
    attn_ptr,  # (B, Q, M, L, K) attention weights
    p,  # [BLOCK_Q] int64: the flat point index ((b * Q + q) * M + m) * L * K + l * K + k
    mask_q,  # [BLOCK_Q] bool: False for the lanes past Q
    H,  # the level's height (int64 scalar)
    W,  # the level's width (int64 scalar)
):
    """One sampling point per query lane, in pixel coordinates: (x_pix, y_pix, a).

    Returns three [BLOCK_Q] fp32 vectors: x_pix = x * W - 0.5 and y_pix = y * H - 0.5, where x
    is loc[2 * p] and y is loc[2 * p + 1], and a = attn[p]. A lane whose mask_q is False reads
    nothing and gets a = 0.
    """
    # TODO(Task 5.1): three loads under mask_q (other=0.0), each converted to fp32; then the
    # half-pixel shift of x and y (about 5 lines).
    # BEGIN SOLUTION
    x = tl.load(loc_ptr + 2 * p, mask=mask_q, other=0.0).to(tl.float32)
    y = tl.load(loc_ptr + 2 * p + 1, mask=mask_q, other=0.0).to(tl.float32)
    a = tl.load(attn_ptr + p, mask=mask_q, other=0.0).to(tl.float32)
    x_pix = x * W.to(tl.float32) - 0.5
    y_pix = y * H.to(tl.float32) - 0.5
    return x_pix, y_pix, a
    # STARTER
    # raise NotImplementedError("Task 5.1: load_point")
    # END SOLUTION


@triton.jit
def gather_corner(
    val_base,  # [1, BLOCK_D] pointers: value[b, 0, m, 0:BLOCK_D] (pixel s = 0 of this b and m)
    start,  # where the level begins along S (int64 scalar)
    row,  # [BLOCK_Q] int64: the corner's row, y (may lie outside [0, H))
    col,  # [BLOCK_Q] int64: the corner's column, x (may lie outside [0, W))
    H,  # the level's height (int64 scalar)
    W,  # the level's width (int64 scalar)
    mask_q,  # [BLOCK_Q] bool: False for the lanes past Q
    mask_d,  # [BLOCK_D] bool: False for the channels d >= D
    M: tl.constexpr,  # heads
    D: tl.constexpr,  # channels per head
):
    """The D channels of pixel (row, col) of one level, one row per query lane.

    Returns a [BLOCK_Q, BLOCK_D] fp32 tile: value[b, start + row * W + col, m, d] where the pixel
    lies inside the H x W level, the lane is on and d < D; 0.0 everywhere else, read from nowhere
    (zero padding: a corner outside the image adds nothing).
    """
    # TODO(Task 5.2): the corner's validity (lane on, row and column in range), its pixel index
    # along S, and one masked 2-D load of its channels (about 4 lines).
    # BEGIN SOLUTION
    inside = mask_q & (row >= 0) & (row < H) & (col >= 0) & (col < W)  # [BLOCK_Q]
    pix = start + row * W + col  # [BLOCK_Q] int64 pixel index along S
    return tl.load(val_base + (pix * (M * D))[:, None], mask=inside[:, None] & mask_d[None, :],
                   other=0.0).to(tl.float32)
    # STARTER
    # raise NotImplementedError("Task 5.2: gather_corner")
    # END SOLUTION


@triton.jit
def sample_point(
    val_base,  # [1, BLOCK_D] pointers, as gather_corner takes them
    start,  # where the level begins along S (int64 scalar)
    H,  # the level's height (int64 scalar)
    W,  # the level's width (int64 scalar)
    x,  # [BLOCK_Q] fp32 pixel x (load_point's x_pix)
    y,  # [BLOCK_Q] fp32 pixel y (load_point's y_pix)
    a,  # [BLOCK_Q] fp32 attention weight
    mask_q,  # [BLOCK_Q] bool
    mask_d,  # [BLOCK_D] bool
    M: tl.constexpr,  # heads
    D: tl.constexpr,  # channels per head
):
    """One point's share of the output: a * bilinear(level, x, y), [BLOCK_Q, BLOCK_D] fp32.

    The four corners around (x, y) are read with gather_corner; lab 01's weights blend them:
    with x0 = floor(x), lx = x - x0 (and the same for y), the corner (y0, x0) weighs
    (1 - lx)(1 - ly), (y0, x0 + 1) lx (1 - ly), (y0 + 1, x0) (1 - lx) ly, (y0 + 1, x0 + 1) lx ly.
    """
    # TODO(Task 5.3): floor and fractions, the four corners through gather_corner, and their
    # weighted sum times a (about 12 lines).
    # BEGIN SOLUTION
    x0f = tl.floor(x)
    y0f = tl.floor(y)
    lx = x - x0f
    ly = y - y0f
    x0 = x0f.to(tl.int64)
    y0 = y0f.to(tl.int64)
    v00 = gather_corner(val_base, start, y0, x0, H, W, mask_q, mask_d, M, D)
    v01 = gather_corner(val_base, start, y0, x0 + 1, H, W, mask_q, mask_d, M, D)
    v10 = gather_corner(val_base, start, y0 + 1, x0, H, W, mask_q, mask_d, M, D)
    v11 = gather_corner(val_base, start, y0 + 1, x0 + 1, H, W, mask_q, mask_d, M, D)
    w00 = a * (1 - lx) * (1 - ly)
    w01 = a * lx * (1 - ly)
    w10 = a * (1 - lx) * ly
    w11 = a * lx * ly
    return (w00[:, None] * v00 + w01[:, None] * v01
            + w10[:, None] * v10 + w11[:, None] * v11)
    # STARTER
    # raise NotImplementedError("Task 5.3: sample_point")
    # END SOLUTION


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
    # TODO(Task 5.4): decode b and m, build offs_q (int64!), offs_d, mask_q, mask_d, the
    # (b, q, m) row index pq and val_base; zero an fp32 accumulator; loop over levels (load H, W,
    # start) and points (load_point, then sample_point into the accumulator); store in out's
    # dtype under mask_q x mask_d (about 20 lines).
    # BEGIN SOLUTION
    b = (pid_bm // M).to(tl.int64)  # int64: b * S * M * D can pass 2**31
    m = pid_bm % M
    offs_q = (pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)).to(tl.int64)  # [BLOCK_Q]
    offs_d = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    mask_q = offs_q < Q  # [BLOCK_Q] ragged last query block
    mask_d = offs_d < D  # [BLOCK_D] non-power-of-two D
    pq = (b * Q + offs_q) * M + m  # [BLOCK_Q] row of (b, q, m) in loc, attn and out
    val_base = value_ptr + (b * S * M + m) * D + offs_d[None, :]  # [1, BLOCK_D] at s = 0
    acc = tl.zeros((BLOCK_Q, BLOCK_D), dtype=tl.float32)
    for lvl in tl.static_range(L):
        H = tl.load(shapes_ptr + 2 * lvl)  # int64 scalars
        W = tl.load(shapes_ptr + 2 * lvl + 1)
        start = tl.load(starts_ptr + lvl)
        for k in tl.static_range(K):
            p = pq * (L * K) + (lvl * K + k)  # [BLOCK_Q] point index into loc and attn
            x, y, a = load_point(loc_ptr, attn_ptr, p, mask_q, H, W)
            acc += sample_point(val_base, start, H, W, x, y, a, mask_q, mask_d, M, D)
    out_offs = (pq * D)[:, None] + offs_d[None, :]  # [BLOCK_Q, BLOCK_D]
    tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty),
             mask=mask_q[:, None] & mask_d[None, :])
    # STARTER
    # raise NotImplementedError("Task 5.4: msda_forward_kernel")
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


if __name__ == "__main__":
    # Run your functions on one small example each and compare them with what they should return
    # (the helpers one by one, then the kernel against the student-facing spec,
    # msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not the
    # grade; `nox -s lab05` is.
    from msda_labs.student.check import run_lab

    run_lab(5, globals())
