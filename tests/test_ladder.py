"""The ladder audit (docs/ladder.md) cannot drift: it is built from the tests' rule markers, every
cell where a rule applies names a test, and every CPU-graded cell has a mutant that breaks it."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kit import MANIFEST, ROOT, mutants

from msda_labs.authoring.handout import ladder_cells, sync_ladder
from msda_labs.course import ladder

LABS = [(lab.id, lab.folder) for lab in MANIFEST.labs if lab.built]

# Graded cells that no mutant breaks yet: each one is a named gap of the self-test, shown here so
# that closing it means deleting its line (and the test below fails if a line is stale).
MUTANT_GAPS: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module")
def cells():
    return ladder_cells(ROOT, LABS)


def test_the_columns_are_the_labs_that_teach_a_rule(cells):
    graded, _ = cells
    columns = ladder.columns(graded)
    assert set(columns) <= {lab_id for lab_id, _ in LABS}
    # Labs 00 and 03 teach no kernel rule; every other lab carries rule markers or reasons.
    assert set(columns) == {lab_id for lab_id, _ in LABS} - {"lab00", "lab03"}
    # A lab that starts carrying a rule marker is a column at once: no list names the labs.
    assert "lab42" in ladder.columns({**graded, ("floor", "lab42"): ["test_floor"]})


def test_no_empty_or_contradictory_cell(cells):
    graded, _ = cells
    problems = ladder.cell_problems(graded)
    assert not problems, "ladder audit:\n  " + "\n  ".join(problems)


def test_cell_problems_finds_empty_and_double_cells():
    labs = ladder.columns({})
    graded = {(rule, lab): ["test_x"] for rule in ladder.RULES for lab in labs
              if (rule, lab) not in ladder.NOT_APPLICABLE and (rule, lab) not in ladder.GAPS}
    assert ladder.cell_problems(graded) == []
    key = next(iter(graded))
    emptied = {k: v for k, v in graded.items() if k != key}
    assert any("empty cell" in p for p in ladder.cell_problems(emptied))
    na = next(iter(ladder.NOT_APPLICABLE))
    assert any("both graded and not applicable" in p
               for p in ladder.cell_problems({**graded, na: ["test_y"]}))
    assert any("unknown rule" in p for p in ladder.cell_problems({**graded,
                                                                   ("no-such", "lab05"): ["t"]}))


def test_doc_is_current():
    drift, problems = sync_ladder(ROOT, LABS, check=True)
    assert not drift, "docs/ladder.md is stale: run `python -m msda_labs sync`"
    assert not problems


def test_doc_shows_every_rule_and_no_empty_cell():
    text = (ROOT / ladder.DOC).read_text()
    for rule in ladder.RULES:
        assert f"### {rule}" in text
    assert "EMPTY" not in text


def test_kernel_labs_06_and_08_grade_int64_on_the_cpu(cells):
    graded, gpu = cells
    for lab in ("lab05", "lab06", "lab08"):
        cpu_tests = [t for t in graded.get(("int64-offsets", lab), []) if t not in gpu]
        assert cpu_tests, f"{lab}: no CPU test enforces int64 offsets"


def _cpu_graded(graded, gpu):
    return {key for key, tests in graded.items() if any(t not in gpu for t in tests)}


def test_every_cpu_graded_cell_has_a_mutant(cells):
    graded, gpu = cells
    broken = {(rule, m.lab) for lab in ladder.columns(graded) for m in mutants(lab)
              for rule in m.rules}
    missing = sorted(_cpu_graded(graded, gpu) - broken - set(MUTANT_GAPS))
    assert not missing, f"graded cells no mutant in tests/mutants/ breaks: {missing}"
    stale = sorted(set(MUTANT_GAPS) & broken)
    assert not stale, f"MUTANT_GAPS lists cells that now have a mutant: {stale}"


def test_mutant_rules_are_rules():
    for lab, _ in LABS:
        for m in mutants(lab):
            assert not ladder.unknown_rules(m.rules), f"{lab}/{m.id}: unknown rules {m.rules}"


HEADER = '''
import pytest
LAB = "lab98"
MODE = "cpu"
TASKS = {"98.1": "f"}
'''


@pytest.mark.parametrize("marker", ['@pytest.mark.rule("int64-offset")', "@pytest.mark.rule()"])
def test_unknown_rule_is_a_usage_error(tmp_path: Path, marker):
    lab = tmp_path / "lab-98-probe"
    (lab / "tests").mkdir(parents=True)
    (lab / "lab98.py").write_text("def f():\n    return 1\n")
    (lab / "tests" / "test_lab98_probe.py").write_text(textwrap.dedent(HEADER + f'''
@pytest.mark.task("98.1", points=1)
{marker}
def test_f(submission):
    assert submission.call("f") == 1
'''))
    proc = subprocess.run([sys.executable, "-m", "msda_labs", "grade", str(lab)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown ladder rule" in proc.stdout + proc.stderr
