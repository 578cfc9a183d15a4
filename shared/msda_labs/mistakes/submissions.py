"""Whole-submission mutants: a block appended to a chip that makes every public call slow, or
every public call's output wrong, without touching the chip's own lines.

``python -m msda_labs.gpu.prove`` grades these copies of each chip on a GPU (a slow copy must lose
points to a speed test, a wrong one to a correctness test); the kit's mutant library
(``tests/mutants/*.yaml``, key ``append:``) plants them on the CPU too.

The functions below are real, linted and tested code, and also the text that is appended:
:func:`appended` copies the mutant's function and the one wrapping helper both share after the
chip, with a call on the module's namespace. So each imports what it needs inside itself and uses
only torch and the standard library (a submission may import nothing else of the kit).
"""

from __future__ import annotations

import inspect
import re

from msda_labs.mistakes.registry import Catalogue

__all__ = ["SUBMISSIONS", "SERIAL_ENTRIES", "SERIAL_PIECES", "appended", "bump_public_outputs",
           "planted", "serialized", "slow_down_public_calls"]

SUBMISSIONS = Catalogue("whole-submission")

_MARK = "# ---- msda_labs.gpu.prove: deliberately {kind} (appended to the chip, not part of it)"


def _wrap_outermost_public_calls(space: dict, outermost) -> None:
    """Wrap every public function of the module ``space`` so that a call from outside goes
    through ``outermost(name, fn, args, kwargs)``, which makes the call and returns its result;
    the calls those functions make to each other run plain."""
    import functools
    import inspect

    depth = [0]

    def wrap(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if depth[0]:
                return fn(*args, **kwargs)
            depth[0] += 1
            try:
                return outermost(name, fn, args, kwargs)
            finally:
                depth[0] -= 1

        return wrapper

    for name, obj in list(space.items()):
        if not name.startswith("_") and inspect.isfunction(obj) and obj.__globals__ is space:
            space[name] = wrap(name, obj)


@SUBMISSIONS.register("slow", "after each public call, the device sleeps ten times that call's "
                              "own time (at least 2 ms, at most 50 ms): same results, much slower")
def slow_down_public_calls(space: dict) -> None:
    """Wrap every public function of the module ``space`` so that each outermost call, after it
    returns, sleeps ten times its own duration (clamped to 2-50 ms) on the device."""
    import time

    import torch

    floor_us, factor, cap_us = 2000.0, 10.0, 50000.0
    last_us = {}

    def delay(us):
        if torch.cuda.is_available():
            khz = getattr(torch.cuda.get_device_properties(0), "clock_rate", 0) or 2000000
            torch.cuda._sleep(int(us * khz / 1000.0))
        else:
            time.sleep(us / 1e6)

    def timed(fn, *args, **kwargs):
        """(fn's result, its duration in microseconds, or None inside a CUDA-graph capture)."""
        cuda = torch.cuda.is_available()
        if cuda and torch.cuda.is_current_stream_capturing():
            return fn(*args, **kwargs), None
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*args, **kwargs)
            end.record()
            end.synchronize()
            return out, start.elapsed_time(end) * 1000.0
        begin = time.perf_counter()
        out = fn(*args, **kwargs)
        return out, (time.perf_counter() - begin) * 1e6

    def slow(name, fn, args, kwargs):
        out, us = timed(fn, *args, **kwargs)
        if us is not None:
            last_us[name] = us
        delay(min(cap_us, max(floor_us, factor * last_us.get(name, floor_us))))
        return out

    _wrap_outermost_public_calls(space, slow)


@SUBMISSIONS.register("wrong", "each public call's floating-point outputs are off by one element "
                               "(the first, by 1 + |x|/2)")
def bump_public_outputs(space: dict) -> None:
    """Wrap every public function of the module ``space`` so that each outermost call's float
    tensors (also inside tuples, named tuples and lists) come back with their first element
    raised by 1 + |x|/2."""
    import torch

    def bump(out):
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel() > 0:
            flat = torch.zeros(out.numel(), dtype=out.dtype, device=out.device)
            flat[0] = 1.0 + 0.5 * out.detach().reshape(-1)[0].abs()
            return out + flat.view(out.shape)
        if isinstance(out, tuple):
            items = [bump(item) for item in out]
            return type(out)(*items) if hasattr(out, "_fields") else tuple(items)
        if isinstance(out, list):
            return [bump(item) for item in out]
        return out

    _wrap_outermost_public_calls(space, lambda name, fn, args, kwargs: bump(fn(*args, **kwargs)))


def appended(kind: str) -> str:
    """The block that makes a chip the ``kind`` submission (a key of :data:`SUBMISSIONS`).

    It holds the wrapping helper and the mutant's function (both renamed ``_prove_...``, so that
    they neither wrap themselves nor stay public names of the module) and one call on the
    module's globals.
    """
    plant = SUBMISSIONS[kind].plant
    names = {function.__name__: f"_prove_{function.__name__.lstrip('_')}"
             for function in (_wrap_outermost_public_calls, plant)}
    blocks = []
    for function in (_wrap_outermost_public_calls, plant):
        source = inspect.getsource(function)
        source = source[source.index(f"def {function.__name__}("):]  # without the decorator
        for name, private in names.items():
            source = re.sub(rf"\b{name}\(", f"{private}(", source)
        blocks.append(source)
    body = "\n\n".join(blocks)
    return f"\n\n{_MARK.format(kind=kind)}\n{body}\n\n{names[plant.__name__]}(globals())\n"


def planted(chip_source: str, kind: str) -> str:
    """``chip_source`` made the ``kind`` submission: the chip with :func:`appended` at its end."""
    return chip_source.rstrip("\n") + "\n" + appended(kind)


# -- the slow copy of a GPU lab: the same kernels, the work cut into pieces run one after another -
SERIAL_PIECES = 256
# The public entries of each GPU lab whose calls prove's slow copy serializes; their first five
# arguments are MSDA's (value, spatial_shapes, level_start_index, sampling_locations,
# attention_weights).
SERIAL_ENTRIES = {"lab05": ("msda_forward",),
                  "lab06": ("msda_forward_chunked", "msda_forward_autotuned"),
                  "lab08": ("msda_backward",), "lab10": ("msda",)}


def _serial_call(one, value, spatial_shapes, level_start_index, sampling_locations,
                 attention_weights, *args, **kwargs):
    """``one``'s result, computed in up to 256 pieces of consecutive queries launched one after
    the other (a tile of a few queries that serializes the operator): the same kernels and the
    same results, many times the launches. Every tensor argument with a query axis (the
    locations, the weights, an upstream gradient) is cut along it; the pieces' outputs are
    joined along the queries, and a gradient of value (value's shape) is their sum, in fp32 at
    least."""
    import torch

    queries = sampling_locations.shape[1]
    if queries < 2:
        return one(value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights, *args, **kwargs)
    pieces = min(queries, 256)
    bounds = [queries * i // pieces for i in range(pieces + 1)]

    def cut(t, lo, hi):
        if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[1] == queries:
            return t[:, lo:hi].contiguous()
        return t

    outs = [one(value, spatial_shapes, level_start_index, cut(sampling_locations, lo, hi),
                cut(attention_weights, lo, hi), *[cut(a, lo, hi) for a in args],
                **{k: cut(v, lo, hi) for k, v in kwargs.items()})
            for lo, hi in zip(bounds, bounds[1:])]
    if isinstance(outs[0], torch.Tensor):
        return torch.cat(outs, 1)
    joined = []
    for i, first in enumerate(outs[0]):
        if first.shape == value.shape:  # a gradient of value: every piece adds its share
            wide = torch.promote_types(first.dtype, torch.float32)
            total = torch.zeros(value.shape, dtype=wide, device=value.device)
            for out in outs:
                total += out[i].float()
            joined.append(total.to(first.dtype))
        else:
            joined.append(torch.cat([out[i] for out in outs], 1))
    return type(outs[0])(joined)


def serialized(chip_source: str, lab: str) -> str:
    """``chip_source`` as the slow copy of ``lab`` (a key of :data:`SERIAL_ENTRIES`): each entry
    rebound to a plain function that runs the chip's own in :func:`_serial_call`'s pieces. Plain
    definitions at the end of the file, no wrapper of the module's globals: nothing a rule reads
    changes, only the time."""
    source = inspect.getsource(_serial_call)
    source = source.replace("def _serial_call(", "def _prove_serial_call(")
    blocks = [source]
    for name in SERIAL_ENTRIES[lab]:
        blocks.append(
            f"_prove_one_{name} = {name}\n\n\n"
            f"def {name}(value, spatial_shapes, level_start_index, sampling_locations,\n"
            f"        attention_weights, *args, **kwargs):\n"
            f"    return _prove_serial_call(_prove_one_{name}, value, spatial_shapes,\n"
            f"                              level_start_index, sampling_locations,\n"
            f"                              attention_weights, *args, **kwargs)\n")
    body = "\n\n".join(blocks)
    return chip_source.rstrip("\n") + f"\n\n\n{_MARK.format(kind='slow')}\n{body}"
