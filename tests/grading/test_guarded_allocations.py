"""The guards around what a student's code allocates itself, the two-run grading of a function
apart from its parts, and the source reading that sees names computed at run time."""

from pathlib import Path

import pytest
import torch

from msda_labs.grading.judge import probes
from msda_labs.grading.judge.rules import SourceInfo, indirect_uses
from msda_labs.student.guards import SENTINEL, GuardedAllocations


def _spill(t: torch.Tensor, past_end: int = 0, before: int = 0) -> None:
    """Write ``past_end`` elements after ``t`` and ``before`` elements ahead of it, as an
    unmasked store would (``t`` must lie inside a larger buffer)."""
    flat = t.reshape(-1)
    if past_end:
        torch.as_strided(flat, (past_end,), (1,), flat.storage_offset() + flat.numel()).fill_(1)
    if before:
        torch.as_strided(flat, (before,), (1,), flat.storage_offset() - before).fill_(1)


def test_factory_tensors_lie_between_guards_with_their_values_and_strides():
    x = torch.randn(3, 4)
    with GuardedAllocations() as alloc:
        empty = torch.empty(2, 3)
        zeros = torch.zeros(5, dtype=torch.int32)
        full = x.new_full((2,), 7.0)
        like = torch.empty_like(x.t())
        flags = torch.empty(3, dtype=torch.bool)
        leaf = torch.zeros(4, requires_grad=True)
    assert all(alloc.owns(t) for t in (empty, zeros, full, like, flags, leaf))
    assert not alloc.owns(x)
    # An empty float tensor holds the sentinel (never stale memory), the others their values.
    assert bool((empty.view(torch.int32) == SENTINEL[torch.float32][1]).all())
    assert zeros.tolist() == [0] * 5 and full.tolist() == [7.0, 7.0]
    assert flags.tolist() == [False] * 3
    assert like.stride() == x.t().stride() and like.shape == x.t().shape
    assert leaf.requires_grad and leaf.is_leaf
    assert alloc.strays() == []


def test_stray_writes_are_found_on_either_side():
    with GuardedAllocations() as alloc:
        out = torch.empty(2, 3)
        counts = torch.zeros(5, dtype=torch.int32)
        half = torch.zeros(4, dtype=torch.float16)
    _spill(out, past_end=3)
    _spill(counts, before=2)
    _spill(half, past_end=1)
    found = {(s.made_by.split(" ")[0], s.side): (s.count, s.nearest) for s in alloc.strays()}
    assert found == {("torch.empty", "past_end"): (3, 0), ("torch.zeros", "before_start"): (2, 0),
                     ("torch.zeros", "past_end"): (1, 0)}
    text = alloc.strays()[0].describe()
    assert "3 elements past the end" in text and "(2, 3)" in text


class _Module:
    """A stand-in submission whose launcher allocates its output and overruns it."""

    @staticmethod
    def launcher(n, overrun):
        out = torch.empty(n)
        out.fill_(1.0)
        _spill(out, past_end=overrun)
        return out


@probes.guards_allocations("the hint")
def _probe(module, n, overrun):
    return {"out": module.launcher(n, overrun)}


def test_a_guarded_probe_fails_a_stray_write_in_the_interpreter_only(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    res = _probe(_Module, 4, 0)
    assert res["out"].tolist() == [1.0] * 4
    assert res["out"].untyped_storage().nbytes() == 16  # copied out of its guarded buffer
    with pytest.raises(probes.OutOfBoundsWrite, match="2 elements past the end.*the hint"):
        _probe(_Module, 4, 2)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    guard = torch.zeros(64)  # outside the interpreter nothing is laid out: spill into a buffer
    res = _probe(type("M", (), {"launcher": staticmethod(lambda n, o: guard[:n])}), 4, 0)
    assert res["out"].numel() == 4


def test_expect_either_passes_on_either_run_and_reports_the_useful_failure():
    def check(want):
        def run_check(run):
            if run.get("out") != want:
                raise AssertionError(f"got {run.get('out')}, expected {want}")
        return run_check

    both = {"stand_in": {"out": 1}, "own": {"out": 2}}
    probes.expect_either(both, check(1), check(3), note="n")  # the stand-in run matches
    probes.expect_either(both, check(5), check(2), note="n")  # your own run matches
    with pytest.raises(AssertionError, match="^got 2, expected 4$"):
        probes.expect_either(both, check(3), check(4), note="n")
    own_raised = {"stand_in": {"out": 1}, "own": {"error": "ValueError: boom"}}
    with pytest.raises(AssertionError, match=r"expected 3 \(n; with your own parts it raised "
                                             r"ValueError: boom\)"):
        probes.expect_either(own_raised, check(3), check(4), note="n")
    with pytest.raises(AssertionError, match="wrong form"):
        probes.expect_either([1, 2], check(1), check(1), note="n")
    # a stand-in run that never reached the stand-ins does not count: a copy of a stand-in
    not_reached = {**both, "stand_in_calls": 0}
    probes.expect_either({**both, "stand_in_calls": 3}, check(1), check(3), note="n")
    with pytest.raises(AssertionError, match="^got 2, expected 3$"):
        probes.expect_either(not_reached, check(1), check(3), note="n")
    with pytest.raises(AssertionError, match="never called them .n; with your own parts"):
        probes.expect_either({**own_raised, "stand_in_calls": 0}, check(1), check(4),
                             note="n")


def test_both_runs_restores_the_parts_and_keeps_a_stub_not_attempted():
    class Module:
        @staticmethod
        def part():
            raise ValueError("broken part")

        @staticmethod
        def whole():
            return Module.part() + 1

    original = Module.part
    res = probes.both_runs(Module, {"part": lambda: 10}, lambda m: {"out": m.whole()})
    assert res == {"stand_in": {"out": 11}, "own": {"error": "ValueError: broken part"},
                   "stand_in_calls": 1}
    assert Module.part is original

    class Stub:
        @staticmethod
        def whole():
            raise NotImplementedError("Task 0.3: whole")

    with pytest.raises(NotImplementedError):
        probes.both_runs(Stub, {}, lambda m: m.whole())


def _uses(tmp_path: Path, text: str):
    path = tmp_path / "lab01.py"
    path.write_text(text)
    return [what for _, what in indirect_uses(SourceInfo.read(path), ("grid_sample",))]


def test_indirect_uses_sees_names_computed_at_run_time(tmp_path):
    assert _uses(tmp_path, "import math\nimport torch\n\ndef f(x):\n    return math.floor(x)\n"
                           "\nif __name__ == '__main__':\n    import sys\n    print(getattr)\n") \
        == []
    assert _uses(tmp_path, "import sys\nF = sys.modules['torch.nn.functional']\n") == ["sys"]
    assert _uses(tmp_path, "import torch\ng = getattr(torch, 'x')\n") == ["getattr"]
    assert _uses(tmp_path, "import torch.nn.functional as F\nd = F.__dict__\n") == [".__dict__"]
    assert _uses(tmp_path, "from importlib import import_module\n") == ["importlib"]
    assert _uses(tmp_path, "from torch.nn.functional import grid_sample\n") == ["grid_sample"]
