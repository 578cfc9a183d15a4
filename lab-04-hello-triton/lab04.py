"""Lab 04 - Hello, Triton: grids of programs, blocks, masks, and loads whose addresses are data.

Goal: learn the Triton programming model one idea at a time, ending with a bilinear sampler over
one image, which is the inner loop of the MSDA kernel you write in lab 05.

In this lab you will:
  * read a worked example (vector add): a grid of programs, one power-of-two block each, and a
    mask for the ragged last block;
  * copy a matrix tile by tile, broadcasting row and column offsets into 2-D offsets (Task 4.1);
  * gather through an index tensor, out[i] = src[idx[i]] (Task 4.2);
  * sample one (H, W, D) image bilinearly at BLOCK_Q locations per program, with masks for the
    ragged query block, a non-power-of-two D, and corners outside the image (Task 4.3).

Triton in four lines: a kernel is a Python function decorated with ``@triton.jit``; it is launched
as ``kernel[grid](args...)`` and runs once per *program* of the grid; ``tl.program_id(axis)`` tells
a program who it is; tensors arrive as pointers to their first element, and the kernel computes
every address itself. Without a GPU, ``TRITON_INTERPRET=1`` runs the same kernels on the CPU
(slowly, and without bounds checks: an unmasked access outside a tensor reads or writes whatever
memory lies there).
"""

from msda_labs.student import runtime

# No GPU on this machine? Then Triton's interpreter runs the kernels (it must be chosen before
# triton is imported). The grader sets it for you.
runtime.auto()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# ------------------------------------------------------------------------------------------------
# Worked example (given, not graded): out = x + y on 1-D tensors.
#
#   grid = (cdiv(n, BLOCK),)                   one program per block of BLOCK elements
#   program pid owns elements pid * BLOCK ... pid * BLOCK + BLOCK - 1
#   the last block may hang over the end: the mask switches those lanes off
# ------------------------------------------------------------------------------------------------


@triton.jit
def add_kernel(
    x_ptr,  # (n,) first input
    y_ptr,  # (n,) second input
    out_ptr,  # (n,) output
    n,  # number of elements
    BLOCK: tl.constexpr,  # elements per program (a power of two: tl.arange needs one)
):
    """Program pid adds the BLOCK elements starting at pid * BLOCK."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # [BLOCK] element indices
    mask = offs < n  # [BLOCK] lanes past the end are switched off
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)  # masked lanes read `other`, touch nothing
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x + y, mask=mask)  # masked lanes write nothing


def add(x: torch.Tensor, y: torch.Tensor, BLOCK: int = 256) -> torch.Tensor:
    """Elementwise sum through ``add_kernel``.

    Args:
        x: (n,) or any shape, contiguous.
        y: same shape and dtype as ``x``, contiguous.
        BLOCK: elements per program.

    Returns:
        x + y, shaped like ``x``.
    """
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)
    add_kernel[grid](x, y, out, n, BLOCK=BLOCK)
    return out


# Takeaways of the worked example, used in every task below:
#   1. a kernel sees pointers, not shapes: it computes each element's address from its indices;
#   2. tl.arange needs a power-of-two length, so blocks are powers of two and masks trim them;
#   3. a masked load returns `other` in its switched-off lanes (later: zero padding for free);
#   4. tl.constexpr arguments are compile-time constants (a new value compiles a new kernel);
#   5. a grid has up to three axes: tl.program_id(0), (1), (2).

# ------------------------------------------------------------------------------------------------
# Task 4.1: copy an (R, C) row-major matrix, one BLOCK_R x BLOCK_C tile per program.
#
#   grid = (cdiv(R, BLOCK_R), cdiv(C, BLOCK_C))
#   program (pid_r, pid_c) owns rows    pid_r * BLOCK_R + [0, BLOCK_R)
#                          and columns  pid_c * BLOCK_C + [0, BLOCK_C)
#   element (r, c) lives at offset r * C + c; tiles on the bottom and right edges are ragged
# ------------------------------------------------------------------------------------------------


@triton.jit
def copy2d_kernel(
    x_ptr,  # (R, C) input, row-major
    out_ptr,  # (R, C) output, row-major
    R,  # rows
    C,  # columns (also the distance between two rows, in elements)
    BLOCK_R: tl.constexpr,  # rows per tile
    BLOCK_C: tl.constexpr,  # columns per tile
):
    """Program (pid_r, pid_c) copies the tile at rows pid_r * BLOCK_R.., columns pid_c * BLOCK_C.."""
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    # TODO(Task 4.1): build the tile's row offsets [BLOCK_R] and column offsets [BLOCK_C],
    # broadcast them into 2-D offsets r * C + c [BLOCK_R, BLOCK_C] and a 2-D mask
    # (row < R) & (col < C), then load the tile and store it under that mask (about 6 lines).
    raise NotImplementedError("Task 4.1: copy2d_kernel")


def copy2d(x: torch.Tensor, BLOCK_R: int = 16, BLOCK_C: int = 16) -> torch.Tensor:
    """A copy of a matrix made tile by tile by ``copy2d_kernel``.

    Args:
        x: (R, C) tensor.
        BLOCK_R: rows per tile.
        BLOCK_C: columns per tile.

    Returns:
        (R, C) contiguous copy of ``x``.
    """
    x = x.contiguous()
    R, C = x.shape
    out = torch.empty_like(x)
    grid = (triton.cdiv(R, BLOCK_R), triton.cdiv(C, BLOCK_C))
    copy2d_kernel[grid](x, out, R, C, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C)
    return out


# ------------------------------------------------------------------------------------------------
# Task 4.2: gather, out[i] = src[idx[i]]: the address of a load comes from data.
#
#   grid = (cdiv(n, BLOCK),); program pid owns out[pid * BLOCK + [0, BLOCK)]
#   a switched-off lane must still hold a legal address: load idx with other=0
# ------------------------------------------------------------------------------------------------


@triton.jit
def gather_kernel(
    src_ptr,  # (n_src,) values to pick from
    idx_ptr,  # (n,) int64 indices into src, each in [0, n_src)
    out_ptr,  # (n,) output: out[i] = src[idx[i]]
    n,  # number of indices (and outputs)
    BLOCK: tl.constexpr,  # outputs per program
):
    """Program pid gathers out[i] = src[idx[i]] for the BLOCK indices i starting at pid * BLOCK."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # [BLOCK] positions in idx and out
    mask = offs < n  # [BLOCK]
    # TODO(Task 4.2): load the indices under the mask (other=0), load src through them under
    # the same mask, and store the result (about 3 lines).
    raise NotImplementedError("Task 4.2: gather_kernel")


def gather(src: torch.Tensor, idx: torch.Tensor, BLOCK: int = 256) -> torch.Tensor:
    """``src[idx]`` through ``gather_kernel``.

    Args:
        src: (n_src,) values.
        idx: (n,) int64 indices into ``src``.
        BLOCK: outputs per program.

    Returns:
        (n,) tensor of ``src``'s dtype with out[i] = src[idx[i]].
    """
    src, idx = src.contiguous(), idx.contiguous()
    n = idx.numel()
    out = torch.empty(n, dtype=src.dtype, device=src.device)
    gather_kernel[(triton.cdiv(n, BLOCK),)](src, idx, out, n, BLOCK=BLOCK)
    return out


# ------------------------------------------------------------------------------------------------
# Task 4.3: bilinear sampling of one (H, W, D) image at Q normalized locations.
#
#   value (H * W, D) row-major: pixel (row, col) is the row row * W + col, channels contiguous
#   loc   (Q, 2) normalized (x, y) in [0, 1] (may stray outside): x along the width
#   out   (Q, D)
#
#   grid = (cdiv(Q, BLOCK_Q),): program pid owns queries pid * BLOCK_Q + [0, BLOCK_Q), all D
#   channels of each ("query-block tiling"); BLOCK_D = next_power_of_2(D) >= D.
#
#   for each query q of the block (all at once, as [BLOCK_Q] vectors):
#       x = loc[q, 0] * W - 0.5 ;  y = loc[q, 1] * H - 0.5        pixel centres at integers
#       x0 = floor(x), y0 = floor(y);  lx = x - x0, ly = y - y0;  x1 = x0 + 1, y1 = y0 + 1
#       out[q, :] = (1-lx)(1-ly) V[y0, x0] + lx(1-ly) V[y0, x1] + (1-lx)ly V[y1, x0] + lx ly V[y1, x1]
#   where a corner outside 0 <= col < W, 0 <= row < H reads 0 (a masked load with other=0).
# ------------------------------------------------------------------------------------------------


@triton.jit
def bilinear_kernel(
    value_ptr,  # (H * W, D) the image, pixel (row, col) at row row * W + col
    loc_ptr,  # (Q, 2) normalized (x, y)
    out_ptr,  # (Q, D) output
    Q,  # number of locations
    H,  # image height (rows)
    W,  # image width (columns)
    D: tl.constexpr,  # channels
    BLOCK_Q: tl.constexpr,  # queries per program
    BLOCK_D: tl.constexpr,  # next power of two >= D
):
    """Program pid samples the image at the BLOCK_Q locations starting at pid * BLOCK_Q."""
    pid = tl.program_id(0)
    offs_q = pid * BLOCK_Q + tl.arange(0, BLOCK_Q)  # [BLOCK_Q] query indices
    offs_d = tl.arange(0, BLOCK_D)  # [BLOCK_D] channel indices
    mask_q = offs_q < Q  # [BLOCK_Q] the last block of queries may be ragged
    mask_d = offs_d < D  # [BLOCK_D] D need not be a power of two
    # TODO(Task 4.3): (1) load x at 2q and y at 2q + 1 under mask_q, in fp32, and map them to
    # pixels; (2) floor, fractions, integer corners; (3) per-corner validity: the x tests include
    # mask_q, the y tests are range tests only; (4) four masked 2-D loads at rows (y * W + x) * D
    # plus offs_d, with other=0, in fp32; (5) blend with the four weights and store in out's
    # dtype under mask_q x mask_d (about 30 lines).
    raise NotImplementedError("Task 4.3: bilinear_kernel")


def bilinear(value_hw_d: torch.Tensor, loc: torch.Tensor, BLOCK_Q: int = 32) -> torch.Tensor:
    """Bilinear samples of an image through ``bilinear_kernel``.

    Args:
        value_hw_d: (H, W, D) image.
        loc: (Q, 2) normalized (x, y) locations; x runs along the width.
        BLOCK_Q: queries per program.

    Returns:
        (Q, D) tensor of ``value_hw_d``'s dtype; zero padding outside the image.
    """
    H, W, D = value_hw_d.shape
    value = value_hw_d.reshape(H * W, D).contiguous()
    loc = loc.contiguous()
    Q = loc.shape[0]
    out = torch.empty(Q, D, dtype=value.dtype, device=value.device)
    grid = (triton.cdiv(Q, BLOCK_Q),)
    bilinear_kernel[grid](value, loc, out, Q, H, W, D=D, BLOCK_Q=BLOCK_Q,
                          BLOCK_D=triton.next_power_of_2(D))
    return out


if __name__ == "__main__":
    # Run your functions on one small example and compare them with the student-facing spec
    # (msda_labs.student.spec): shapes, the first wrong element, guard bands, time. This is not
    # the grade; `nox -s lab04` is.
    from msda_labs.student.check import run_lab

    run_lab(4, globals())
