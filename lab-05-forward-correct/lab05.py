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
    raise NotImplementedError("Task 5.1: msda_forward_kernel")


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
