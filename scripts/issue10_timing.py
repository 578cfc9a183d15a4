"""Timing helpers shared by the issue 10 H200 probes (scripts/issue10_s19_probe.py, _s20_)."""

from __future__ import annotations

import statistics


def kernel_us(fn, calls=50) -> float:
    """Summed CUDA kernel time of one call of ``fn`` over ``calls`` calls (torch.profiler)."""
    from msda_labs.gpu import opbench

    return opbench.kernel_time_us(fn, calls)


def rounds(fns: dict, n=3) -> dict:
    """Median kernel time of each function over ``n`` rounds that alternate between them."""
    times = {name: [] for name in fns}
    for _ in range(n):
        for name, fn in fns.items():
            times[name].append(kernel_us(fn))
    return {name: statistics.median(v) for name, v in times.items()}


def preset_cases(dtype_names, presets=("encoder", "decoder")):
    """(preset, dtype, inputs) for the bench's presets in the given dtypes, on the GPU."""
    from msda_labs.gpu import opbench

    for preset in presets:
        for name in dtype_names:
            dtype = opbench._torch_dtype(name)
            yield preset, dtype, opbench.make_preset_inputs(preset, dtype, "cuda")


class ProbeRun:
    """A probe's command line (``OUT [--parts a,b] [--dtypes fp32,...]``) and its JSON result.

    Args:
        argv: ``sys.argv``.
        name: the result file's stem (``OUT/<name>.json``).
        default_parts: the parts run when ``--parts`` is not given.
    """

    def __init__(self, argv: list, name: str, default_parts: list):
        from pathlib import Path

        self.out = Path(argv[1])
        self.out.mkdir(parents=True, exist_ok=True)
        self.parts = argv[argv.index("--parts") + 1].split(",") if "--parts" in argv \
            else list(default_parts)
        self.dtypes = argv[argv.index("--dtypes") + 1].split(",") if "--dtypes" in argv \
            else ["fp32", "fp16", "bf16"]
        self.name = name
        self.result: dict = {}

    def save(self) -> None:
        import json

        (self.out / f"{self.name}.json").write_text(json.dumps(self.result, indent=1))
