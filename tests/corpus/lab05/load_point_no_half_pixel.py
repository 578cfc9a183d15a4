"""Task 5.1: x * W and y * H without the half-pixel shift."""
import triton
import triton.language as tl


@triton.jit
def load_point(loc_ptr, attn_ptr, p, mask_q, H, W):
    xy = loc_ptr + p * 2
    x_pix = tl.load(xy, mask=mask_q, other=0.0).to(tl.float32) * W
    y_pix = tl.load(xy + 1, mask=mask_q, other=0.0).to(tl.float32) * H
    a = tl.load(attn_ptr + p, mask=mask_q, other=0.0).to(tl.float32)
    return x_pix, y_pix, a
