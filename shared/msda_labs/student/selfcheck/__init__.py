"""The small examples ``python labNN.py`` runs each lab's functions on (see
:mod:`msda_labs.student.check`), one :class:`Step` per graded function, in the order of the tasks.

The examples are drawn here, with their own seeds and shapes; they are never the grader's cases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from msda_labs.student.examples import MSDAInputs, draw_inputs

__all__ = ["Case", "Part", "Launch", "Step", "steps", "small_inputs", "SMALL"]

SPEC = "msda_labs.student.spec"


@dataclass
class Part:
    """One output of a guarded launch: its flat buffer, its shape and guard band, and what its
    elements held before the launch ("sentinel", or "zeros" for an output added into)."""

    name: str
    buf: torch.Tensor
    shape: tuple
    guard: int
    start: str = "sentinel"


@dataclass
class Launch:
    """What a kernel case's ``call`` returns: the outputs, still between their guard bands."""

    parts: list[Part]


@dataclass
class Case:
    """One small example for one function.

    Attributes:
        what: the example in words (shapes, blocks, what is unusual about it).
        inputs: name -> tensor or value, for the report's shapes line.
        call: runs your function (it is given the function) and returns its result: a tensor, a
            tuple of tensors, a plain value, or a :class:`Launch` for a kernel.
        spec: returns what the result should be (same structure).
        names: the names of the result's parts, for the report.
        backward: compare at the gradients' tolerance (one bool, or one per part).
        exact: compare plain values with ``==`` (floats: to 1e-9 relative otherwise).
        spec_name: where the expected values come from.
    """

    what: str
    inputs: dict
    call: Callable[[Any], Any]
    spec: Callable[[], Any]
    names: tuple = ("out",)
    backward: bool = False
    exact: bool = True
    spec_name: str = SPEC


@dataclass(frozen=True)
class Step:
    """Check the lab module's function ``name`` (Task ``task``) on ``make(namespace)``, a
    :class:`~msda_labs.student.check.Case`; ``namespace`` is the lab module's globals, or None
    when a case is asked for by hand (only a few cases need the module's given helpers)."""

    task: str
    name: str
    make: Callable


# One small example of MSDA with every edge a kernel meets: two levels, Q = 11 queries (ragged in
# blocks of 8), D = 5 channels (not a power of two) and locations that stray outside [0, 1].
SMALL = dict(B=2, Q=11, M=2, D=5, K=2, shapes=((5, 7), (3, 4)), loc_lo=-0.1, loc_hi=1.1)


def small_inputs(seed: int = 1234, **sizes) -> MSDAInputs:
    """The :data:`SMALL` example (fp32, CPU), with ``sizes`` overriding its entries."""
    return draw_inputs(torch.Generator().manual_seed(seed), **{**SMALL, **sizes})


def describe(inputs: MSDAInputs) -> str:
    B, S, M, D = inputs.value.shape
    _, Q, _, L, K, _ = inputs.sampling_locations.shape
    levels = " and ".join(f"{h}x{w}" for h, w in inputs.spatial_shapes.tolist())
    return f"B={B} Q={Q} M={M} D={D} L={L} K={K}, levels {levels}, some locations outside"


def steps(lab: int) -> list[Step]:
    """The steps of lab ``lab``, in task order."""
    import importlib

    if lab not in _HOME:
        raise KeyError(f"there is no lab {lab:02d} self-check")
    # Imported on first use: the kernel labs' module imports triton, which a lab module must
    # have configured (interpreter or not) before.
    module = importlib.import_module(f"msda_labs.student.selfcheck.{_HOME[lab]}")
    return module.STEPS[lab]()


_HOME = {0: "torch_labs", 1: "torch_labs", 2: "torch_labs", 3: "torch_labs", 7: "torch_labs",
         4: "kernel_labs", 5: "kernel_labs", 6: "kernel_labs", 8: "kernel_labs",
         9: "tool_labs", 10: "tool_labs"}
