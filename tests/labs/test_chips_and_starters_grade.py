"""Quality bars 1 and 2: the untouched starter scores 0, all not attempted; the chip scores full."""

import pytest
from kit import all_tests, lab_ids, run_grade


@pytest.mark.parametrize("lab", lab_ids())
def test_starter_scores_zero_not_attempted(lab):
    result = run_grade(lab)
    assert result["max_score"] > 0
    assert result["score"] == 0, result["_stdout"]
    wrong = [(ex["id"], t["name"], t["status"]) for ex, t in all_tests(result)
             if t["status"] != "not_attempted"]
    assert not wrong, f"{lab} starter: tests that were not 'not_attempted': {wrong}"


@pytest.mark.parametrize("lab", lab_ids())
def test_chip_scores_full(lab):
    result = run_grade(lab, solution=True)
    failing = [(t["name"], t["status"], t["message"]) for _, t in all_tests(result)
               if t["status"] != "passed"]
    assert not failing, f"{lab} chip lost points: {failing}"
    assert result["score"] == result["max_score"] > 0
