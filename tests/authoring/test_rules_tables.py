"""The handouts' rules tables: every row maps to its tests and a breaking mutant, or says plainly
that it is not graded (msda_labs.authoring.handout.rules_problems, part of sync --check)."""

import pytest
import yaml
from kit import MANIFEST, ROOT

from msda_labs.authoring import handout

README = """# Lab 99

## Rules

| rule | checked? |
|---|---|
| Keep the signature | yes: the tests call it |
| Loops are fine | not checked: your choice |

## Run it
"""


@pytest.fixture
def kit(tmp_path, monkeypatch):
    """A one-lab kit in ``tmp_path`` whose test collection is stubbed: tests ``test_a`` and
    ``test_b``, ``test_b`` marked with the ladder rule ``floor``."""
    (tmp_path / "lab-99-x").mkdir()
    (tmp_path / "lab-99-x" / "README.md").write_text(README)
    mutants = tmp_path / "tests" / "mutants"
    mutants.mkdir(parents=True)
    (mutants / "lab99.yaml").write_text("- id: renamed\n  replace: []\n")
    monkeypatch.setattr(handout, "collect_rules",
                        lambda lab_dir: ({"floor": ["test_b"]}, set()))
    monkeypatch.setattr(handout, "_test_names", lambda lab_dir: {"test_a", "test_b"})

    def problems(entries):
        (mutants / "rules.yaml").write_text(yaml.safe_dump({"lab99": entries}))
        return handout.rules_problems(tmp_path, [("lab99", "lab-99-x")])

    return problems


def test_rows_parse():
    rows = handout.rules_rows(README)
    assert rows == [("Keep the signature", "yes: the tests call it"),
                    ("Loops are fine", "not checked: your choice")]
    assert [handout.graded_claim(c) for _, c in rows] == [True, False]


def test_a_complete_map_passes(kit):
    assert kit([{"row": "Keep the", "tests": ["test_a"], "mutants": ["renamed"]},
                {"row": "Loops", "graded": False}]) == []
    assert kit([{"row": "Keep the", "ladder": ["floor"], "mutants": ["renamed"]},
                {"row": "Loops", "graded": False}]) == []


@pytest.mark.parametrize(("entries", "wanted"), [
    ([{"row": "Loops", "graded": False}], "0 entries"),
    ([{"row": "Keep the", "mutants": ["renamed"]}, {"row": "Loops", "graded": False}],
     "no test enforces it"),
    ([{"row": "Keep the", "tests": ["test_a"]}, {"row": "Loops", "graded": False}],
     "no mutant breaks it"),
    ([{"row": "Keep the", "tests": ["test_zz"], "mutants": ["renamed"]},
      {"row": "Loops", "graded": False}], "no test called test_zz"),
    ([{"row": "Keep the", "tests": ["test_a"], "mutants": ["gone"]},
      {"row": "Loops", "graded": False}], "no mutant gone"),
    ([{"row": "Keep the", "tests": ["test_a"], "mutants": ["renamed"]},
      {"row": "Loops", "tests": ["test_a"], "mutants": ["renamed"]}], "not graded"),
    ([{"row": "Keep the", "tests": ["test_a"], "mutants": ["renamed"]},
      {"row": "Loops", "graded": False}, {"row": "Stale row", "graded": False}],
     "matches no row"),
], ids=["row_without_entry", "no_test", "no_mutant", "unknown_test", "unknown_mutant",
        "ungraded_row_mapped_as_graded", "stale_entry"])
def test_each_gap_is_a_problem(kit, entries, wanted):
    found = kit(entries)
    assert any(wanted in p for p in found), found


def test_the_kit_handouts_map_completely():
    labs = [(lab.id, lab.folder) for lab in MANIFEST.labs if lab.built]
    assert handout.rules_problems(ROOT, labs) == []


def test_a_row_that_says_neither_is_a_problem(kit, tmp_path):
    (tmp_path / "lab-99-x" / "README.md").write_text(
        README.replace("| Loops are fine | not checked: your choice |",
                       "| Loops are fine | maybe |"))
    found = kit([{"row": "Keep the", "tests": ["test_a"], "mutants": ["renamed"]},
                 {"row": "Loops", "graded": False}])
    assert any("says neither" in p for p in found), found
