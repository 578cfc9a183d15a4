"""Whole-submission mutants: a block appended to a chip that makes every public call slow, or
every public call's output wrong, without touching the chip's own lines.

``python -m msda_labs.gpu.prove`` grades these copies of each chip on a GPU (a slow copy must lose
points to a speed test, a wrong one to a correctness test); the kit's mutant library
(``tests/mutants/*.yaml``, key ``append:``) plants them on the CPU too.

The two functions below are real, linted and tested code, and also the text that is appended:
:func:`appended` copies a function's source after the chip with a call on the module's namespace.
So each imports what it needs inside itself and uses only torch and the standard library (a
submission may import nothing else of the kit).
"""

from __future__ import annotations

import inspect

from msda_labs.mistakes.registry import Catalogue

__all__ = ["SUBMISSIONS", "appended", "bump_public_outputs", "slow_down_public_calls"]

SUBMISSIONS = Catalogue("whole-submission")

_MARK = "# ---- msda_labs.gpu.prove: deliberately {kind} (appended to the chip, not part of it)"


@SUBMISSIONS.register("slow", "after each public call, the device sleeps ten times that call's "
                              "own time (at least 2 ms, at most 50 ms): same results, much slower")
def slow_down_public_calls(space: dict) -> None:
    """Wrap every public function of the module ``space`` so that each outermost call, after it
    returns, sleeps ten times its own duration (clamped to 2-50 ms) on the device."""
    import functools
    import inspect
    import time

    import torch

    floor_us, factor, cap_us = 2000.0, 10.0, 50000.0
    state = {"depth": 0, "us": {}}

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

    def slow(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if state["depth"]:
                return fn(*args, **kwargs)
            state["depth"] += 1
            try:
                out, us = timed(fn, *args, **kwargs)
                if us is not None:
                    state["us"][name] = us
                delay(min(cap_us, max(floor_us, factor * state["us"].get(name, floor_us))))
                return out
            finally:
                state["depth"] -= 1

        return wrapper

    for name, obj in list(space.items()):
        if not name.startswith("_") and inspect.isfunction(obj) and \
                obj.__module__ == space["__name__"]:
            space[name] = slow(name, obj)


@SUBMISSIONS.register("wrong", "each public call's floating-point outputs are off by one element "
                               "(the first, by 1 + |x|/2)")
def bump_public_outputs(space: dict) -> None:
    """Wrap every public function of the module ``space`` so that each outermost call's float
    tensors (also inside tuples, named tuples and lists) come back with their first element
    raised by 1 + |x|/2."""
    import functools
    import inspect

    import torch

    state = {"depth": 0}

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

    def wrong(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if state["depth"]:
                return fn(*args, **kwargs)
            state["depth"] += 1
            try:
                return bump(fn(*args, **kwargs))
            finally:
                state["depth"] -= 1

        return wrapper

    for name, obj in list(space.items()):
        if not name.startswith("_") and inspect.isfunction(obj) and \
                obj.__module__ == space["__name__"]:
            space[name] = wrong(obj)


def appended(kind: str) -> str:
    """The block that makes a chip the ``kind`` submission (a key of :data:`SUBMISSIONS`).

    It holds the mutant's function (renamed private, so that it does not wrap itself or stay a
    public name of the module) and one call on the module's globals.
    """
    plant = SUBMISSIONS[kind].plant
    private = f"_prove_{plant.__name__}"
    source = inspect.getsource(plant)
    source = source[source.index(f"def {plant.__name__}("):]  # without the decorator
    source = source.replace(f"def {plant.__name__}(", f"def {private}(", 1)
    return f"\n\n{_MARK.format(kind=kind)}\n{source}\n\n{private}(globals())\n"
