"""Task 9.3: every half-precision dtype before Hopper gets the fp32 buffer (fp16 too)."""
import torch


def use_fp32_grad_accum(dtype, capability):
    major, _minor = capability
    return dtype in (torch.float16, torch.bfloat16) and major < 9
