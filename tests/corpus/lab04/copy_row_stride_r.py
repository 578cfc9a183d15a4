"""Task 4.1: rows R elements apart instead of C (the stride is the number of columns); the mask
is right."""
import triton
import triton.language as tl


@triton.jit
def copy2d_kernel(x_ptr, out_ptr, R, C, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    inside = (rows < R)[:, None] & (cols < C)[None, :]
    where = rows[:, None] * R + cols[None, :]
    tl.store(out_ptr + where, tl.load(x_ptr + where, mask=inside), mask=inside)
