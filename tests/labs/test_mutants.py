"""Quality bar 3: every planted bug loses points, and the feedback names the mistake."""

from pathlib import Path

import pytest
from kit import all_mutants, chip_path, lab_ids, messages, mutants, run_grade


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
    if mutant.expect:
        text = messages(result)
        assert mutant.expect.lower() in text.lower(), (
            f"mutant {mutant.id}: no message names {mutant.expect!r}; messages were:\n{text}")
