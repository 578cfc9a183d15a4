"""Regrade without grading: restore, lab detection, the GPU merge, the gradebook (cheap checks;
the end-to-end regrades are in test_exported_repos.py)."""

import csv
import shutil

import pytest
from classroom_kit import cheapest_lab

from msda_labs.classroom import regrade
from msda_labs.grading import integrity
from msda_labs.grading.results import ExerciseResult, GradeResult
from msda_labs.grading.results import TestResult as Verdict

LAB = cheapest_lab().id


@pytest.fixture
def checkout(exports, tmp_path):
    return shutil.copytree(exports[LAB], tmp_path / "student")


def test_restore_replaces_every_grading_file_and_keeps_student_work(exports, checkout):
    (checkout / f"{LAB}.py").write_text("# my work\n")
    (checkout / "my").mkdir()
    (checkout / "my" / "notes.py").write_text("# mine\n")
    shutil.rmtree(checkout / "tests")
    (checkout / "conftest.py").write_text("import os\n")
    (checkout / "numpy.py").write_text("x = 1\n")
    (checkout / "noxfile.py").write_text("# mine\n")
    notes = regrade.restore(checkout, exports[LAB], LAB)
    assert notes == []
    assert integrity.compare_trees(checkout, exports[LAB])["modified"] == []
    assert (checkout / f"{LAB}.py").read_text() == "# my work\n"
    assert (checkout / "my" / "notes.py").is_file()
    assert not (checkout / "conftest.py").exists() and not (checkout / "numpy.py").exists()


def test_restore_grades_the_starter_when_the_module_is_gone(exports, checkout):
    (checkout / f"{LAB}.py").unlink()
    notes = regrade.restore(checkout, exports[LAB], LAB)
    assert notes and "untouched starter" in notes[0]
    assert (checkout / f"{LAB}.py").read_text() == (exports[LAB] / f"{LAB}.py").read_text()


def test_detect_lab(tmp_path, checkout):
    assert regrade.detect_lab(checkout) == LAB
    assert regrade.detect_lab(checkout, "7") == "lab07"
    assert regrade.detect_lab(checkout, "lab-07-the-other-direction") == "lab07"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(regrade.RegradeError, match="no labNN.py"):
        regrade.detect_lab(empty)


def test_gpu_stage_is_merged_into_the_cpu_result(exports, checkout, monkeypatch):
    from msda_labs.gpu import runner

    cpu = GradeResult(LAB, stages=["cpu"], exercises=[
        ExerciseResult("1.1", "f", [Verdict("test_cpu", "passed", 2, 2)])])
    seen = {}

    def fake_gpu(lab_id, lab_dir, submission, *, timeout=None, seed=None):
        seen.update(lab_id=lab_id, tests=(lab_dir / "tests").is_dir(), name=submission.name,
                    seed=seed)
        return GradeResult(lab_id, stages=["gpu"], exercises=[
            ExerciseResult("1.1", "f", [Verdict("test_gpu", "failed", 0, 3, "slow")])])

    monkeypatch.setattr(regrade, "_grade_subprocess", lambda *a, **k: cpu)
    monkeypatch.setattr(runner, "run_gpu_stage", fake_gpu)
    result = regrade.regrade_checkout(checkout, pristine=exports[LAB], gpu=True, seed=5)
    assert seen == {"lab_id": LAB, "tests": True, "name": f"{LAB}.py", "seed": "5"}
    assert result.stages == ["cpu", "gpu"]
    assert (result.score, result.max_score) == (2, 5)
    assert any("secret seed" in n for n in result.notes)


def test_gradebook_columns_and_prefix(tmp_path):
    rows = [regrade.GradebookRow("ada", LAB, 3, 4, "clean", "abc"),
            regrade.GradebookRow("grace", "", "", "", "not graded", "", "no labNN.py")]
    path = regrade.write_gradebook(rows, tmp_path / "g.csv")
    lines = list(csv.reader(path.open()))
    assert lines[0] == ["student", "lab", "score", "max", "integrity", "commit", "note"]
    assert lines[1] == ["ada", LAB, "3", "4", "clean", "abc", ""]
    assert regrade._student("lab-05-fwd-ada", "lab-05-fwd") == "ada"
    assert regrade._student("ada", None) == "ada"
