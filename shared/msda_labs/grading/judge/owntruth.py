"""The truth of a lab whose ground truth would answer its own tasks (labs 00, 03 and 08).

Lab 00's truth reads a map with ``grid_sample``, which is what lab 00 teaches; lab 03's counts
sectors, which is what lab 03 asks; lab 08's racy histogram rule is what Task 8.1 asks. No rule of
those labs forbids the way the truth is written, so any copy of it in the lab's template would earn
the lab's points. Such a lab's tests take every expected value from one judge-side module beside
them, ``tests/truth_labNN.py``, and from nothing else of the truth:

- in the kit and in the judge's own copies of the lab (regrade, Gradescope, Classroom 50),
  ``truth_labNN.py`` computes each value with :mod:`msda_labs.truth` or its own code (its
  functions are wrapped by :func:`judged`);
- in the lab's template repository, the exporter writes in its place a module that only looks
  values up (:func:`recorded_module`) in ``tests/truth_labNN.pt``: what the kit's functions gave
  on the calls the lab's tests make on its public cases, keyed by a digest of each call's
  arguments. The template carries neither ``truth_labNN.py`` nor the kit modules it names in
  ``ANSWERING_MODULES``.

Each recorded call also keeps its arguments, flattened to data (:func:`call_leaves`). A call
whose digest is not in the recording is matched with a recorded one whose arguments agree within
a few units in the last place (:func:`_same`): inputs drawn or computed on another CPU or another
libm (a Mac's, an ARM machine's vector units) may differ in their last bits, and an honest student
must not lose the points of a case for it. Anything farther is another call.

A recording holds outputs of the public cases only. With a secret salt
(:func:`msda_labs.student.cases.case_salt`) the cases differ, and a recorded truth refuses to
answer instead of grading against the wrong values: a regrade needs the judge's copy of the lab.

In the kit, each call of a judged function on the public cases is also checked against the
recording, so the kit's own grading of the chip and the starter fails when the recording is stale
(``python scripts/record_truth.py labNN`` writes it again).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from msda_labs.errors import KitError

__all__ = ["ARGS", "RECORD_ENV", "RecordedTruthError", "call_digest", "call_leaves", "judged",
           "recorded_module", "recording_path"]

RECORD_ENV = "MSDA_TRUTH_RECORD"  # a folder: each judge process writes what it computed there


def _salted() -> bool:
    from msda_labs.student.cases import case_salt

    return case_salt() != 0


class RecordedTruthError(KitError, LookupError):
    """A recorded truth was asked for a value it does not hold (or under a secret salt)."""


def recording_path(truth_module_file: str | Path) -> Path:
    """Where the recording of ``tests/truth_labNN.py`` lives: ``tests/truth_labNN.pt``."""
    return Path(truth_module_file).with_suffix(".pt")


def _feed(h, obj) -> None:
    import numpy as np
    import torch

    if obj is None or isinstance(obj, (bool, int, float, str)):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
    elif isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"tensor:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, (np.ndarray, np.generic)):
        a = np.ascontiguousarray(obj)
        h.update(f"array:{a.dtype}:{a.shape};".encode())
        h.update(a.tobytes())
    elif isinstance(obj, (list, tuple)):
        h.update(f"{type(obj).__name__}:{len(obj)}[".encode())
        for item in obj:
            _feed(h, item)
        h.update(b"]")
    elif isinstance(obj, dict):
        h.update(f"dict:{len(obj)}{{".encode())
        for key in sorted(obj, key=repr):
            _feed(h, key)
            _feed(h, obj[key])
        h.update(b"}")
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(f"{type(obj).__qualname__}(".encode())
        for field in dataclasses.fields(obj):
            h.update(field.name.encode())
            _feed(h, getattr(obj, field.name))
        h.update(b")")
    else:
        raise TypeError(f"a judged truth takes data only (tensors, arrays, numbers, strings, "
                        f"lists, dicts, dataclasses), not {type(obj).__qualname__}")


def call_digest(args: tuple, kwargs: dict) -> str:
    """A digest of a call's arguments: the same data gives the same digest in every process."""
    h = hashlib.sha256()
    _feed(h, list(args))
    _feed(h, dict(kwargs))
    return h.hexdigest()


def call_leaves(args: tuple, kwargs: dict) -> list:
    """A call's arguments flattened to what a recording can hold (loaded with
    ``weights_only``): tensors, numbers, strings and None, with the structure as strings, in the
    order :func:`call_digest` reads them."""
    import numpy as np
    import torch

    out: list = []

    def walk(obj) -> None:
        if obj is None or isinstance(obj, (bool, int, float, str)):
            out.append(obj)
        elif isinstance(obj, torch.Tensor):
            out.append(obj.detach().cpu().contiguous().clone())
        elif isinstance(obj, (np.ndarray, np.generic)):
            out.append(torch.from_numpy(np.array(obj, copy=True)))
        elif isinstance(obj, (list, tuple)):
            out.append(f"{type(obj).__name__}:{len(obj)}")
            for item in obj:
                walk(item)
        elif isinstance(obj, dict):
            out.append(f"dict:{len(obj)}")
            for key in sorted(obj, key=repr):
                walk(key)
                walk(obj[key])
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            out.append(type(obj).__qualname__)
            for field in dataclasses.fields(obj):
                out.append(field.name)
                walk(getattr(obj, field.name))
        else:
            raise TypeError(f"a judged truth takes data only, not {type(obj).__qualname__}")

    walk(list(args))
    walk(dict(kwargs))
    return out


def _same_leaves(a: list, b: list) -> bool:
    """Whether two flattened calls are the same call, up to rounding (:func:`_same`; a float
    argument within 16 units in the last place of the larger)."""
    import math

    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, float) and isinstance(y, float):
            if not (x == y or math.isclose(x, y, rel_tol=64 * 2.0 ** -52)
                    or (math.isnan(x) and math.isnan(y))):
                return False
        elif not _same(x, y):
            return False
    return True


ARGS = "__args__"  # {name: {digest: flattened arguments}}, beside {name: {digest: value}}


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dtype == b.dtype and a.shape == b.shape):
            return False
        if not a.is_floating_point() or a.numel() == 0:
            return bool(torch.equal(a, b))
        # Rounding only: another CPU's vector units may sum in another order. A change of the
        # kit's code moves values far more than a few units in the last place.
        tol = 16 * torch.finfo(a.dtype).eps
        scale = max(1.0, float(a.detach().abs().nan_to_num(0, 0, 0).max()))
        return bool(torch.allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


class _Recording:
    """The recording of one lab's truth module: ``{function name: {digest: value}}``."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._table: dict | None = None

    @property
    def table(self) -> dict:
        if self._table is None:
            import torch

            if not self.path.is_file():
                raise RecordedTruthError(f"{self.path.name} is missing: this lab's tests take "
                                         f"their expected values from it")
            self._table = torch.load(self.path, weights_only=True)
        return self._table

    def value(self, name: str, digest: str, leaves: list | None = None):
        calls = self.table.get(name)
        if calls is not None and digest in calls:
            return calls[digest]
        recorded_args = (self.table.get(ARGS) or {}).get(name) or {}
        if calls is not None and leaves is not None:
            for key, args in recorded_args.items():
                if key in calls and _same_leaves(args, leaves):
                    return calls[key]
        raise RecordedTruthError(
            f"no recorded value of {name} for these arguments in {self.path.name}: this "
            f"repository carries the expected values of the lab's public cases only, for the "
            f"calls its tests make")


_WRITTEN: dict[str, dict] = {}  # {recording file: {name: {digest: value}}} to write at exit


def _record(lab: str, name: str, digest: str, value, leaves: list) -> None:
    import atexit

    folder = Path(os.environ[RECORD_ENV])
    target = str(folder / f"{lab}-{os.getpid()}.pt")
    if target not in _WRITTEN:
        _WRITTEN[target] = {}

        def write(path=target):
            import torch

            folder.mkdir(parents=True, exist_ok=True)
            torch.save(_WRITTEN[path], path)

        atexit.register(write)
    _WRITTEN[target].setdefault(name, {})[digest] = value
    _WRITTEN[target].setdefault(ARGS, {}).setdefault(name, {})[digest] = leaves


def judged(module_file: str, lab: str) -> Callable[[Callable], Callable]:
    """Decorate a truth function of the kit's ``tests/truth_labNN.py``: it computes as it is, and
    on the public cases (no secret salt) its value is checked against the recording (a missing or
    different value is the kit's error: the recording is stale), or, with ``$MSDA_TRUTH_RECORD``
    set, recorded there."""
    recording = _Recording(recording_path(module_file))

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            value = fn(*args, **kwargs)
            if _salted():
                return value
            digest = call_digest(args, kwargs)
            if os.environ.get(RECORD_ENV):
                _record(lab, fn.__name__, digest, value, call_leaves(args, kwargs))
                return value
            try:
                recorded = recording.value(fn.__name__, digest, call_leaves(args, kwargs))
            except RecordedTruthError as exc:
                raise KitError(f"{lab}'s recorded truth is stale ({exc}); run python "
                               f"scripts/record_truth.py {lab}") from None
            if not _same(recorded, value):
                raise KitError(f"{lab}'s recorded truth is stale: {fn.__name__} gives another "
                               f"value than recorded; run python scripts/record_truth.py {lab}")
            return value

        return wrapper

    return decorate


def recorded_module(module_file: str, names: list[str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of a template's ``tests/truth_labNN.py``: each name in ``names``
    is a function that returns the recorded value of a call (never computing one)."""
    recording = _Recording(recording_path(module_file))

    def lookup(name: str):
        if name not in names:
            raise AttributeError(f"{Path(module_file).stem} has no {name!r}")

        def recorded(*args, **kwargs):
            if _salted():
                raise RecordedTruthError(
                    "this repository carries the expected values of the public cases only; a "
                    "grade with a secret seed needs the judge's copy of the lab (regrade from "
                    "the course kit, or the Gradescope / Classroom 50 autograder)")
            return recording.value(name, call_digest(args, kwargs), call_leaves(args, kwargs))

        recorded.__name__ = recorded.__qualname__ = name
        return recorded

    return lookup
