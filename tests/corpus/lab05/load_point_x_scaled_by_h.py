"""Task 5.1: x scaled by H and y by W."""
import triton
import triton.language as tl


@triton.jit
def load_point(loc_ptr, attn_ptr, p, mask_q, H, W):
    x = tl.load(loc_ptr + 2 * p, mask=mask_q, other=0.0).to(tl.float32)
    y = tl.load(loc_ptr + 2 * p + 1, mask=mask_q, other=0.0).to(tl.float32)
    a = tl.load(attn_ptr + p, mask=mask_q, other=0.0).to(tl.float32)
    return x * H - 0.5, y * W - 0.5, a
