"""The course's MSDA kernels launched on guarded buffers: the probe side of the grader's kernel
tests, and what ``python labNN.py`` runs.

* :func:`launch_forward` / :func:`launch_backward`: one launch of a forward or backward kernel
  with the signature the labs fix (``value, spatial_shapes, level_start_index, loc, attn, ...,
  Q, S, M=, D=, L=, K=, BLOCK_Q=, ...``) and the grid its wrapper uses;
* :func:`forward_into_sentinel` / :func:`backward_into_sentinels`: the same on copies of the
  inputs between guard bands (NaN, so a stray read poisons the result) into outputs laid out
  between guards and pre-filled with the sentinel (so a stray or a missing write shows); the whole
  buffers come back (:mod:`msda_labs.student.guards` reads them).

It holds no answers: the kernels are the student's.
"""

from __future__ import annotations

import torch

from msda_labs.student.guards import between_guards, cdiv, guarded, pow2, sentinel_buffer

__all__ = ["on_device", "forward_guard", "value_guard", "point_guard", "launch_forward",
           "forward_into_sentinel", "launch_backward", "backward_into_sentinels"]

NAN = float("nan")


def on_device(tensors) -> tuple:
    """``tensors`` moved to the device the grading mode runs on (the CPU in the interpreter)."""
    from msda_labs.student import runtime

    dev = runtime.device()
    return tuple(t.to(dev) for t in tensors)


def forward_guard(block_q: int, M: int, D: int) -> int:
    """Guard band of a forward output: room for the widest overrun a missing mask can make, a
    whole block of rows past Q (at least 64 elements)."""
    return max(64, 2 * block_q * M * pow2(D))


def value_guard(S: int, M: int, D: int) -> int:
    """Guard band of value and grad_value: an unmasked corner of a sample far outside its level
    lands up to about a level away."""
    return 2 * S * M * pow2(D) + 64


def point_guard(block_q: int, M: int, L: int, K: int) -> int:
    """Guard band of the per-point tensors (loc, attn and their gradients): the rows q >= Q of
    the last query block reach up to BLOCK_Q queries past the end."""
    return 2 * block_q * M * L * K * 2 + 64


def launch_forward(kernel, inputs, out, *, block_q: int, grid=None, **meta) -> None:
    """``kernel[grid](value, shapes, starts, loc, attn, out, Q, S, M=, D=, L=, K=, BLOCK_Q=,
    **meta)``, as the labs' forward wrappers launch it; ``grid`` defaults to
    ``(cdiv(Q, block_q), B * M)``."""
    value, shapes, starts, loc, attn = inputs
    B, S, M, D = value.shape
    Q, L, K = loc.shape[1], loc.shape[3], loc.shape[4]
    grid = grid or (cdiv(Q, block_q), B * M)
    kernel[grid](value, shapes, starts, loc, attn, out, Q, S, M=M, D=D, L=L, K=K,
                 BLOCK_Q=block_q, **meta)


def forward_into_sentinel(kernel, inputs, *, block_q: int, in_guard: int, out_guard: int,
                          fills=(NAN, NAN, NAN), grid=None, **meta) -> torch.Tensor:
    """Launch a forward kernel on guarded device copies of ``inputs`` into a sentinel output.

    Args:
        kernel: the student's jit kernel (``module.<name>``).
        inputs: ``(value, spatial_shapes, level_start_index, loc, attn)`` (any device).
        block_q: BLOCK_Q of the launch.
        in_guard: guard band around value, loc and attn; ``fills`` are their guards' values.
        out_guard: guard band around the (B, Q, M, D) output.
        grid, meta: as in :func:`launch_forward`.

    Returns:
        The whole flat output buffer, guards included (check it with
        :func:`check_forward_output` or
        :func:`~msda_labs.grading.judge.guards.check_sentinel_buffer`).
    """
    value, shapes, starts, loc, attn = on_device(inputs)
    B, _, M, D = value.shape
    buf, out = sentinel_buffer((B, loc.shape[1], M, D), value.dtype, value.device, out_guard)
    guarded_in = [between_guards(t, in_guard, fill) for t, fill in zip((value, loc, attn), fills)]
    launch_forward(kernel, (guarded_in[0], shapes, starts, guarded_in[1], guarded_in[2]), out,
                   block_q=block_q, grid=grid, **meta)
    return buf


def launch_backward(kernel, inputs, grad_out, grads, *, block_q: int) -> None:
    """``kernel[(cdiv(Q, block_q), B * M)](value, shapes, starts, loc, attn, grad_out,
    grad_value, grad_loc, grad_attn, Q, S, M=, D=, L=, K=, BLOCK_Q=, BLOCK_D=pow2(D))``, as the
    lab 08 wrapper launches it; ``grad_out`` is (B, Q, M * D) or (B, Q, M, D)."""
    value, shapes, starts, loc, attn = inputs
    B, S, M, D = value.shape
    Q, L, K = loc.shape[1], loc.shape[3], loc.shape[4]
    kernel[(cdiv(Q, block_q), B * M)](value, shapes, starts, loc, attn, grad_out, *grads, Q, S,
                                      M=M, D=D, L=L, K=K, BLOCK_Q=block_q, BLOCK_D=pow2(D))


def backward_into_sentinels(kernel, inputs, grad_out, *, block_q: int):
    """Launch a backward kernel with every input between NaN guards, grad_value zeroed between
    zero guards (:func:`value_guard`: it is added into) and grad_loc / grad_attn between guards
    filled with the sentinel (:func:`point_guard`); fp32 gradients.

    Returns:
        ``(grad_value_buf, grad_loc_buf, grad_attn_buf)``: the three whole flat buffers.
    """
    value, shapes, starts, loc, attn = on_device(inputs)
    B, S, M, D = value.shape
    Q, L, K = loc.shape[1], loc.shape[3], loc.shape[4]
    vguard, pguard = value_guard(S, M, D), point_guard(block_q, M, L, K)
    dev = value.device
    gv_buf, grad_value = guarded(value.shape, 0.0, torch.float32, dev, vguard)
    gl_buf, grad_loc = sentinel_buffer(loc.shape, loc.dtype, dev, pguard)
    ga_buf, grad_attn = sentinel_buffer(attn.shape, attn.dtype, dev, pguard)
    g = grad_out.to(dev).reshape(B, Q, M, D)
    guarded_in = (between_guards(value, vguard), shapes, starts, between_guards(loc, pguard),
                  between_guards(attn, pguard))
    launch_backward(kernel, guarded_in, between_guards(g, pguard),
                    (grad_value, grad_loc, grad_attn), block_q=block_q)
    return gv_buf, gl_buf, ga_buf
