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
from msda_labs.grading.judge.rules import SourceInfo, forbidden_imports
from msda_labs.mistakes.submissions import SERIAL_ENTRIES, SERIAL_PIECES

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
        path.write_text(make_variant(chip.read_text(), variant, chip.stem))
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


# -- the slow copy of a GPU lab: the chip's own calls on pieces of the queries, one after another
STANDIN = """
import torch
from msda_labs.truth.reference import msda_reference

CALLS = []


def msda_forward(value, spatial_shapes, level_start_index, sampling_locations,
                 attention_weights, BLOCK_Q=32):
    CALLS.append(sampling_locations.shape[1])
    return msda_reference(value, spatial_shapes, sampling_locations, attention_weights)


def msda_backward(value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights, grad_out, fp32_grad_accum=False):
    CALLS.append(sampling_locations.shape[1])
    leaves = [t.detach().requires_grad_() for t in (value, sampling_locations,
                                                    attention_weights)]
    out = msda_reference(leaves[0], spatial_shapes, leaves[1], leaves[2])
    return tuple(torch.autograd.grad(out, leaves, grad_out))


def msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, *,
         fp32_grad_accum=None):
    CALLS.append(sampling_locations.shape[1])
    return msda_reference(value, spatial_shapes, sampling_locations, attention_weights)
"""


def _case_inputs(queries: int):
    from msda_labs.student.cases import make_inputs
    from msda_labs.truth.cases import MULTI_LEVEL

    case = MULTI_LEVEL.with_(Q=queries)
    return case, tuple(make_inputs(case, torch.float64))


@pytest.mark.parametrize("queries", [1, 7, 300])
def test_the_serial_copy_gives_the_same_results_in_pieces(queries):
    plain = _load(STANDIN, "standin_plain")
    slow = _load(make_variant(STANDIN, "slow", "lab08").replace(
        "_prove_one_msda_backward = msda_backward", "_prove_one_msda_backward = msda_backward\n"
        "_prove_one_msda_forward = msda_forward"), "standin_slow")
    case, inputs = _case_inputs(queries)
    value, shapes, starts, loc, attn = inputs
    grad = torch.randn(case.B, queries, case.M * case.D, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(queries))
    want = plain.msda_backward(value, shapes, starts, loc, attn, grad)
    got = slow.msda_backward(value, shapes, starts, loc, attn, grad)
    for a, b in zip(got, want):
        # the reference samples in fp32 inside (grid_sample): sums in another order differ there
        assert a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    assert slow.CALLS == [queries] if queries < 2 else len(slow.CALLS) == min(queries,
                                                                              SERIAL_PIECES)
    assert sum(slow.CALLS) == queries


def test_the_serial_copy_of_the_forward_and_the_operator_joins_along_the_queries():
    case, inputs = _case_inputs(50)
    args = list(inputs)
    for lab, name in (("lab05", "msda_forward"), ("lab10", "msda")):
        plain = _load(STANDIN, f"{lab}_plain")
        slow = _load(make_variant(STANDIN, "slow", lab), f"{lab}_slow")
        assert torch.allclose(getattr(slow, name)(*args), getattr(plain, name)(*args),
                              rtol=1e-12, atol=1e-12)
        assert len(slow.CALLS) == 50


@pytest.mark.parametrize("lab", sorted(SERIAL_ENTRIES))
def test_the_serial_copy_of_every_gpu_chip_rebinds_only_its_entries(lab):
    chip = (CHIPS / f"{lab}.py").read_text()
    slow = make_variant(chip, "slow", lab)
    assert slow.startswith(chip.rstrip("\n")) and "globals()" not in slow[len(chip):]
    for name in SERIAL_ENTRIES[lab]:
        assert f"\ndef {name}(" in slow[len(chip):]


def test_lab10s_rules_believe_its_serial_copy(tmp_path):
    """The slow copy of lab 10 keeps the launchers bound and called as the chip does: its
    records are believed, so only its speed test can catch it."""
    sys.path.insert(0, str(HERE.parents[1] / "lab-10-ship-it" / "tests"))
    try:
        import judge_lab10
    finally:
        sys.path.pop(0)
    for text in ((CHIPS / "lab10.py").read_text(),
                 make_variant((CHIPS / "lab10.py").read_text(), "slow", "lab10")):
        path = tmp_path / "lab10.py"
        path.write_text(text)
        assert judge_lab10.launcher_uses(SourceInfo.read(path)) == []


def test_speed_only_names_each_speed_test_in_full():
    """`--speed-only` selects by whole test names: a bare word would also match the folders
    above the tests (a checkout in a folder named "speed" once ran every test)."""
    from msda_labs.gpu.prove import SPEED_TESTS

    names = SPEED_TESTS.split(" or ")
    sources = "".join(p.read_text() for p in HERE.parents[1].glob("lab-*/tests/test_*.py"))
    assert len(names) == 6 and all(f"\ndef {name}(submission" in sources for name in names)
    callers = {line.split("def ")[1].split("(")[0] for block in sources.split("\n\n\n")
               if "judge_msda_speed(" in block or "_on_the_judges_clock(submission" in block
               for line in block.splitlines() if line.startswith("def test_")}
    assert callers == set(names)


def test_the_verdict_table_lists_every_trial():
    from msda_labs.gpu.prove import Run, _verdict_table

    verdict = {"ratio": "yours / reference", "value": 0.3, "interval": [0.2, 0.4], "limit": 1.0,
               "at_least": False, "passes": True, "margin": 0.7, "straddles": False}
    run = Run(lab="lab05", variant="chip")
    run.speed = [{"key": "k", "verdicts": [verdict], "attempts": 1},
                 {"key": "k", "verdicts": [{**verdict, "value": 0.5, "margin": 0.5}],
                  "attempts": 2}]
    (row,) = [line for line in _verdict_table([run]) if line.startswith("| lab05")]
    assert "| 2 | 0.30 [0.20, 0.40]; 0.50 [0.20, 0.40] | <= 1 | 2/2 | 0.50 | 1, 2 |" in row
