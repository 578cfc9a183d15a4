"""Judge side of a speed test: the baselines are timed here, never in the student's process.

The child that runs the student's code times only the student's calls
(:func:`msda_labs.grading.speed.timing.race_all`). The PyTorch reference and the chips are ground
truth, so the judge builds the same inputs from the same seeds on the same device and times the
baselines itself, with the method and number of samples that the child's race reported, then
merges the times into the child's result (:func:`with_baselines`). A name the child sent for a
baseline is replaced by the judge's own time.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from msda_labs.grading.speed.timing import race_all

__all__ = ["chip_function", "with_baselines"]

# A child that could capture its calls in a CUDA graph: the judge tries too ("auto" falls back
# to events when a baseline cannot be captured); one that fell back to events: events here too.
_METHODS = {"cuda-graph": "auto", "cuda-events": "cuda-events", "wall-clock": "auto"}


def chip_function(lab_id: str, name: str) -> Callable | None:
    """``name`` from a private copy of the chip of ``lab_id``, loaded in the judge; None when
    this copy of the kit does not carry that chip (an exported lab carries earlier labs' chips
    only)."""
    import msda_labs.chips

    path = Path(msda_labs.chips.__file__).parent / f"{lab_id}.py"
    if not path.is_file():
        return None
    mod_name = f"_msda_speed_baseline_{lab_id}"
    module = sys.modules.get(mod_name)
    if module is None or getattr(module, "__file__", None) != str(path):
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    return getattr(module, name)


def with_baselines(measured: Any, fns: Mapping[str, Callable[[], Any] | None], *,
                   keep: tuple[str, ...] = ()) -> Any:
    """``measured`` (a :func:`race_all` result from the child) with the times of ``fns`` (the
    baselines, zero-argument calls on the judge's own inputs) added, taken here with the same
    method, samples and end-to-end timing as the child's race. ``keep`` names the baselines
    whose first output comes back under ``measured["outputs"]``.

    A result that is not a timing comes back unchanged (the judge's check then says why);
    names in ``fns`` that are None are left out, and also removed from the child's result.
    """
    if not isinstance(measured, dict) or not isinstance(measured.get("times_us"), dict) \
            or measured.get("method") not in _METHODS:
        return measured
    reps = measured.get("reps")
    reps = reps if isinstance(reps, int) and not isinstance(reps, bool) and 0 < reps <= 200 \
        else 30
    present = {name: fn for name, fn in fns.items() if fn is not None}
    ours = race_all(present, keep=keep, reps=reps, method=_METHODS[measured["method"]],
                    with_end_to_end=isinstance(measured.get("e2e_us"), dict)) if present \
        else {"times_us": {}, "e2e_us": {}, "outputs": {}}
    merged = dict(measured)
    names = set(fns)
    for key in ("times_us", "e2e_us"):
        if isinstance(measured.get(key), dict):
            child = {k: v for k, v in measured[key].items() if k not in names}
            merged[key] = {**child, **ours.get(key, {})}
    outputs = measured.get("outputs")
    outputs = {k: v for k, v in outputs.items() if k not in names} \
        if isinstance(outputs, dict) else {}
    merged["outputs"] = {**outputs, **ours["outputs"]}
    return merged
