"""The direct launch path of lab 10's operator (msda_labs.student.shipped_launch).

* CPU (always runs, well under a second): the cache key separates every specialization Triton
  makes, and a kernel that is not a JITFunction (the interpreter's) is called the ordinary way.
* CUDA (skipped without a GPU, saying so): launches through the direct path equal Triton's own
  launches, for integer arguments that Triton specializes differently (1, multiples of 16,
  others) and for a tensor view that is not 16-byte aligned.
"""

from __future__ import annotations

import pytest
import torch

from msda_labs.student import shipped_launch
from msda_labs.student.shipped_launch import DirectLauncher, arg_key

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU: the direct path launches compiled "
                                       "kernels, which only exist on one")


def test_key_separates_what_triton_specializes():
    classes = [1, 2, 16, 2**31 + 1, 2**31, 2**63 + 1, 2**63]  # one integer of each class
    assert len({arg_key(v) for v in classes}) == len(classes)
    assert arg_key(2) == arg_key(17) and arg_key(16) == arg_key(2**31 - 16)
    base = torch.zeros(8)
    assert arg_key(base) != arg_key(base[1:])  # 4 bytes off a 16-byte boundary
    assert arg_key(base) != arg_key(base.double())
    with pytest.raises(TypeError):
        arg_key(1.5)
    with pytest.raises(TypeError):
        arg_key(True)


def test_non_jit_kernels_are_called_the_ordinary_way():
    calls = []

    class Plain:
        def __getitem__(self, grid):
            return lambda *args, num_warps: calls.append((grid, args, num_warps))

    DirectLauncher(Plain())((3, 1), (torch.zeros(2), 5, 7), 4)
    assert calls and calls[0][0] == (3, 1) and calls[0][2] == 4


@needs_cuda
def test_direct_launches_equal_triton_launches():
    from msda_labs.student import runtime

    runtime.configure("gpu")
    import triton
    import triton.language as tl

    @triton.jit
    def scaled_copy(src, dst, n, scale, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        keep = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=keep) * scale, mask=keep)

    assert shipped_launch.supported(), "the installed triton launches differently; the direct " \
        "path is off (correct, but slower): update shipped_launch._RUN_LINES"
    launcher = DirectLauncher(scaled_copy)
    data = torch.randn(4096, device="cuda")
    for n, scale, offset in ((1, 3, 0), (16, 2, 0), (1000, 5, 0), (1000, 5, 1), (4000, 1, 3)):
        src = data[offset:]
        for _ in range(3):  # the first call compiles, the next ones launch directly
            got = torch.zeros_like(src)
            launcher((triton.cdiv(n, 128),), (src, got, n, scale, 128), 4)
            want = torch.zeros_like(src)
            scaled_copy[(triton.cdiv(n, 128),)](src, want, n, scale, 128, num_warps=4)
            torch.cuda.synchronize()
            assert torch.equal(got, want), (n, scale, offset)
    assert len(launcher.compiled) >= 3  # distinct specializations got distinct kernels
