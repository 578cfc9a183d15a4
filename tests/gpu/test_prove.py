"""The H200 harness, proved without a GPU: the slow and wrong submissions it makes from a chip
behave as named, and a dry run on the fixture lab (its CPU stage) grades, judges and bundles."""

import json
import subprocess
import sys
import tarfile
import time
import types
from pathlib import Path

import pytest
import torch
from kit import whole_submission_mutants

from msda_labs.gpu.prove import VARIANTS, make_variant
from msda_labs.grading.rules import SourceInfo, forbidden_imports

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "fixture"
CHIPS = HERE.parents[1] / "shared" / "msda_labs" / "chips"

TOY = '''
import torch


def op(x):
    return helper(x) * 1.0


def helper(x):
    return x * 2


def pair(x):
    return x + 1, x.new_tensor([7.0])


def count(x):
    return int(x.numel())


def _private(x):
    return x
'''


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def test_every_variant_is_an_entry_of_the_mutant_library():
    # tests/mutants/whole.yaml lists them; msda_labs/mistakes/submissions.py holds their code.
    assert VARIANTS == ("chip", *(entry["id"] for entry in whole_submission_mutants()))
    for variant in VARIANTS[1:]:
        block = make_variant("", variant)
        assert f"deliberately {variant}" in block and "(globals())" in block
        assert "@SUBMISSIONS" not in block  # the function, not its registration


def test_the_chip_variant_is_the_chip():
    assert make_variant(TOY, "chip") == TOY
    with pytest.raises(ValueError):
        make_variant(TOY, "fast")


def test_the_wrong_variant_is_off_by_one_element_once():
    wrong = _load(make_variant(TOY, "wrong"), "toy_wrong")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    got = wrong.op(x)
    expected = x * 2
    assert got[0, 0] == expected[0, 0] + 1.0  # 1 + |0|/2, and not twice (op calls helper)
    assert torch.equal(got.reshape(-1)[1:], expected.reshape(-1)[1:])
    a, b = wrong.pair(x)
    assert a[0, 0] == 1.0 + 1.0 + 0.5 and b.item() == 7.0 + 1.0 + 3.5
    assert wrong.count(x) == 6  # not a tensor: untouched
    assert wrong._private(x) is x


def test_the_slow_variant_is_slower_and_right():
    slow = _load(make_variant(TOY, "slow"), "toy_slow")
    x = torch.arange(4, dtype=torch.float32)
    start = time.perf_counter()
    for _ in range(3):
        assert torch.equal(slow.op(x), x * 2)
    assert time.perf_counter() - start >= 3 * 0.002  # at least 2 ms a call, once per call


@pytest.mark.parametrize("chip", sorted(CHIPS.glob("lab[0-9][0-9].py")), ids=lambda p: p.stem)
def test_variants_of_every_chip_parse_and_break_no_rule(chip, tmp_path):
    lab = int(chip.stem[3:])
    before = forbidden_imports(SourceInfo.read(chip), lab)
    for variant in ("slow", "wrong"):
        path = tmp_path / f"{variant}.py"
        path.write_text(make_variant(chip.read_text(), variant))
        info = SourceInfo.read(path)
        assert info.tree is not None, info.syntax_error
        assert forbidden_imports(info, lab) == before


def test_dry_run_on_the_fixture_meets_every_expectation(tmp_path):
    out = tmp_path / "prove"
    cmd = [sys.executable, "-m", "msda_labs.gpu.prove", "--out", str(out), "--stage", "cpu",
           "--manifest", str(FIXTURE / "classroom.yml"),
           "--chips", str(FIXTURE / "lab-99-gpu-fixture"), "--compact"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    runs = {r["variant"]: r for r in summary["runs"]}
    assert {v: (r["score"], r["max_score"], r["ok"]) for v, r in runs.items()} == {
        "chip": (3, 3, True), "slow": (2, 3, True), "wrong": (0, 3, True)}
    assert runs["slow"]["verdict"].startswith("caught by speed test(s) test_double_speed")
    assert "too slow" in runs["slow"]["verdict"]
    assert "1 of 15 elements differ" in runs["wrong"]["verdict"]
    text = (out / "summary.md").read_text()
    assert "| lab99 | chip | 3/3 |" in text and "3/3 expectations hold." in text
    assert "## Speed" in text
    # compact: only the summaries and the bundle stay; the bundle holds everything
    assert sorted(p.name for p in out.iterdir()) == [
        "env.json", "prove-bundle.tar.gz", "summary.json", "summary.md"]
    with tarfile.open(out / "prove-bundle.tar.gz") as tar:
        names = set(tar.getnames())
    for name in ("lab99-chip.json", "lab99-slow.log", "lab99-wrong.json",
                 "submissions/lab99-slow/lab99.py", "lab99-chip/lab99-speed.csv"):
        assert name in names, sorted(names)


def test_no_lab_to_prove_exits_2(tmp_path):
    manifest = tmp_path / "classroom.yml"
    manifest.write_text("course: {name: empty, title: Empty}\nlabs:\n"
                        "  - {id: lab01, folder: lab-01-x, title: X, status: ready,"
                        " stages: [{name: cpu}]}\n")
    proc = subprocess.run([sys.executable, "-m", "msda_labs.gpu.prove", "--out",
                           str(tmp_path / "o"), "--manifest", str(manifest)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "nothing to prove" in proc.stderr, proc.stderr
