"""Task 9.3: the right rule, but compared on tensors: returns a tensor, not a bool."""
import torch


def use_fp32_grad_accum(dtype, capability):
    return torch.tensor(capability[0]) < 9 if dtype == torch.bfloat16 else torch.tensor(False)
