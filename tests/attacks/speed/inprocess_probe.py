"""Child side of the in-process timing that the judge's clock is compared with (table.py): the
submission's operator raced in its own process, device time and end to end, on the same case
the speed tests use. Imports no ground truth (the grading worker preloads it)."""

import torch

from msda_labs.grading.speed.timing import race_all
from msda_labs.student.cases import Case, make_inputs


def race(module, case_fields: dict, dtype_name: str, kind: str = "forward") -> dict:
    case = Case(**{**case_fields, "shapes": tuple(tuple(s) for s in case_fields["shapes"])})
    dtype = getattr(torch, dtype_name)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    value, shapes, starts, loc, attn = make_inputs(case, dtype, device=device)
    if kind == "forward":
        call = lambda: module.msda_forward(value, shapes, starts, loc, attn)  # noqa: E731
    else:
        grad = torch.randn(case.B, case.Q, case.M * case.D, device=device, dtype=dtype)
        call = lambda: module.msda_backward(value, shapes, starts, loc, attn, grad)  # noqa: E731
    measured = race_all({"yours": call}, keep=(), with_end_to_end=True)
    measured.pop("outputs", None)
    return measured
