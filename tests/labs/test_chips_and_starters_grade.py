"""Quality bars 1 and 2: the untouched starter scores 0, all not attempted; the chip scores full.

The chip is graded as a student would hand it in from an editor that writes UTF-8 with a
byte-order mark and Windows line ends (CRLF), as some Windows editors do: the compiler reads that
file as the same program, so the judge must too (``grading.isolation.source``). The plain chip is
graded in every export (tests/classroom/test_exported_repos.py) and by the platforms' tests.
"""

import pytest
from kit import all_tests, chip_path, lab_ids, run_grade


@pytest.mark.parametrize("lab", lab_ids())
def test_starter_scores_zero_not_attempted(lab):
    result = run_grade(lab)
    assert result["max_score"] > 0
    assert result["score"] == 0, result["_stdout"]
    wrong = [(ex["id"], t["name"], t["status"]) for ex, t in all_tests(result)
             if t["status"] != "not_attempted"]
    assert not wrong, f"{lab} starter: tests that were not 'not_attempted': {wrong}"


@pytest.mark.parametrize("lab", lab_ids())
def test_chip_scores_full(lab, tmp_path):
    module = tmp_path / f"{lab}.py"
    text = chip_path(lab).read_bytes()
    assert b"\r" not in text, "the chip itself has CR line ends"
    module.write_bytes(b"\xef\xbb\xbf" + text.replace(b"\n", b"\r\n"))
    result = run_grade(lab, submission=module)
    failing = [(t["name"], t["status"], t["message"]) for _, t in all_tests(result)
               if t["status"] != "passed"]
    assert not failing, f"{lab} chip lost points: {failing}"
    assert result["score"] == result["max_score"] > 0
