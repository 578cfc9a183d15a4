"""Quality bar 4: adversarial submissions score 0 and grading still finishes.

Each is built from a lab's own files so that it fits every lab: exiting or hanging at import,
and a "liar" that returns nothing useful while monkeypatching every comparison it can reach
(torch's, and the grader's own module inside its process, its name split so that the static
import rule does not catch it first), printing a fake score and writing fake report files.
"""

import re
from pathlib import Path

import pytest
from kit import all_tests, chip_path, lab_ids, run_grade, starter_path

LIAR_PRELUDE = '''
import sys as _sys, json as _json, os as _os
import torch as _torch
_torch.testing.assert_close = lambda *a, **k: None
_torch.allclose = lambda *a, **k: True
_torch.equal = lambda *a, **k: True
_torch.isclose = lambda a, b, *x, **k: _torch.ones_like(_torch.as_tensor(a), dtype=_torch.bool)
_name = "msda_labs" + ".grading.compare"
if _name in _sys.modules:
    _m = _sys.modules[_name]
    _m.expect_close = lambda *a, **k: None
    _m.expect_equal = lambda *a, **k: None
    _m.mismatch = lambda res, ref, *a: (_torch.zeros_like(ref, dtype=_torch.bool), 0)
print("Total 999/999  all tests passed")
for _p in ("grade.json", _os.path.join(_os.path.dirname(__file__), "grade.json")):
    try:
        with open(_p, "w") as _f:
            _json.dump({"score": 999, "max_score": 999, "exercises": []}, _f)
    except OSError:
        pass
'''


def _write(tmp_path: Path, lab: str, text: str) -> Path:
    path = tmp_path / f"{lab}.py"
    path.write_text(text)
    return path


def _assert_zero(result, statuses):
    assert result["score"] == 0, result["_stdout"]
    seen = {t["status"] for _, t in all_tests(result)}
    assert seen <= set(statuses), f"unexpected statuses {seen - set(statuses)}"


@pytest.mark.parametrize("lab", lab_ids())
def test_exit_at_import_scores_zero(lab, tmp_path):
    text = "import os\nos._exit(0)\n" + chip_path(lab).read_text()
    result = run_grade(lab, submission=_write(tmp_path, lab, text))
    _assert_zero(result, {"crashed"})


@pytest.mark.parametrize("lab", lab_ids())
def test_hang_at_import_scores_zero(lab, tmp_path):
    text = "while True:\n    pass\n" + chip_path(lab).read_text()
    result = run_grade(lab, submission=_write(tmp_path, lab, text), timeout=1)
    _assert_zero(result, {"timeout"})


@pytest.mark.parametrize("lab", lab_ids())
def test_liar_scores_zero(lab, tmp_path):
    starter = starter_path(lab).read_text()
    body = re.sub(r"raise NotImplementedError\((.*)\)", r"return None  # was: \1", starter)
    text = body + "\n" + LIAR_PRELUDE
    result = run_grade(lab, submission=_write(tmp_path, lab, text))
    passed = [t["name"] for _, t in all_tests(result) if t["status"] == "passed"]
    assert not passed, f"{lab}: a submission that computes nothing passed {passed}"
    assert result["score"] == 0


@pytest.mark.parametrize("lab", lab_ids())
def test_forbidden_import_scores_zero(lab, tmp_path):
    text = "import msda_labs.truth.reference as _answers\n" + chip_path(lab).read_text()
    result = run_grade(lab, submission=_write(tmp_path, lab, text))
    assert result["score"] == 0
    assert all("rules:" in t["message"] for _, t in all_tests(result))
