"""The kernels that the course's operator ships (lab 10): labs 06 and 08, reorganised for speed.

The math is exactly that of lab 05 (forward) and lab 07/08 (backward): bilinear sampling with
``x_pix = x * W - 0.5``, zero outside the level, fp32 arithmetic whatever the storage dtype. What
changes is who does which work (each choice measured on an H200, docs/results/h200-bench/):

* **Forward: lab 06's tiling.** A program owns ``BLOCK_Q`` queries x all D channels of one
  (batch, head) and walks the ``L * K`` points in turn. Autotuned over ``BLOCK_Q`` and
  ``num_warps`` on a key that changes only with the problem's shape class (``Q`` rounded up to a
  power of two, ``M``, ``D``, ``L``, ``K``, dtypes). Cheaper bookkeeping than lab 06: int32
  offsets unless the tensors need int64, each point's ``(x, y)`` loaded as one pair.
* **Backward: one tile row per sample point.** A program owns ``BLOCK_Q`` queries and all their
  ``L * K`` points at once: its tile has ``BLOCK_Q * LK`` rows (``LK`` = next power of two of
  ``L * K``) and D channel columns, so the sixteen gathers of a query are in flight together
  instead of one after another. The locations and weights of a query are contiguous, so their
  loads coalesce; each row looks up its level's ``H``, ``W`` and start in the tiny shape tables.
  ``grad_loc`` and ``grad_attn`` of a point are reductions over its row, stored by the one
  program that owns the point (no atomics). ``grad_value`` stays an atomic scatter, one add per
  (point, corner, channel); on SM 9.0 Triton emits one vector atomic per four fp32 (eight
  fp16/bf16) neighbouring channels (``atom.global.add.v4.f32``, ``.v8.f16``). An inline-PTX
  ``red.global.add.v4`` variant measured the same and was dropped.
* **Index width**: int32 unless the tensors are large enough to need int64 (``IDX64``, decided
  on the host from the shapes: no device value is read).

Nothing here synchronizes with the device: the launchers read only shapes, dtypes and devices,
and derive the level starts on the device when they are not given. The first call for a new
shape class runs the forward's autotuner, which does synchronize; call once before capturing a
CUDA graph (the warm-up every graph user does anyway). Under ``torch.compile`` the two launchers
are opaque custom ops (``msda_labs::shipped_forward``/``shipped_backward``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from msda_labs.student import runtime

INT32_LIMIT = 2**31 - 1


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


def _grid(order: int, Q: int, block_q: int, B: int, M: int) -> tuple:
    if order == 0:
        return (triton.cdiv(Q, block_q), B * M)
    return (M, triton.cdiv(Q, block_q), B)


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


def forward_configs() -> list:
    """The forward's search space: BLOCK_Q x num_warps (the order is fixed by FWD_ORDER)."""
    return [triton.Config({"BLOCK_Q": block_q}, num_warps=warps)
            for block_q, warps in ((8, 2), (8, 4), (16, 2), (16, 4), (32, 4), (64, 8))]


FWD_ORDER = 0
_FORWARD_TUNED = None


def _tuned_forward():
    global _FORWARD_TUNED
    if _FORWARD_TUNED is None:
        _FORWARD_TUNED = triton.autotune(configs=forward_configs(),
                                         key=["Q_BUCKET", "M", "D", "L", "K"])(
            msda_forward_tiles_kernel)
    return _FORWARD_TUNED


def _prepare(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    """Contiguous inputs and int64 tables on value's device; no value is read on the host."""
    value = value.contiguous()
    loc = sampling_locations.contiguous()
    attn = attention_weights.contiguous()
    shapes = spatial_shapes.to(device=value.device, dtype=torch.int64).contiguous()
    if level_start_index is None:
        sizes = shapes[:, 0] * shapes[:, 1]
        starts = torch.cumsum(sizes, 0) - sizes  # exclusive prefix sum, on the device
    else:
        starts = level_start_index.to(device=value.device, dtype=torch.int64).contiguous()
    return value, shapes, starts, loc, attn


def _needs_int64(B: int, S: int, Q: int, M: int, D: int, L: int, K: int) -> bool:
    return max(B * S * M * D, 2 * B * Q * M * L * K, B * Q * M * D) > INT32_LIMIT


def msda_forward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                 config: dict | None = None):
    """MSDA forward (see :func:`_forward_launch`); an opaque custom op under torch.compile."""
    if config is None and _compiling():
        return _forward_op(value, spatial_shapes, level_start_index, sampling_locations,
                           attention_weights)
    return _forward_launch(value, spatial_shapes, level_start_index, sampling_locations,
                           attention_weights, config)


def _forward_launch(value, spatial_shapes, level_start_index, sampling_locations,
                    attention_weights, config: dict | None = None):
    """MSDA forward on the tiled kernel (autotuned on a GPU).

    Args:
        value: (B, S, M, D) fp32, fp16 or bf16.
        spatial_shapes: (L, 2) integer rows (H_l, W_l).
        level_start_index: (L,) integer, or None to derive it (on the device).
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y), value's dtype.
        attention_weights: (B, Q, M, L, K), value's dtype.
        config: ``{"BLOCK_Q", "num_warps", "ORDER"}`` to bypass the autotuner (benchmarks);
            None tunes on a GPU and uses a small fixed tile in the interpreter.

    Returns:
        (B, Q, M * D) in value's dtype.
    """
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    value, shapes, starts, loc, attn = _prepare(value, spatial_shapes, level_start_index,
                                                sampling_locations, attention_weights)
    out = torch.empty(B, Q, M, D, dtype=value.dtype, device=value.device)
    args = (value, shapes, starts, loc, attn, out, Q, S, triton.next_power_of_2(Q))
    sizes = dict(M=M, D=D, L=L, K=K, IDX64=_needs_int64(B, S, Q, M, D, L, K),
                 BLOCK_D=triton.next_power_of_2(D))
    if config is None and runtime.interpreted():
        config = {"BLOCK_Q": 8, "num_warps": 4}
    if config is not None:
        order = config.get("ORDER", FWD_ORDER)
        block_q = config["BLOCK_Q"]
        msda_forward_tiles_kernel[_grid(order, Q, block_q, B, M)](
            *args, **sizes, ORDER=order, BLOCK_Q=block_q, num_warps=config.get("num_warps", 4))
    else:
        def grid(meta):
            return _grid(FWD_ORDER, Q, meta["BLOCK_Q"], B, M)

        _tuned_forward()[grid](*args, **sizes, ORDER=FWD_ORDER)
    return out.view(B, Q, M * D)


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


# The backward's launch: fixed, not autotuned (tuning a kernel that accumulates with atomics
# would need its output reset between trials). Chosen on an H200 (docs/results/).
# H200 sweep (scripts/issue10_sweep2.py): one query per program, two warps; fp32 accumulators
# prefer the (batch, head)-major order, half-precision ones the head-major order (a few %).
BWD_BLOCK_Q = 1
BWD_NUM_WARPS = 2


def _bwd_order(accum_dtype: torch.dtype) -> int:
    return 0 if accum_dtype == torch.float32 else 1


def msda_backward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                  grad_out, fp32_grad_accum=False, BLOCK_Q=None, num_warps=None, order=None):
    """MSDA backward (see :func:`_backward_launch`); an opaque custom op under torch.compile."""
    if BLOCK_Q is None and num_warps is None and order is None and _compiling():
        return _backward_op(value, spatial_shapes, level_start_index, sampling_locations,
                            attention_weights, grad_out, bool(fp32_grad_accum))
    return _backward_launch(value, spatial_shapes, level_start_index, sampling_locations,
                            attention_weights, grad_out, fp32_grad_accum, BLOCK_Q, num_warps,
                            order)


def _backward_launch(value, spatial_shapes, level_start_index, sampling_locations,
                     attention_weights, grad_out, fp32_grad_accum=False, BLOCK_Q=None,
                     num_warps=None, order=None):
    """MSDA backward on the point-row kernel.

    Args:
        value, spatial_shapes, level_start_index, sampling_locations, attention_weights: as in
            :func:`msda_forward`.
        grad_out: (B, Q, M * D) upstream gradient.
        fp32_grad_accum: accumulate grad_value in fp32 (then cast to value's dtype) instead of in
            value's dtype (lab 09's switch decides).
        BLOCK_Q, num_warps: the launch (None: :data:`BWD_BLOCK_Q`, :data:`BWD_NUM_WARPS`).
        order: 0 walks the queries of one (batch, head) first, 1 the heads of one query block
            first (None: fp32 accumulators 0, half-precision ones 1).

    Returns:
        (grad_value, grad_loc, grad_attn), each in the dtype of its input.
    """
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    value, shapes, starts, loc, attn = _prepare(value, spatial_shapes, level_start_index,
                                                sampling_locations, attention_weights)
    grad_out = grad_out.reshape(B, Q, M, D).contiguous()
    accum_dtype = torch.float32 if fp32_grad_accum else value.dtype
    grad_value = torch.zeros(B, S, M, D, dtype=accum_dtype, device=value.device)
    grad_loc = torch.empty_like(loc)
    grad_attn = torch.empty_like(attn)
    block_q = BLOCK_Q or (2 if runtime.interpreted() else BWD_BLOCK_Q)
    order = _bwd_order(accum_dtype) if order is None else order
    grid = _grid(order, Q, block_q, B, M)
    msda_backward_rows_kernel[grid](
        value, shapes, starts, loc, attn, grad_out, grad_value, grad_loc, grad_attn, Q, S,
        M=M, D=D, L=L, K=K, LK=triton.next_power_of_2(L * K),
        IDX64=_needs_int64(B, S, Q, M, D, L, K), BLOCK_Q=block_q,
        ORDER=order, BLOCK_D=triton.next_power_of_2(D), num_warps=num_warps or BWD_NUM_WARPS)
    return grad_value.to(value.dtype), grad_loc, grad_attn


# ------------------------------------------------------------------------------------------------
# torch.compile: the launchers as opaque custom ops, so that a compiled graph calls them as they
# are (Dynamo then needs to see neither the autotuner nor which pointer a kernel writes).
# ------------------------------------------------------------------------------------------------


def _compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and compiler.is_compiling())


@torch.library.custom_op("msda_labs::shipped_forward", mutates_args=())
def _forward_op(value: torch.Tensor, spatial_shapes: torch.Tensor,
                level_start_index: torch.Tensor | None, sampling_locations: torch.Tensor,
                attention_weights: torch.Tensor) -> torch.Tensor:
    return _forward_launch(value, spatial_shapes, level_start_index, sampling_locations,
                           attention_weights).clone()


@_forward_op.register_fake
def _forward_fake(value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights):
    B, _, M, D = value.shape
    return value.new_empty(B, sampling_locations.shape[1], M * D)


@torch.library.custom_op("msda_labs::shipped_backward", mutates_args=())
def _backward_op(value: torch.Tensor, spatial_shapes: torch.Tensor,
                 level_start_index: torch.Tensor | None, sampling_locations: torch.Tensor,
                 attention_weights: torch.Tensor, grad_out: torch.Tensor,
                 fp32_grad_accum: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward_launch(value, spatial_shapes, level_start_index, sampling_locations,
                            attention_weights, grad_out, fp32_grad_accum)


@_backward_op.register_fake
def _backward_fake(value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights, grad_out, fp32_grad_accum):
    return (torch.empty_like(value), torch.empty_like(sampling_locations),
            torch.empty_like(attention_weights))
