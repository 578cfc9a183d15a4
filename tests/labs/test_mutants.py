"""Quality bar 3: every planted bug loses points, and the feedback names the mistake."""

from pathlib import Path

import pytest
import yaml
from kit import (
    MANIFEST,
    MUTANTS,
    ROOT,
    all_mutants,
    all_tests,
    chip_path,
    lab_ids,
    messages,
    mutants,
    run_grade,
)

from msda_labs.authoring.handout import collect_rules, entry_tests, rules_map
from msda_labs.grading.judge.diagnosis import diagnose
from msda_labs.grading.judge.results import GradeResult


def _also_named(mutant) -> list[str]:
    """The other phrases under which the feedback may name ``mutant``'s mistake (``names:`` in
    its library entry: e.g. a store that ignores the query mask is also an unmasked tail)."""
    path, key = MUTANTS / f"{mutant.lab}.yaml", mutant.id
    if mutant.append is not None:  # a whole-submission mutant: whole.yaml, id without "whole_"
        path, key = MUTANTS / "whole.yaml", mutant.append
    for entry in (yaml.safe_load(path.read_text()) if path.is_file() else None) or []:
        if str(entry.get("id")) == key:
            return [str(n) for n in entry.get("names") or ()]
    return []


def wrong_explanations(mutant, result: dict) -> list[str]:
    """The named mistakes of ``result`` that are not ``mutant``'s: every mistake the feedback
    names where it starts (the report's "start here") must be the planted one, under its
    ``expect`` phrase or one of its ``names`` (a mutant that declares neither is not judged).
    Errors raised by the submission (a traceback's line) are not explanations."""
    accepted = [p.lower() for p in (mutant.expect, *_also_named(mutant)) if p]
    if not accepted:
        return []
    causes = diagnose(GradeResult.from_dict(result)).causes
    return [f"Task {c.task}: {c.says()}" for c in causes if not c.error
            and not any(p in f"{c.label} {c.meaning}".lower() for p in accepted)]


def _enforcing_tests(lab_id: str) -> dict[str, list[str]]:
    """{rule: [test function, ...]} of ``lab_id``, from the tests' rule markers."""
    rules, _ = collect_rules(ROOT / MANIFEST.lab(lab_id).folder)
    return rules


def _handout_rows(lab_id: str, mutant_id: str) -> list[tuple[str, list[str]]]:
    """[(row, its tests)] of the rows of ``lab_id``'s handout rules table that name
    ``mutant_id`` as breaking them (tests/mutants/rules.yaml)."""
    rows = []
    for entry in rules_map(ROOT).get(lab_id) or ():
        if mutant_id in (entry.get("mutants") or ()):
            rows.append((entry["row"], entry_tests(entry, _enforcing_tests(lab_id))))
    return rows


@pytest.mark.parametrize("lab", lab_ids())
def test_each_lab_has_a_mutant_library(lab):
    library = mutants(lab)
    assert len(library) >= 6, f"{lab}: {len(library)} mutants, at least 6 wanted"
    named = [m for m in library if m.expect]
    assert len(named) >= 4, f"{lab}: only {len(named)} mutants expect a named mistake"


@pytest.mark.parametrize("mutant", all_mutants(), ids=lambda m: f"{m.lab}-{m.id}")
def test_mutant_loses_points(mutant, tmp_path: Path):
    source = mutant.apply(chip_path(mutant.lab).read_text())
    path = tmp_path / f"{mutant.lab}.py"
    path.write_text(source)
    result = run_grade(mutant.lab, submission=path, tasks=mutant.tasks)
    assert result["score"] < result["max_score"], \
        f"mutant {mutant.id} ({mutant.why}) kept full marks"
    if mutant.rules:
        # The audit says which tests enforce each rule (their @pytest.mark.rule): a mutant that
        # breaks a rule must lose points in one of those, or the audit's claim is not proven.
        enforcing = _enforcing_tests(mutant.lab)
        lost = {test["name"].split("[")[0] for _, test in all_tests(result)
                if test["score"] < test["max_score"]}
        for rule in mutant.rules:
            assert lost & set(enforcing.get(rule, ())), (
                f"mutant {mutant.id} breaks {rule!r}, but none of the tests marked with that rule "
                f"in {mutant.lab} ({enforcing.get(rule, [])}) lost points; lost: {sorted(lost)}")
    # A handout's rules-table row that names this mutant as breaking it: the mutant loses points
    # in one of the tests the row says enforce it ("*": any test of the lab).
    lost = {test["name"].split("[")[0] for _, test in all_tests(result)
            if test["score"] < test["max_score"]}
    for row, tests in _handout_rows(mutant.lab, mutant.id):
        assert lost and ("*" in tests or lost & set(tests)), (
            f"mutant {mutant.id} breaks the handout's rule {row!r}, but none of its tests "
            f"({tests}) lost points; lost: {sorted(lost)}")
    if mutant.expect:
        text = messages(result)
        assert mutant.expect.lower() in text.lower(), (
            f"mutant {mutant.id}: no message names {mutant.expect!r}; messages were:\n{text}")
    # No explanation without evidence: nothing names a mistake the mutant does not make.
    wrong = wrong_explanations(mutant, result)
    assert not wrong, (f"mutant {mutant.id} ({mutant.why}): the feedback names mistakes it does "
                       f"not make: {wrong}")


def test_the_explanation_check_can_fail():
    """A report that names another mistake than the planted one is caught; the planted one, a
    declared other name, and an error's traceback line are not."""
    from msda_labs.grading.judge.results import ExerciseResult, TestResult
    from msda_labs.mistakes.forward import MISTAKES

    planted = {m.id: m for m in mutants("lab05")}

    def graded(message, status="failed"):
        from msda_labs.grading.judge.prose import read_old_messages

        result = GradeResult("lab05", exercises=[ExerciseResult("5.1", "load_point", [
            TestResult("test_x", status, 0, 1, message)])])
        # as the plugin records a test that explains itself in prose: its one named mistake
        return read_old_messages(result).to_dict()

    half = graded(f"1 of 3 elements differ; this is exactly the output of "
                  f"{MISTAKES['no_half_pixel']}")
    assert wrong_explanations(planted["swap_xy"], half) and \
        not wrong_explanations(planted["missing_half"], half)
    tail = graded("wrote 3 elements past the end; this is an unmasked tail: mask the store")
    assert not wrong_explanations(planted["store_ignores_query_mask"], tail)  # its names
    assert not wrong_explanations(planted["swap_xy"], graded(
        "NameError: name 'yy' is not defined (line 150 of lab05.py)", "error"))
