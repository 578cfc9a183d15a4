"""Launch lab 10's compiled Triton kernels without Triton's per-call dispatch.

``kernel[grid](*args)`` goes through ``JITFunction.run`` on every call: it binds the arguments
to the signature, specializes each one, builds a string cache key from them and the options,
looks the compiled kernel up, and only then launches. On the H200 machine's host this costs
35-60 µs per launch, which is most of a decoder-sized training step
(docs/performance.md).

:class:`DirectLauncher` keeps the compiled kernel itself, under a tuple key built from what
Triton specializes a compiled kernel on:

* each tensor argument: its dtype and whether its address is a multiple of 16 bytes;
* each integer argument: whether it is 1, whether it is a multiple of 16, and its width class
  (32-bit, 64-bit signed, 64-bit unsigned);
* the constexpr arguments by value, ``num_warps``, and the current device.

The first call with a new key takes Triton's own path, which compiles (or loads) the kernel,
launches it and returns it; later calls hand the same arguments straight to its launcher,
exactly as ``JITFunction.run`` does. That is only done where it is known to be the same call:
the installed Triton's ``JITFunction.run`` must contain the launch line this module reproduces
(read once, from its source). Otherwise, for interpreted kernels, and for arguments of any other
kind, every call takes Triton's own path.
"""

from __future__ import annotations

import inspect

import torch

# The launch that JITFunction.run performs (triton 3.6 and 3.9, whitespace normalised): this
# module passes the launcher the same arguments in the same order.
_RUN_LINES = (
    "launch_metadata = kernel.launch_metadata(grid, stream, *bound_args.values())",
    "kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, "
    "launch_metadata, knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, "
    "*bound_args.values())",
)
_INT32 = (-(2**31), 2**31)
_UINT64_FROM = 2**63
_support: dict = {}
_triton: dict = {}  # the stream getter and the hook holder, looked up once


def supported() -> bool:
    """True when the installed Triton launches exactly as :class:`DirectLauncher` does."""
    if "ok" not in _support:
        try:
            from triton import knobs  # noqa: F401 - the hooks are read from it
            from triton.runtime.jit import JITFunction

            source = " ".join(inspect.getsource(JITFunction.run).split())
            _support["ok"] = all(line in source for line in _RUN_LINES)
        except (ImportError, OSError, TypeError):
            _support["ok"] = False
    return _support["ok"]


def arg_key(arg):
    """What Triton specializes a compiled kernel on for one non-constexpr argument.

    Raises TypeError for anything but a tensor or an int (the caller then takes Triton's path).
    """
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() % 16 == 0
    if isinstance(arg, int) and not isinstance(arg, bool):
        return (arg == 1, arg % 16 == 0, _INT32[0] <= arg < _INT32[1], arg >= _UINT64_FROM)
    raise TypeError(f"no direct launch for an argument of type {type(arg).__name__}")


class DirectLauncher:
    """Calls one ``@triton.jit`` kernel; see the module docstring.

    Args:
        kernel: the JITFunction. Anything else (the interpreter's kernels) is always called the
            ordinary way.
    """

    def __init__(self, kernel):
        self.kernel = kernel
        params = getattr(kernel, "params", None)
        self.direct = params is not None and hasattr(kernel, "device_caches")
        self.runtime_arg = tuple(not p.is_constexpr for p in params) if self.direct else ()
        self.compiled: dict = {}

    def __call__(self, grid: tuple, args: tuple, num_warps: int) -> None:
        """Launch on ``grid`` with every parameter of the kernel in ``args``, in order."""
        if not (self.direct and supported()):
            self.kernel[grid](*args, num_warps=num_warps)
            return
        try:
            key = (torch.cuda.current_device(), num_warps) + tuple(
                arg_key(a) if rt else a for a, rt in zip(args, self.runtime_arg))
        except TypeError:
            self.kernel[grid](*args, num_warps=num_warps)
            return
        kernel = self.compiled.get(key)
        if kernel is None:  # Triton's own path compiles or loads it, launches, and returns it
            kernel = self.kernel[grid](*args, num_warps=num_warps)
            if kernel is not None and hasattr(kernel, "packed_metadata"):
                self.compiled[key] = kernel
            return
        self._launch(kernel, key[0], grid, args)

    @staticmethod
    def _launch(kernel, device: int, grid: tuple, args: tuple) -> None:
        if not _triton:
            from triton import knobs
            from triton.runtime import driver

            _triton.update(stream=driver.active.get_current_stream, hooks=knobs.runtime)
        stream = _triton["stream"](device)
        hooks = _triton["hooks"]
        if len(grid) < 3:
            grid = tuple(grid) + (1,) * (3 - len(grid))
        meta = kernel.launch_metadata(grid, stream, *args)
        kernel.run(grid[0], grid[1], grid[2], stream, kernel.function, kernel.packed_metadata,
                   meta, hooks.launch_enter_hook, hooks.launch_exit_hook, *args)
