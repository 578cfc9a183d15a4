"""Task 4.2: out[idx[i]] = src[i], a scatter, instead of out[i] = src[idx[i]]."""
import triton
import triton.language as tl


@triton.jit
def gather_kernel(src_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = i < n
    j = tl.load(idx_ptr + i, mask=live, other=0)
    v = tl.load(src_ptr + i, mask=live, other=0.0)
    tl.store(out_ptr + j, v, mask=live)
