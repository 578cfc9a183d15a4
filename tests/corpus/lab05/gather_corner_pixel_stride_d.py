"""Task 5.2: pixels taken D elements apart along S (one head's width), not M * D."""
import triton
import triton.language as tl


@triton.jit
def gather_corner(val_base, start, row, col, H, W, mask_q, mask_d, M: tl.constexpr,
                  D: tl.constexpr):
    ok = (row >= 0) & (row < H)
    ok = ok & (col >= 0) & (col < W) & mask_q
    s = start + row * W + col
    ptrs = val_base + (s * D)[:, None]
    return tl.load(ptrs, mask=ok[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
