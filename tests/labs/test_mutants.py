"""Quality bar 3: every planted bug loses points, and the feedback names the mistake."""

from pathlib import Path

import pytest
from kit import (
    MANIFEST,
    ROOT,
    all_mutants,
    all_tests,
    chip_path,
    lab_ids,
    messages,
    mutants,
    run_grade,
)

from msda_labs.authoring.handout import collect_rules


def _enforcing_tests(lab_id: str) -> dict[str, list[str]]:
    """{rule: [test function, ...]} of ``lab_id``, from the tests' rule markers."""
    rules, _ = collect_rules(ROOT / MANIFEST.lab(lab_id).folder)
    return rules


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
    if mutant.expect:
        text = messages(result)
        assert mutant.expect.lower() in text.lower(), (
            f"mutant {mutant.id}: no message names {mutant.expect!r}; messages were:\n{text}")
