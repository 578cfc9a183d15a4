"""Task 5.3: the corner found by an int cast (truncation toward zero), not floor."""
import triton
import triton.language as tl


@triton.jit
def sample_point(val_base, start, H, W, x, y, a, mask_q, mask_d, M: tl.constexpr,
                 D: tl.constexpr):
    c = x.to(tl.int64)
    r = y.to(tl.int64)
    fx = x - c.to(tl.float32)
    fy = y - r.to(tl.float32)
    out = gather_corner(val_base, start, r, c, H, W, mask_q, mask_d, M, D) \
        * ((1 - fx) * (1 - fy) * a)[:, None]  # noqa: F821
    out += gather_corner(val_base, start, r, c + 1, H, W, mask_q, mask_d, M, D) \
        * (fx * (1 - fy) * a)[:, None]  # noqa: F821
    out += gather_corner(val_base, start, r + 1, c, H, W, mask_q, mask_d, M, D) \
        * ((1 - fx) * fy * a)[:, None]  # noqa: F821
    out += gather_corner(val_base, start, r + 1, c + 1, H, W, mask_q, mask_d, M, D) \
        * (fx * fy * a)[:, None]  # noqa: F821
    return out
