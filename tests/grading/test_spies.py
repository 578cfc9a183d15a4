"""The child-side watches of msda_labs.grading.judge.spies, and the judge's reading of Triton's
cache
(lab 10's final exam): they see what they must, and nothing else."""

import json
import time
import types

import pytest
import torch
import torch.nn.functional as F
from kit import ROOT, load_file_module

from msda_labs.grading.judge.spies import ForbiddenOps, KernelLaunches


def _image_and_grid():
    gen = torch.Generator().manual_seed(0)
    img = torch.randn(1, 2, 4, 5, generator=gen, dtype=torch.float64)
    grid = torch.rand(1, 3, 1, 2, generator=gen, dtype=torch.float64) * 2 - 1
    return img, grid


@pytest.mark.parametrize("how", ["computed_name", "torch_grid_sampler", "torch_ops", "c_binding",
                                 "interpolate"])
def test_forbidden_ops_sees_interpolation_by_any_name(how):
    img, grid = _image_and_grid()
    calls = {
        "computed_name": lambda: getattr(F, "grid" + "_sample")(img, grid, align_corners=False),
        "torch_grid_sampler": lambda: torch.grid_sampler(img, grid, 0, 0, False),
        "torch_ops": lambda: torch.ops.aten.grid_sampler_2d(img, grid, 0, 0, False),
        "c_binding": lambda: torch._C._VariableFunctions.grid_sampler_2d(img, grid, 0, 0, False),
        "interpolate": lambda: F.interpolate(img, scale_factor=2, mode="bilinear"),
    }
    with ForbiddenOps() as spy:
        calls[how]()
    assert spy.found and all(any(p in name for p in ("grid_sample", "interpolate"))
                             for name in spy.found), spy.found


def test_forbidden_ops_leaves_arithmetic_and_gathers_alone():
    img, _ = _image_and_grid()
    flat = img.reshape(-1)
    with ForbiddenOps() as spy:
        (flat[torch.tensor([0, 3, 7])] * 0.5).sum()
        torch.floor(img).long().clamp(0, 3)
    assert spy.found == []


def test_kernel_launches_names_each_interpreted_kernel():
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)

    kernel = InterpretedFunction(add_one)
    x = torch.zeros(4)
    with KernelLaunches() as launches:
        kernel[(1,)](x, 4, BLOCK=4)
        x + 1  # torch work launches no kernel of Triton's
    assert launches.names == ["add_one"] and x.tolist() == [1.0] * 4
    kernel[(1,)](x, 4, BLOCK=4)  # after the block: no longer recorded
    assert launches.names == ["add_one"]


def test_the_judge_reads_compiled_kernels_off_a_triton_cache(tmp_path):
    judge = load_file_module(ROOT / "lab-10-ship-it" / "tests" / "judge_lab10.py",
                             "_spies_judge_lab10", beside=True)
    built = tmp_path / "HASH1"
    built.mkdir()
    (built / "msda_forward_tiles_kernel.json").write_text(
        json.dumps({"name": "msda_forward_tiles_kernel"}))
    (built / "msda_forward_tiles_kernel.cubin").write_bytes(b"\x7fELF")
    (built / "__grp__msda_forward_tiles_kernel.json").write_text(json.dumps({"child_paths": {}}))
    forged = tmp_path / "HASH2"  # metadata without a binary is not a compiled kernel
    forged.mkdir()
    (forged / "fake.json").write_text(json.dumps({"name": "fake"}))
    now = time.time()
    assert judge.compiled_kernels(str(tmp_path), now - 60, now + 1) == \
        ["msda_forward_tiles_kernel"]
    assert judge.compiled_kernels(str(tmp_path), now + 1, now + 60) == []  # written before
    assert judge.compiled_kernels(str(tmp_path / "missing"), 0, now + 1) == []
    judge.check_compiled_kernels({"compiled": {"forward": ["a"], "backward": ["b"]}}, "msda")
    with pytest.raises(AssertionError, match="compiled no kernel during msda's backward"):
        judge.check_compiled_kernels({"compiled": {"forward": ["a"], "backward": []}}, "msda")


def test_kernel_launches_sees_compiled_launches_past_jit_run():
    """On a GPU every launch of a compiled kernel calls its launch_metadata first, through
    Triton's JITFunction.run or a launcher that skips it (lab 10's shipped kernels); here a
    compiled kernel without a GPU, whose metadata call then fails, is recorded all the same."""
    from triton.compiler.compiler import CompiledKernel

    kernel = types.SimpleNamespace(name="msda_backward_rows_kernel")  # no real compilation
    with KernelLaunches() as launches:
        with pytest.raises(AttributeError):  # its metadata is missing, once it is recorded
            CompiledKernel.launch_metadata(kernel, (1, 1, 1), 0)
    assert launches.names == ["msda_backward_rows_kernel"]
    assert "launch_metadata" in CompiledKernel.__dict__  # restored, still Triton's own
    assert CompiledKernel.__dict__["launch_metadata"].__qualname__.startswith("CompiledKernel")
