"""Probes of lab 02: what the isolated child runs against your module (no test functions here).

Results come back as plain data: ``as_int`` / ``as_bool`` describe what a function returned
without trusting its type, and :class:`Watch` records how ``flat_msda`` touches its tensors:
every call of ``flat_msda`` runs watched, also for the interpolation operators that ran
(``msda_labs.grading.judge.spies.ForbiddenOps``) and for whether it read ``value`` through its flat
view at all.
"""


import torch
from torch.overrides import TorchFunctionMode

from msda_labs.grading.judge.spies import CountLines, ForbiddenOps
from msda_labs.student.cases import make_inputs


def as_int(res):
    """('int', value) for ints (Python, numpy, 0-d integer tensors), else ('other', description)."""
    if isinstance(res, bool):
        return ("other", f"the bool {res}")
    if isinstance(res, int):
        return ("int", res)
    if type(res).__module__ == "numpy" and hasattr(res, "dtype") and res.dtype.kind in "iu" \
            and getattr(res, "ndim", 1) == 0:
        return ("int", int(res))
    if isinstance(res, torch.Tensor) and res.dim() == 0 and not res.is_floating_point() \
            and res.dtype != torch.bool:
        return ("int", int(res))
    return ("other", f"{type(res).__module__}.{type(res).__qualname__} {res!r:.60}")


def as_bool(res):
    """('bool', value, type name) for bool-like results, else ('other', description, type name)."""
    typename = f"{type(res).__module__}.{type(res).__qualname__}"
    if isinstance(res, bool):
        return ("bool", res, "bool")
    if type(res).__name__ == "bool_" or (isinstance(res, torch.Tensor) and res.dim() == 0
                                          and res.dtype == torch.bool):
        return ("bool", bool(res), typename)
    return ("other", f"{typename} {res!r:.60}", typename)


def flat_indices(module, calls):
    return [as_int(module.flat_index(*args)) for args in calls]


def max_indices(module, sizes):
    return [as_int(module.max_flat_index(*size)) for size in sizes]


def overflow_answers(module, sizes):
    return [as_bool(module.overflows_int32(*size)) for size in sizes]


_META = {"shape", "dtype", "device", "size", "dim", "ndim", "ndimension", "numel", "nelement",
         "stride", "is_contiguous", "element_size", "itemsize", "nbytes", "is_floating_point",
         "is_complex", "layout", "requires_grad", "is_cuda", "is_cpu", "get_device", "data_ptr",
         "storage_offset", "__len__", "__repr__", "__str__", "__format__", "is_leaf", "grad_fn",
         "is_sparse", "is_quantized", "is_meta", "names"}
_NO_READ = {"zeros_like", "ones_like", "empty_like", "full_like", "new_zeros", "new_ones",
            "new_empty", "new_full", "take"}
_FLATTEN = {"reshape", "view", "flatten", "ravel", "reshape_as", "view_as", "contiguous", "to",
            "float", "double", "half", "bfloat16", "detach", "clone", "cpu", "cuda", "type",
            "type_as", "requires_grad_", "detach_", "as_tensor"}


def _func_name(func) -> str:
    name = getattr(func, "__name__", None) or str(func)
    if name == "__get__":  # a property such as .shape
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    return name


def _op(fname: str) -> str:
    return "indexing [...]" if fname == "__getitem__" else f"{fname}()"


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


class Watch(TorchFunctionMode):
    """Watches one flat_msda call: what touches the data tensors, narrow integers, torch calls.

    The data tensors start as "nd" (their 4-D or 6-D selves): only metadata, conversions and a
    flattening to 1-D may touch them. A 1-D flattening is "flat": it may be indexed freely but
    not viewed as a multi-dimensional tensor again.
    """

    def __init__(self, tensors: dict):
        super().__init__()
        self.kind: dict[int, tuple[str, str]] = {}
        self.keep: list[torch.Tensor] = []
        self.violations: list[str] = []
        self.narrow: list[str] = []
        self.read_flat: set[str] = set()  # data tensors read through a flat view
        self.calls = 0
        for name, tensor in tensors.items():
            self._mark(tensor, name, "nd")

    def _mark(self, tensor, name, kind):
        self.kind[id(tensor)] = (name, kind)
        self.keep.append(tensor)

    @staticmethod
    def _note(found: list, what: str) -> None:
        if what not in found and len(found) < 3:
            found.append(what)

    def _judge(self, fname, name, kind, tensor, result):
        if fname == "take" or (kind == "flat" and fname not in _META | _NO_READ | _FLATTEN):
            self.read_flat.add(name)  # torch.take reads any tensor as flat
        if fname in _META or fname in _NO_READ:
            return
        res = result if isinstance(result, torch.Tensor) else None
        if kind == "nd":
            if fname in _FLATTEN and res is not None and res.dim() == 1 \
                    and res.numel() == tensor.numel():
                self._mark(res, name, "flat")
            elif fname in _FLATTEN and res is not None and res.shape == tensor.shape:
                self._mark(res, name, "nd")
            else:
                self._note(self.violations, f"{_op(fname)} on the {tensor.dim()}-D {name}")
        elif res is not None:
            if res.dim() > 1 and res.untyped_storage().data_ptr() == \
                    tensor.untyped_storage().data_ptr():
                self._note(self.violations,
                           f"{_op(fname)} made a {res.dim()}-D view of the flat {name}")
            elif fname in _FLATTEN and res.dim() == 1 and res.numel() == tensor.numel():
                self._mark(res, name, "flat")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls += 1
        fname = _func_name(func)
        watched = [(self.kind[id(t)], t) for t in _tensors((args, kwargs)) if id(t) in self.kind]
        result = func(*args, **kwargs)
        for (name, kind), tensor in watched:
            self._judge(fname, name, kind, tensor, result)
        for res in _tensors(result):
            if res.dtype in (torch.int32, torch.int16):
                self._note(self.narrow, f"{_op(fname)} made an {str(res.dtype)[6:]} tensor")
        return result


def _data(value, loc, attn) -> dict:
    return {"value": value, "sampling_locations": loc, "attention_weights": attn}


def watched_call(module, inputs):
    """One flat_msda call, watched; an error it raised is forgiven when a rule it broke may have
    caused it (the judge reports the rule)."""
    value, shapes, starts, loc, attn = inputs
    watch = Watch(_data(value, loc, attn))
    error, out = None, None
    with watch, ForbiddenOps() as spy:
        try:
            out = module.flat_msda(value, shapes, starts, loc, attn)
        except Exception as exc:  # noqa: BLE001 - a rule violation may have caused it
            error = exc
    if error is not None and not watch.violations and not watch.narrow:
        raise error
    return {"violations": watch.violations, "narrow": watch.narrow, "out": out,
            "forbidden": spy.found, "read_flat": sorted(watch.read_flat)}


def checked_call(module, inputs):
    """One flat_msda call (its errors propagate): the output, the interpolation operators that
    ran and which data tensors it read through a flat view."""
    value, shapes, starts, loc, attn = inputs
    watch = Watch(_data(value, loc, attn))
    with watch, ForbiddenOps() as spy:
        out = module.flat_msda(value, shapes, starts, loc, attn)
    return {"out": out, "forbidden": spy.found, "read_flat": sorted(watch.read_flat)}


def work_done(module, cases):
    """Lines of the submission run and torch calls made by flat_msda, per case."""
    counts, outs = [], []
    for case in cases:
        value, shapes, starts, loc, attn = make_inputs(case, torch.float64)
        watch = Watch(_data(value, loc, attn))
        with watch, ForbiddenOps() as spy, CountLines(module.__file__) as lines:
            out = module.flat_msda(value, shapes, starts, loc, attn)
        outs.append({"out": out, "forbidden": spy.found, "read_flat": sorted(watch.read_flat)})
        counts.append((lines.lines, watch.calls))
    return counts, outs
