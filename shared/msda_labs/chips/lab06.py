"""Lab 06 - Make it fast: the channel-chunked forward kernel, the wide-vs-narrow race, autotune.

Goal: keep the MSDA math of lab 05 exactly as it is and change only how the work is cut into
program instances, then measure which cut wins and let Triton pick the remaining knobs.

In this lab you will:
  * add a third grid axis over channel chunks: one program instance owns BLOCK_Q queries times
    CHUNK_D channels of one (batch, head), instead of BLOCK_Q queries times all D channels;
  * race the wide tiling (CHUNK_D = D, one 64-byte row per corner in fp16) against the narrow one
    (CHUNK_D = 2, 4 bytes per corner) on a GPU and read the effective bandwidth of each;
  * hand BLOCK_Q and num_warps to ``triton.autotune`` and launch through a grid that depends on
    the configuration the autotuner chose.

Conventions (the same in every lab):
  value               (B, S, M, D)        levels flattened row-major and concatenated along S
  spatial_shapes      (L, 2) int64        rows are (H_l, W_l), height first
  level_start_index   (L,) int64          where each level begins along S (or None)
  sampling_locations  (B, Q, M, L, K, 2)  normalized (x, y); x runs along the width
  attention_weights   (B, Q, M, L, K)
  output              (B, Q, M * D)       heads side by side: channel m * D + d

The blocked algorithm, for the program (pid_q, pid_bm, pid_d):

    b, m   = pid_bm // M, pid_bm % M
    queries  offs_q = pid_q * BLOCK_Q + [0, BLOCK_Q)          masked by offs_q < Q
    channels offs_d = pid_d * CHUNK_D + [0, CHUNK_D)          masked by offs_d < D
    acc[BLOCK_Q, CHUNK_D] = 0 (fp32)
    for each level l, point k (unrolled):
        x, y, a  = location and weight of every query             [BLOCK_Q]
        x_pix    = x * W_l - 0.5, y_pix = y * H_l - 0.5; floor; fractions lx, ly
        for each of the four corners (row, col, weight):
            acc += a * weight * value[b, start_l + row * W_l + col, m, offs_d]   (0 outside)
    out[b, offs_q, m, offs_d] = acc
"""

from msda_labs.student import runtime

# No GPU on this machine? Then Triton's interpreter runs the kernels (it must be chosen before
# triton is imported). The grader sets it for you.
runtime.auto()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# The configurations the autotuner may choose from (Task 6.2) and the arguments whose values
# decide when it must tune again.
AUTOTUNE_KEY = ["Q", "M", "D", "L", "K"]


@triton.jit
def msda_forward_chunked_kernel(
    value_ptr,  # (B, S, M, D) values, contiguous
    shapes_ptr,  # (L, 2) int64 (H_l, W_l)
    starts_ptr,  # (L,) int64 first row of each level along S
    loc_ptr,  # (B, Q, M, L, K, 2) normalized (x, y)
    attn_ptr,  # (B, Q, M, L, K) attention weights
    out_ptr,  # (B, Q, M, D) output, same dtype as value
    Q,  # number of queries
    S,  # number of value rows (sum of H_l * W_l)
    M: tl.constexpr,  # heads
    D: tl.constexpr,  # channels per head
    L: tl.constexpr,  # levels
    K: tl.constexpr,  # points per level
    BLOCK_Q: tl.constexpr,  # queries per program instance (a power of two)
    CHUNK_D: tl.constexpr,  # channels per program instance (a power of two)
):
    """One program: BLOCK_Q queries x CHUNK_D channels of one (batch, head)."""
    pid_q = tl.program_id(0)
    pid_bm = tl.program_id(1)
    pid_d = tl.program_id(2)
    # TODO(Task 6.1): the lab 05 body, cut down to one channel chunk (about 45 lines):
    #   1. b, m from pid_bm (b as int64); offs_q [BLOCK_Q] (int64) and
    #      offs_d = pid_d * CHUNK_D + arange(CHUNK_D) [CHUNK_D]; mask_q, mask_d (offs_d < D);
    #   2. pq = (b * Q + offs_q) * M + m [BLOCK_Q], the row of loc, attn and out;
    #      val_base = value_ptr + (b * S * M + m) * D + offs_d [1, CHUNK_D];
    #   3. acc = zeros [BLOCK_Q, CHUNK_D] fp32; for each level (tl.static_range): H, W, start;
    #      for each point: x, y, weight [BLOCK_Q] (masked, fp32), x * W - 0.5, y * H - 0.5,
    #      floor, fractions, int64 corners, per-axis validity (fold mask_q into the x tests);
    #   4. four gathers [BLOCK_Q, CHUNK_D] at val_base + (start + row * W + col) * M * D under
    #      (corner valid) x mask_d with other=0, blended into acc;
    #   5. one store of acc, cast to the output dtype, at out_ptr + pq * D + offs_d under
    #      mask_q x mask_d.
    # BEGIN SOLUTION
    b = (pid_bm // M).to(tl.int64)
    m = pid_bm % M
    offs_q = (pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)).to(tl.int64)  # [BLOCK_Q]
    offs_d = pid_d * CHUNK_D + tl.arange(0, CHUNK_D)  # [CHUNK_D]
    mask_q = offs_q < Q
    mask_d = offs_d < D
    # Row (b, q, m) of the locations, weights and output.
    pq = (b * Q + offs_q) * M + m  # [BLOCK_Q]
    # value[b, 0, m, offs_d]; a corner adds (row along S) * M * D.
    val_base = value_ptr + (b * S * M + m) * D + offs_d[None, :]  # [1, CHUNK_D]
    acc = tl.zeros((BLOCK_Q, CHUNK_D), dtype=tl.float32)
    for lvl in tl.static_range(L):
        h = tl.load(shapes_ptr + 2 * lvl)
        w = tl.load(shapes_ptr + 2 * lvl + 1)
        start = tl.load(starts_ptr + lvl)
        h_f = h.to(tl.float32)
        w_f = w.to(tl.float32)
        for k in tl.static_range(K):
            p = pq * (L * K) + lvl * K + k  # [BLOCK_Q] index of (b, q, m, l, k)
            loc_x = tl.load(loc_ptr + 2 * p, mask=mask_q, other=0.0).to(tl.float32)
            loc_y = tl.load(loc_ptr + 2 * p + 1, mask=mask_q, other=0.0).to(tl.float32)
            a = tl.load(attn_ptr + p, mask=mask_q, other=0.0).to(tl.float32)
            x = loc_x * w_f - 0.5
            y = loc_y * h_f - 0.5
            x0_f = tl.floor(x)
            y0_f = tl.floor(y)
            lx = x - x0_f
            ly = y - y0_f
            x0 = x0_f.to(tl.int64)
            y0 = y0_f.to(tl.int64)
            x1 = x0 + 1
            y1 = y0 + 1
            # Masked query lanes read loc 0 -> x0 = -1, so folding mask_q into vx keeps them out.
            vx0 = (x0 >= 0) & (x0 < w) & mask_q
            vx1 = (x1 >= 0) & (x1 < w) & mask_q
            vy0 = (y0 >= 0) & (y0 < h)
            vy1 = (y1 >= 0) & (y1 < h)
            row0 = start + y0 * w
            row1 = row0 + w
            v00 = tl.load(val_base + ((row0 + x0) * (M * D))[:, None],
                          mask=(vy0 & vx0)[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
            v01 = tl.load(val_base + ((row0 + x1) * (M * D))[:, None],
                          mask=(vy0 & vx1)[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
            v10 = tl.load(val_base + ((row1 + x0) * (M * D))[:, None],
                          mask=(vy1 & vx0)[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
            v11 = tl.load(val_base + ((row1 + x1) * (M * D))[:, None],
                          mask=(vy1 & vx1)[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
            w00 = (1.0 - lx) * (1.0 - ly) * a
            w01 = lx * (1.0 - ly) * a
            w10 = (1.0 - lx) * ly * a
            w11 = lx * ly * a
            acc += (w00[:, None] * v00 + w01[:, None] * v01
                    + w10[:, None] * v10 + w11[:, None] * v11)
    out_offs = (pq * D)[:, None] + offs_d[None, :]  # [BLOCK_Q, CHUNK_D]
    tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty),
             mask=mask_q[:, None] & mask_d[None, :])
    # STARTER
    # raise NotImplementedError("Task 6.1: msda_forward_chunked_kernel")
    # END SOLUTION


def _prepare(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    """Contiguous inputs, int64 shapes and level starts on value's device."""
    value = value.contiguous()
    loc = sampling_locations.contiguous()
    attn = attention_weights.contiguous()
    shapes = spatial_shapes.to(device=value.device, dtype=torch.int64).contiguous()
    if level_start_index is None:
        sizes = shapes[:, 0] * shapes[:, 1]
        starts = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    else:
        starts = level_start_index.to(device=value.device, dtype=torch.int64).contiguous()
    return value, shapes, starts, loc, attn


def msda_forward_chunked(value, spatial_shapes, level_start_index, sampling_locations,
                         attention_weights, BLOCK_Q=32, CHUNK_D=None):
    """MSDA forward with a 3-D grid (query blocks, batch x head, channel chunks).

    Args:
        value: (B, S, M, D) fp32, fp16 or bf16.
        spatial_shapes: (L, 2) integer rows (H_l, W_l).
        level_start_index: (L,) integer first row of each level, or None to derive it.
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y), value's dtype.
        attention_weights: (B, Q, M, L, K), value's dtype.
        BLOCK_Q: queries per program instance (a power of two).
        CHUNK_D: channels per program instance (a power of two); None means
            next_power_of_2(D), the wide tiling of lab 05.

    Returns:
        (B, Q, M * D) in value's dtype.
    """
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    value, shapes, starts, loc, attn = _prepare(value, spatial_shapes, level_start_index,
                                                sampling_locations, attention_weights)
    if CHUNK_D is None:
        CHUNK_D = triton.next_power_of_2(D)
    # Every element is written by exactly one program, so empty (not zeros) is enough: an element
    # the kernel forgets stays garbage and the grader sees it.
    out = torch.empty(B, Q, M, D, dtype=value.dtype, device=value.device)
    grid = (triton.cdiv(Q, BLOCK_Q), B * M, triton.cdiv(D, CHUNK_D))
    msda_forward_chunked_kernel[grid](
        value, shapes, starts, loc, attn, out, Q, S,
        M=M, D=D, L=L, K=K, BLOCK_Q=BLOCK_Q, CHUNK_D=CHUNK_D,
    )
    return out.view(B, Q, M * D)


# TODO(Task 6.2): three small pieces below: forward_configs, make_autotuned_forward, and the grid
# and launch of msda_forward_autotuned, in all (about 12 lines).


def forward_configs():
    """The autotuner's search space: BLOCK_Q in {16, 32, 64} x num_warps in {2, 4}.

    Returns:
        A list of ``triton.Config``; each sets only ``BLOCK_Q`` (the launcher fixes CHUNK_D).
    """
    # TODO(Task 6.2): one triton.Config per (BLOCK_Q, num_warps) pair (about 3 lines).
    # BEGIN SOLUTION
    return [triton.Config({"BLOCK_Q": block_q}, num_warps=warps)
            for block_q in (16, 32, 64) for warps in (2, 4)]
    # STARTER
    # raise NotImplementedError("Task 6.2: forward_configs")
    # END SOLUTION


def make_autotuned_forward(configs=None):
    """The chunked kernel wrapped in ``triton.autotune``.

    Args:
        configs: the ``triton.Config`` list to choose from; None means ``forward_configs()``.

    Returns:
        An autotuned kernel that re-tunes whenever one of AUTOTUNE_KEY changes; launch it like
        the plain kernel but without BLOCK_Q (the chosen config supplies it).
    """
    # TODO(Task 6.2): apply triton.autotune(configs=..., key=AUTOTUNE_KEY) to
    # msda_forward_chunked_kernel (about 3 lines).
    # BEGIN SOLUTION
    if configs is None:
        configs = forward_configs()
    return triton.autotune(configs=configs, key=AUTOTUNE_KEY)(msda_forward_chunked_kernel)
    # STARTER
    # raise NotImplementedError("Task 6.2: make_autotuned_forward")
    # END SOLUTION


_TUNED = None


def msda_forward_autotuned(value, spatial_shapes, level_start_index, sampling_locations,
                           attention_weights, kernel=None):
    """MSDA forward through the autotuned kernel; wide channel tiles (CHUNK_D = next pow2 of D).

    Args:
        value, spatial_shapes, level_start_index, sampling_locations, attention_weights: as in
            :func:`msda_forward_chunked`.
        kernel: an autotuned kernel from :func:`make_autotuned_forward`; None means one shared
            kernel built on first use with the default configs (it remembers what it tuned).

    Returns:
        (B, Q, M * D) in value's dtype.
    """
    global _TUNED
    if kernel is None:
        if _TUNED is None:
            _TUNED = make_autotuned_forward()
        kernel = _TUNED
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    value, shapes, starts, loc, attn = _prepare(value, spatial_shapes, level_start_index,
                                                sampling_locations, attention_weights)
    out = torch.empty(B, Q, M, D, dtype=value.dtype, device=value.device)
    CHUNK_D = triton.next_power_of_2(D)
    # TODO(Task 6.2): a grid that reads BLOCK_Q (and CHUNK_D) from the chosen config's meta
    # dictionary, then launch `kernel` without BLOCK_Q (about 5 lines).
    # BEGIN SOLUTION

    def grid(meta):
        return (triton.cdiv(Q, meta["BLOCK_Q"]), B * M, triton.cdiv(D, meta["CHUNK_D"]))

    kernel[grid](value, shapes, starts, loc, attn, out, Q, S, M=M, D=D, L=L, K=K,
                 CHUNK_D=CHUNK_D)
    # STARTER
    # raise NotImplementedError("Task 6.2: msda_forward_autotuned (the grid and the launch)")
    # END SOLUTION
    return out.view(B, Q, M * D)


if __name__ == "__main__":
    # Run your functions on one small example and compare them with the student-facing spec
    # (msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not
    # the grade; `nox -s lab06` is.
    from msda_labs.student.check import run_lab

    run_lab(6, globals())
