"""The truth of labs 00, 03 and 08, recorded for their templates (msda_labs.grading.judge.owntruth).

* a call's digest tells its data apart: the same data in every form (a tensor or a copy of it,
  a dict in any key order) gives the same digest, and any change of a value, a dtype, a shape or
  a nesting gives another (Hypothesis: 60 generated pairs);
* a judged function of the kit fails with the kit's error when the recording is stale (a value
  changed, a call never recorded), and records under ``$MSDA_TRUTH_RECORD``;
* a template's recorded module returns what was recorded, refuses a call it does not hold, and
  refuses every call under a secret salt (a regrade needs the judge's copy).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from msda_labs.errors import KitError
from msda_labs.grading.judge import owntruth
from msda_labs.student.cases import salted

SETTINGS = settings(max_examples=60, derandomize=True, deadline=None)

_DTYPES = (torch.float32, torch.float64, torch.int64)


@st.composite
def _data(draw):
    """A small nested argument: tensors, numbers, strings, lists, tuples and dicts."""
    leaf = st.one_of(
        st.builds(lambda shape, dtype, seed: (torch.randn(shape, generator=torch.Generator()
                                                           .manual_seed(seed)) * 4).to(dtype),
                  st.lists(st.integers(0, 3), max_size=2).map(tuple),
                  st.sampled_from(_DTYPES), st.integers(0, 99)),
        st.integers(-5, 5), st.floats(-2, 2, allow_nan=False), st.text("ab", max_size=2),
        st.none(), st.booleans())
    return draw(st.recursive(leaf, lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.lists(kids, max_size=3).map(tuple),
        st.dictionaries(st.text("xyz", min_size=1, max_size=2), kids, max_size=3)),
        max_leaves=6))


def _copy(obj):
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copy(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _copy(obj[k]) for k in reversed(list(obj))}  # another key order
    return obj


def _same(a, b) -> bool:
    """The same data, bit for bit (-0.0 is not 0.0: a digest reads bytes)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dtype == b.dtype and a.shape == b.shape
                and a.numpy().tobytes() == b.numpy().tobytes())
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and repr(a) == repr(b)
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(_same(x, y) for x, y in zip(a, b)))
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(_same(a[k], b[k]) for k in a))
    return type(a) is type(b) and a == b


@SETTINGS
@given(_data(), _data())
def test_digest_tells_data_apart(a, b):
    digest = owntruth.call_digest
    assert digest((a,), {}) == digest((_copy(a),), {})
    assert (digest((a,), {}) == digest((b,), {})) == _same(a, b)


def test_digest_refuses_what_is_not_data():
    with pytest.raises(TypeError, match="data only"):
        owntruth.call_digest((lambda x: x,), {})


def _kit_module(tmp_path, value_expr: str):
    """A kit-style truth module with one judged function ``double(x)``, and its recording of
    ``double(tensor([1., 2.]))`` as ``value_expr``."""
    path = tmp_path / "truth_labxx.py"
    path.write_text(textwrap.dedent("""
        from msda_labs.grading.judge.owntruth import judged

        @judged(__file__, "labxx")
        def double(x):
            return 2 * x
    """))
    x = torch.tensor([1.0, 2.0])
    torch.save({"double": {owntruth.call_digest((x,), {}): eval(value_expr)}},  # noqa: S307
               owntruth.recording_path(path))
    namespace: dict = {"__file__": str(path)}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - written above
    return namespace["double"], x


def test_judged_passes_a_fresh_recording_and_fails_a_stale_one(tmp_path, monkeypatch):
    monkeypatch.delenv(owntruth.RECORD_ENV, raising=False)
    double, x = _kit_module(tmp_path, "2 * x")
    assert torch.equal(double(x), 2 * x)
    with pytest.raises(KitError, match="stale.*record_truth.py labxx"):
        double(torch.tensor([3.0]))  # a call the recording does not hold
    stale, x = _kit_module(tmp_path, "2 * x + 1")
    with pytest.raises(KitError, match="another value than recorded"):
        stale(x)
    with salted(7):  # secret cases: computed, never checked against the public recording
        assert torch.equal(stale(torch.tensor([3.0])), torch.tensor([6.0]))


def test_a_recording_from_another_cpu_passes_and_a_changed_value_does_not(tmp_path, monkeypatch):
    """Vector units of another width may round a sum otherwise: a unit in the last place is not
    staleness; a change of the code moves a value much further."""
    monkeypatch.delenv(owntruth.RECORD_ENV, raising=False)
    rounded, x = _kit_module(tmp_path, "torch.nextafter(2 * x, torch.full_like(x, 9.0))")
    assert torch.equal(rounded(x), 2 * x)
    changed, x = _kit_module(tmp_path, "2 * x * (1 + 1e-5)")
    with pytest.raises(KitError, match="another value than recorded"):
        changed(x)


def test_judged_records_each_call_under_the_record_folder(tmp_path):
    out = tmp_path / "recorded"
    script = textwrap.dedent(f"""
        import torch
        from msda_labs.grading.judge.owntruth import judged

        @judged({str(tmp_path / "truth_labxx.py")!r}, "labxx")
        def double(x):
            return 2 * x

        double(torch.tensor([1.0])); double(torch.tensor([5.0])); double(torch.tensor([1.0]))
    """)
    env = {**os.environ, owntruth.RECORD_ENV: str(out)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
    (part,) = out.glob("labxx-*.pt")
    calls = torch.load(part, weights_only=True)["double"]
    assert sorted(float(v) for v in calls.values()) == [2.0, 10.0]


def test_recorded_module_looks_up_refuses_and_never_computes(tmp_path):
    module = tmp_path / "truth_labxx.py"
    x = torch.tensor([1.0, 2.0])
    torch.save({"double": {owntruth.call_digest((x,), {}): torch.tensor([2.0, 4.0])}},
               owntruth.recording_path(module))
    lookup = owntruth.recorded_module(str(module), ["double"])
    assert torch.equal(lookup("double")(x.clone()), torch.tensor([2.0, 4.0]))
    with pytest.raises(owntruth.RecordedTruthError, match="public cases only"):
        lookup("double")(torch.tensor([1.0, 2.5]))
    with pytest.raises(AttributeError):
        lookup("triple")
    with salted(3), pytest.raises(owntruth.RecordedTruthError, match="secret seed"):
        lookup("double")(x)


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=64), min_size=1, max_size=12),
       ulps=st.integers(1, 8), scale=st.floats(-3.0, 3.0), dtype=st.sampled_from(
           [torch.float64, torch.float32]))
def test_arguments_drawn_on_another_cpu_find_their_recorded_value(tmp_path_factory, values, ulps,
                                                                   scale, dtype):
    """Inputs drawn or computed with another CPU's vector units or another libm may differ in
    their last bits (lab 00's reads of a map through exp and a matrix product did between two
    x86 machines, and every such case failed). A call a few units in the last place away finds
    its recording, in the template and in the kit; one a relative 1e-5 away does not."""
    module = tmp_path_factory.mktemp("truth") / "truth_labxx.py"
    x = torch.tensor(values, dtype=dtype)
    call = ((x, {"scale": scale, "name": "case"}), {})
    torch.save({"double": {owntruth.call_digest(*call): 2 * x},
                owntruth.ARGS: {"double": {owntruth.call_digest(*call): owntruth.call_leaves(
                    *call)}}}, owntruth.recording_path(module))
    lookup = owntruth.recorded_module(str(module), ["double"])
    nudged = x
    for _ in range(ulps):
        nudged = torch.nextafter(nudged, torch.full_like(nudged, float("inf")))
    near = nudged.clone()
    near_scale = scale * (1 + 4 * 2.0 ** -52)
    assert torch.equal(lookup("double")(near, {"scale": near_scale, "name": "case"}), 2 * x)
    # a tensor is compared at the scale of its largest element (at least 1): 1e-5 of it is far
    far = x + max(1.0, float(x.abs().max())) * 1e-5
    with pytest.raises(owntruth.RecordedTruthError, match="public cases only"):
        lookup("double")(far, {"scale": scale, "name": "case"})
    with pytest.raises(owntruth.RecordedTruthError, match="public cases only"):
        lookup("double")(near, {"scale": scale, "name": "another case"})
