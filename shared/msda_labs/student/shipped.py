"""The kernels that the course's operator ships (lab 10): labs 06 and 08, reorganised for speed.

The math is exactly that of lab 05 (forward) and lab 07/08 (backward): bilinear sampling with
``x_pix = x * W - 0.5``, zero outside the level, fp32 arithmetic whatever the storage dtype. What
changes is who does which work (each choice measured on an H200, docs/performance.md):

* **Forward: lab 06's tiling.** A program owns ``BLOCK_Q`` queries x all D channels of one
  (batch, head) and walks the ``L * K`` points in turn. On SM 9.0 the launch is the one measured
  best on an H200 (4 queries and 1 warp for fp32, 16 and 2 for fp16/bf16); elsewhere it is
  autotuned over ``BLOCK_Q`` and ``num_warps`` on a key that changes only with the problem's
  shape class (``Q`` rounded up to a power of two, ``M``, ``D``, ``L``, ``K``, dtypes), and the
  pick is remembered per class so that later calls skip the autotuner's dispatch. Cheaper
  bookkeeping than lab 06: int32 offsets unless the tensors need int64, each point's ``(x, y)``
  loaded as one pair.
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
and derive the level starts on the device when they are not given. Off SM 9.0, the first call
for a new shape class runs the forward's autotuner, which does synchronize; call once before
capturing a CUDA graph (the warm-up every graph user does anyway). Under ``torch.compile`` the
two launchers are opaque custom ops (``msda_labs::shipped_forward``/``shipped_backward``). The
``@triton.jit`` kernels themselves are in :mod:`msda_labs.student.shipped_kernels`.

Both kernels are launched through :class:`msda_labs.student.shipped_launch.DirectLauncher`, which
skips Triton's per-call dispatch once a kernel is compiled (about 30 µs of host time per forward
on the H200 machine, where a decoder-sized training step is bound by the host).
"""

from __future__ import annotations

import torch
import triton

from msda_labs.student import runtime
from msda_labs.student.guards import cdiv, pow2
from msda_labs.student.shipped_kernels import msda_backward_rows_kernel, msda_forward_tiles_kernel
from msda_labs.student.shipped_launch import DirectLauncher

INT32_LIMIT = 2**31 - 1


# ------------------------------------------------------------------------------------------------
# Which program does which (batch, head, query block): ORDER 0 is a grid (query blocks, B * M),
# ORDER 1 a grid (M, query blocks, B) (see shipped_kernels._program_coords).
# ------------------------------------------------------------------------------------------------


# The launchers size grids and tiles with the plain-Python ``cdiv`` and ``pow2`` of
# msda_labs.student.guards, not ``triton.cdiv`` / ``triton.next_power_of_2``: Triton's are
# constexpr functions whose host call unwraps every argument first, about 2 µs each on the H200
# machine's host, six times a training step (docs/performance.md).
def _grid(order: int, Q: int, block_q: int, B: int, M: int) -> tuple:
    blocks = cdiv(Q, block_q)
    if order == 0:
        return (blocks, B * M)
    return (M, blocks, B)


# ------------------------------------------------------------------------------------------------
# Forward.
# ------------------------------------------------------------------------------------------------


def forward_configs() -> list:
    """The forward's search space: BLOCK_Q x num_warps (the order is fixed by FWD_ORDER)."""
    return [triton.Config({"BLOCK_Q": block_q}, num_warps=warps)
            for block_q, warps in ((8, 2), (8, 4), (16, 2), (16, 4), (32, 4), (64, 8))]


FWD_ORDER = 0
_FORWARD_TUNED = None
# Shape class -> launch. On SM 9.0: the launch measured best on an H200 at both presets
# (docs/results/h200-kernel-probes/launch-tiles-and-host.json, 9 tiles, medians of 3
# alternating rounds: fp32 4 queries x 1 warp took 9.8 µs at the decoder and 223.6 at the
# encoder, 8 x 2 10.5 and 222.6; half precision 16 x 2 7.0-7.6 and 150.8-162.6, within 1% of the
# best at both). The autotuner, which times with a flushed L2, had left the fp32 encoder at
# 233 µs. Elsewhere: the autotuner's pick, remembered, because its own dispatch costs host time
# on every call.
SM90_FORWARD = {"fp32": {"BLOCK_Q": 4, "num_warps": 1}, "half": {"BLOCK_Q": 16, "num_warps": 2}}
_FORWARD_PICKS: dict = {}


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
    device = value.device
    shapes = _int64_on(spatial_shapes, device)
    if level_start_index is None:
        sizes = shapes[:, 0] * shapes[:, 1]
        starts = torch.cumsum(sizes, 0) - sizes  # exclusive prefix sum, on the device
    else:
        starts = _int64_on(level_start_index, device)
    return value, shapes, starts, loc, attn


def _int64_on(table, device):
    """``table`` as a contiguous int64 tensor on ``device`` (itself when it already is one)."""
    if table.dtype == torch.int64 and table.device == device and table.is_contiguous():
        return table
    return table.to(device=device, dtype=torch.int64).contiguous()


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
    """MSDA forward on the tiled kernel.

    Args:
        value: (B, S, M, D) fp32, fp16 or bf16.
        spatial_shapes: (L, 2) integer rows (H_l, W_l).
        level_start_index: (L,) integer, or None to derive it (on the device).
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y), value's dtype.
        attention_weights: (B, Q, M, L, K), value's dtype.
        config: ``{"BLOCK_Q", "num_warps", "ORDER"}`` to choose the launch (benchmarks); None
            takes :data:`SM90_FORWARD` on SM 9.0, tunes on other GPUs and uses a small fixed
            tile in the interpreter.

    Returns:
        (B, Q, M * D) in value's dtype.
    """
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    value, shapes, starts, loc, attn = _prepare(value, spatial_shapes, level_start_index,
                                                sampling_locations, attention_weights)
    out = torch.empty((B, Q, M, D), dtype=value.dtype, device=value.device)
    q_bucket = pow2(Q)
    idx64 = _needs_int64(B, S, Q, M, D, L, K)
    block_d = pow2(D)
    if config is None:
        config = _forward_config(value, loc, (q_bucket, M, D, L, K))
    if config is None:  # first call of this shape class off SM 9.0: tune (this one call syncs)
        tuned = _tuned_forward()
        tuned[lambda meta: _grid(FWD_ORDER, Q, meta["BLOCK_Q"], B, M)](
            value, shapes, starts, loc, attn, out, Q, S, q_bucket, M=M, D=D, L=L, K=K,
            IDX64=idx64, BLOCK_D=block_d, ORDER=FWD_ORDER)
        best = tuned.best_config
        _FORWARD_PICKS[(q_bucket, M, D, L, K, value.dtype, loc.dtype, value.device)] = dict(
            best.kwargs, num_warps=best.num_warps)
        return out.view(B, Q, M * D)
    order = config.get("ORDER", FWD_ORDER)
    block_q = config["BLOCK_Q"]
    _FORWARD(_grid(order, Q, block_q, B, M),
             (value, shapes, starts, loc, attn, out, Q, S, q_bucket, M, D, L, K, idx64, order,
              block_q, block_d), config.get("num_warps", 4))
    return out.view(B, Q, M * D)


def _forward_config(value, loc, shape_class: tuple) -> dict | None:
    """The launch for this shape class: remembered, SM 9.0's table, the interpreter's small
    tile, or None (not tuned yet)."""
    if runtime.interpreted():
        return {"BLOCK_Q": 8, "num_warps": 4}
    key = shape_class + (value.dtype, loc.dtype, value.device)
    config = _FORWARD_PICKS.get(key)
    if config is None and device_capability(value.device)[0] == 9:
        config = SM90_FORWARD["fp32" if value.dtype == torch.float32 else "half"]
        _FORWARD_PICKS[key] = config
    return config


_CAPABILITIES: dict = {}


def device_capability(device) -> tuple:
    """``torch.cuda.get_device_capability`` of a CUDA device, asked once per device."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    found = _CAPABILITIES.get(index)
    if found is None:
        found = _CAPABILITIES[index] = tuple(torch.cuda.get_device_capability(index))
    return found


_FORWARD = DirectLauncher(msda_forward_tiles_kernel)


# ------------------------------------------------------------------------------------------------
# Backward.
# ------------------------------------------------------------------------------------------------

# The backward's launch: fixed, not autotuned (tuning a kernel that accumulates with atomics
# would need its output reset between trials). Chosen on an H200 (docs/results/).
# H200 sweep: one query per program, two warps; fp32 accumulators
# prefer the (batch, head)-major order, half-precision ones the head-major order (a few %).
BWD_BLOCK_Q = 1
BWD_NUM_WARPS = 2


_BACKWARD = DirectLauncher(msda_backward_rows_kernel)


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
    _BACKWARD(_grid(order, Q, block_q, B, M),
              (value, shapes, starts, loc, attn, grad_out, grad_value, grad_loc, grad_attn, Q, S,
               M, D, L, K, pow2(L * K), _needs_int64(B, S, Q, M, D, L, K),
               order, block_q, pow2(D)), num_warps or BWD_NUM_WARPS)
    if grad_value.dtype != value.dtype:
        grad_value = grad_value.to(value.dtype)
    return grad_value, grad_loc, grad_attn


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
