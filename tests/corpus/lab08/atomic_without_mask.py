"""Task 8.2: the atomic add without the mask: the tail lanes (bin 0 from other=0) add too."""
import triton
import triton.language as tl


@triton.jit
def histogram_atomic_kernel(idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    b = tl.load(idx_ptr + i, mask=i < n, other=0)
    tl.atomic_add(out_ptr + b, 1.0)
