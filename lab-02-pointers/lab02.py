"""Lab 02 - Tensors are pointers: MSDA on flat 1-D buffers, and when int32 offsets overflow.

Goal: compute MSDA the way a GPU kernel will, from nothing but the address of element 0 of each
tensor and offsets you work out yourself, and learn how large a tensor may grow before those
offsets stop fitting in 32 bits.

In this lab you will:
  * turn a 4-D position (b, s, m, d) into a row-major flat offset;
  * rewrite MSDA on flat 1-D views of value, locations and weights: vectorized over the batch,
    queries and heads, with Python loops only over levels and points, and every out-of-range
    corner masked per axis;
  * find the largest offset a tensor needs and decide whether it still fits in int32.

Conventions (the same in every lab):
  value               (B, S, M, D)        levels flattened row-major and concatenated along S
  spatial_shapes      (L, 2)              rows are (H_l, W_l), height first
  level_start_index   (L,)                where each level begins along S
  sampling_locations  (B, Q, M, L, K, 2)  normalized (x, y); x runs along the width
  attention_weights   (B, Q, M, L, K)
  output              (B, Q, M * D)       heads concatenated: channel m * D + d

In a contiguous tensor of shape (A0, A1, ..., An) the element (i0, i1, ..., in) sits at the flat
offset (...((i0 * A1 + i1) * A2 + i2)...) * An + in: the last axis moves fastest.
"""

import torch


def flat_index(b: int, s: int, m: int, d: int, S: int, M: int, D: int) -> int:
    """Flat offset of ``value[b, s, m, d]`` in a contiguous (B, S, M, D) tensor.

    Args:
        b, s, m, d: the 4-D position.
        S, M, D: the sizes of the last three axes (the size of the first one is not needed).

    Returns:
        The offset as a Python int (exact, however large).
    """
    # TODO(Task 2.1): the row-major rule for four axes (about 1 line).
    raise NotImplementedError("Task 2.1: flat_index")


def flat_msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    """MSDA forward on flat 1-D buffers, vectorized over (B, Q, M); loops over levels and points.

    Args:
        value: (B, S, M, D) contiguous.
        spatial_shapes: (L, 2) int64, rows (H_l, W_l); read its entries as plain numbers.
        level_start_index: (L,) int64, where each level begins along S.
        sampling_locations: (B, Q, M, L, K, 2) normalized (x, y).
        attention_weights: (B, Q, M, L, K).

    Returns:
        (B, Q, M * D) tensor of ``value``'s dtype, accumulated in float64 for float64 inputs and
        in float32 otherwise.
    """
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    dev = value.device
    acc_dtype = torch.float64 if value.dtype == torch.float64 else torch.float32
    # The only views of the data you may use: flat 1-D buffers, as a kernel receives them.
    value_flat = value.reshape(-1)  # [B*S*M*D]
    loc_flat = sampling_locations.reshape(-1).to(acc_dtype)  # [B*Q*M*L*K*2]
    attn_flat = attention_weights.reshape(-1).to(acc_dtype)  # [B*Q*M*L*K]
    # int64 indices of the parallel axes, shaped to broadcast against each other.
    b = torch.arange(B, device=dev).view(B, 1, 1)  # [B, 1, 1]
    q = torch.arange(Q, device=dev).view(1, Q, 1)  # [1, Q, 1]
    m = torch.arange(M, device=dev).view(1, 1, M)  # [1, 1, M]
    d = torch.arange(D, device=dev)  # [D]
    out = torch.zeros(B, Q, M, D, dtype=acc_dtype, device=dev)  # [B, Q, M, D]
    # TODO(Task 2.2): for each level and point: find the slot p of every (b, q, m) sample in the
    # loc/attn layouts, read x, y and the weight there, go to pixels, floor, and for each of the
    # four corners build the [B, Q, M, D] flat indices into value, mask the corners outside the
    # image per axis, gather and accumulate (about 25 lines).
    raise NotImplementedError("Task 2.2: flat_msda")
    return out.reshape(B, Q, M * D).to(value.dtype)


def max_flat_index(B: int, S: int, M: int, D: int) -> int:
    """The largest flat offset a contiguous (B, S, M, D) tensor needs (that of its last element).

    Returns:
        A Python int.
    """
    # TODO(Task 2.3): the offset of the last element (about 1 line).
    raise NotImplementedError("Task 2.3: max_flat_index")


def overflows_int32(B: int, S: int, M: int, D: int) -> bool:
    """Whether some flat offset of a contiguous (B, S, M, D) tensor does not fit in int32.

    int32 is signed: it holds -2**31 .. 2**31 - 1.

    Returns:
        A Python bool: True when an offset of this tensor would overflow int32.
    """
    # TODO(Task 2.3): compare the largest offset with the largest int32 (about 1 line).
    raise NotImplementedError("Task 2.3: overflows_int32")


if __name__ == "__main__":
    # Run your functions on one small example and compare them with the student-facing spec
    # (msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not
    # the grade; `nox -s lab02` is.
    from msda_labs.student.check import run_lab

    run_lab(2, globals())
