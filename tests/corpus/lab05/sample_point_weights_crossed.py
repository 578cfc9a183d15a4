"""Task 5.3: the weights of the (y0, x0 + 1) and (y0 + 1, x0) corners exchanged."""
import triton
import triton.language as tl


@triton.jit
def sample_point(val_base, start, H, W, x, y, a, mask_q, mask_d, M: tl.constexpr,
                 D: tl.constexpr):
    xf = tl.floor(x)
    yf = tl.floor(y)
    fx = x - xf
    fy = y - yf
    c = xf.to(tl.int64)
    r = yf.to(tl.int64)
    top_left = gather_corner(val_base, start, r, c, H, W, mask_q, mask_d, M, D)  # noqa: F821
    top_right = gather_corner(val_base, start, r, c + 1, H, W, mask_q, mask_d, M, D)  # noqa: F821
    bottom_left = gather_corner(val_base, start, r + 1, c, H, W, mask_q, mask_d, M, D)  # noqa: F821
    bottom_right = gather_corner(val_base, start, r + 1, c + 1, H, W, mask_q, mask_d, M, D)  # noqa: F821
    out = top_left * ((1 - fx) * (1 - fy) * a)[:, None]
    out += top_right * ((1 - fx) * fy * a)[:, None]
    out += bottom_left * (fx * (1 - fy) * a)[:, None]
    out += bottom_right * (fx * fy * a)[:, None]
    return out
