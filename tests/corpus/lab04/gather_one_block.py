"""Task 4.2: every program reads from offset 0 (program id forgotten)."""
import triton
import triton.language as tl


@triton.jit
def gather_kernel(src_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    m = lanes < n
    where = tl.load(idx_ptr + lanes, mask=m, other=0)
    tl.store(out_ptr + lanes, tl.load(src_ptr + where, mask=m, other=0.0), mask=m)
