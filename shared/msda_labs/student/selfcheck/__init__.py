"""The small examples ``python labNN.py`` runs each lab's functions on (see
:mod:`msda_labs.student.check`), one :class:`Step` per graded function, in the order of the tasks.

The examples are drawn here, with their own seeds and shapes; they are never the grader's cases.

What each example should give comes from :mod:`msda_labs.student.spec`, except in a lab's own
template repository: the spec of a lab states that lab's answers, so the exporter leaves those
statements out of it and records instead what the spec gives on each of the lab's examples
(``recorded/labNN.pt``, written by :func:`record`); :func:`steps` compares with that recording
whenever it exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from msda_labs.student.examples import MSDAInputs, draw_inputs

__all__ = ["Case", "Part", "Launch", "NotHere", "Step", "steps", "has_big", "small_inputs",
           "SMALL", "record", "recording_path"]

SPEC = "msda_labs.student.spec"
RECORDED = Path(__file__).resolve().parent / "recorded"


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
        dtype: the dtype each floating tensor of the result must have, where the function keeps
            its input's (None: not checked); a float32 result where float64 is asked for is
            wrong even when its values agree to float32's precision.
    """

    what: str
    inputs: dict
    call: Callable[[Any], Any]
    spec: Callable[[], Any]
    names: tuple = ("out",)
    backward: bool = False
    exact: bool = True
    spec_name: str = SPEC
    dtype: Any = None  # the dtype every floating tensor of the result must have (None: any)


class NotHere(Exception):  # noqa: N818 - a reason, not a failure
    """A step's case cannot run on this machine (the reason is the message): the run says so
    and goes on."""


@dataclass(frozen=True)
class Step:
    """Check the lab module's function ``name`` (Task ``task``) on ``make(namespace)``, a
    :class:`~msda_labs.student.check.Case`; ``namespace`` is the lab module's globals, or None
    when a case is asked for by hand (only a few cases need the module's given helpers).
    ``label`` tells a second case of the same function apart (``python labNN.py --big``);
    ``twin`` makes the case that differs from it in one thing only (for a case past 2**31
    elements, the same samples on a small level), run when this one fails: its verdict says
    whether that one thing is the cause."""

    task: str
    name: str
    make: Callable
    label: str = ""
    twin: Callable | None = None

    @property
    def key(self) -> str:
        """The step's name in reports and recordings: the function, and the label if any."""
        return f"{self.name} ({self.label})" if self.label else self.name

    @property
    def twin_key(self) -> str:
        return f"{self.key} twin"


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


def _all_steps(lab: int, big: bool) -> list[Step]:
    import importlib

    if lab not in _HOME:
        raise KeyError(f"there is no lab {lab:02d} self-check")
    # Imported on first use: the kernel labs' module imports triton, which a lab module must
    # have configured (interpreter or not) before.
    module = importlib.import_module(f"msda_labs.student.selfcheck.{_HOME[lab]}")
    found = module.STEPS[lab]()
    if big:
        found += getattr(module, "BIG_STEPS", {}).get(lab, list)()
    return found


def has_big(lab: int) -> bool:
    """Whether lab ``lab`` has ``--big`` cases (past 2**31 elements, half precision)."""
    return lab in _HOME and bool([s for s in _all_steps(lab, True) if s.label])


def steps(lab: int, big: bool = False) -> list[Step]:
    """The steps of lab ``lab``, in task order; with ``big``, then its cases of size and
    precision (``python labNN.py --big``), where it has them."""
    found = _all_steps(lab, big)
    path = recording_path(lab)
    if not path.is_file():
        return found
    recorded = torch.load(path, weights_only=True)
    missing = [key for step in found for key in (step.key, step.twin and step.twin_key)
               if key and key not in recorded]
    if missing:
        raise KeyError(f"{path} records no outputs for {', '.join(missing)}: export the lab again")
    return [replace(step, make=_replayed(step.make, recorded[step.key], path.name),
                    twin=step.twin and _replayed(step.twin, recorded[step.twin_key], path.name))
            for step in found]


def recording_path(lab: int) -> Path:
    """Where a lab's template keeps what the spec gives on the lab's examples."""
    return RECORDED / f"lab{lab:02d}.pt"


def _replayed(make: Callable, expected, file: str) -> Callable:
    def made(namespace=None) -> Case:
        case = make(namespace)
        return replace(case, spec=lambda: expected,
                       spec_name=f"the spec's outputs recorded for this example ({file})")
    return made


def record(lab: int, namespace: dict) -> dict:
    """What the spec gives on each of lab ``lab``'s examples: {function name: expected}.

    ``namespace`` holds a working lab module (the exporter passes the lab's reference solution's):
    lab 07's examples need its given ``gather_corners``, and a layer's example builds the layer
    (with fixed weights) before the spec reads it. The entry ``__spec_used__`` lists the spec's
    functions that ran (the exporter leaves them out of the lab's template).
    """
    import importlib

    if lab not in _HOME:  # a lab with no self-check examples: nothing of the spec runs
        return {"__spec_used__": []}
    spec = importlib.import_module(SPEC)
    used: set[str] = set()
    originals = {name: fn for name, fn in vars(spec).items()
                 if callable(fn) and getattr(fn, "__module__", "") == SPEC}

    def watched(name, fn):
        def call(*args, **kwargs):
            used.add(name)
            return fn(*args, **kwargs)
        return call

    out: dict = {}
    try:
        for name, fn in originals.items():
            setattr(spec, name, watched(name, fn))
        for step in _all_steps(lab, big=True):
            case = step.make(namespace)
            try:
                out[step.key] = case.spec()
            except KeyError:  # a layer: the spec reads the layer that the example builds
                case.call(namespace[step.name])
                out[step.key] = case.spec()
            if step.twin:
                out[step.twin_key] = step.twin(namespace).spec()
    finally:
        for name, fn in originals.items():
            setattr(spec, name, fn)
    out["__spec_used__"] = sorted(used)
    return out


_HOME = {0: "torch_labs", 1: "torch_labs", 2: "torch_labs", 3: "torch_labs", 7: "torch_labs",
         4: "kernel_labs", 5: "kernel_labs", 6: "kernel_labs", 8: "kernel_labs",
         9: "tool_labs", 10: "tool_labs"}
