"""Regrade without grading: restore, lab detection, the GPU merge, the gradebook (cheap checks;
the end-to-end regrades are in test_exported_repos.py)."""

import csv
import json
import os
import shutil

import pytest
from classroom_kit import cheapest_lab

from msda_labs.classroom import regrade
from msda_labs.grading.judge import integrity
from msda_labs.grading.judge.results import ExerciseResult, GradeResult
from msda_labs.grading.judge.results import TestResult as Verdict

LAB = cheapest_lab().id


@pytest.fixture
def checkout(exports, tmp_path):
    return shutil.copytree(exports[LAB], tmp_path / "student")


def _work_tree_of(monkeypatch, checkout, exports, **options):
    """Regrade ``checkout`` without grading: (the work tree's files, {name: bytes of labNN.py},
    the result with its integrity and notes)."""
    seen = {}

    def fake(work, lab_id, **kwargs):
        seen["files"] = set(integrity.walk(work)[0])
        seen["module"] = (work / f"{lab_id}.py").read_bytes()
        return GradeResult(lab_id, stages=["cpu"])

    monkeypatch.setattr(regrade, "_grade_subprocess", fake)
    result = regrade.regrade_checkout(checkout, pristine=exports[LAB], lab_id=LAB, **options)
    return seen["files"], seen["module"], result


def test_the_work_tree_is_the_pristine_lab_and_the_module_alone(exports, checkout, monkeypatch):
    (checkout / f"{LAB}.py").write_text("# my work\n")
    (checkout / "my").mkdir()
    (checkout / "my" / "notes.py").write_text("# mine\n")
    shutil.rmtree(checkout / "tests")
    (checkout / "conftest.py").write_text("import os\n")
    (checkout / "numpy.py").write_text("x = 1\n")
    (checkout / "noxfile.py").write_text("# mine\n")
    (checkout / "meta-1.0.dist-info").mkdir()
    (checkout / "meta-1.0.dist-info" / "entry_points.txt").write_text("[pytest11]\nx = numpy\n")
    files, module, result = _work_tree_of(monkeypatch, checkout, exports)
    pristine = set(integrity.walk(exports[LAB])[0])
    assert files == pristine and module == b"# my work\n"
    info = result.integrity
    assert info["added"] == ["conftest.py", "meta-1.0.dist-info/entry_points.txt",
                             "my/notes.py", "numpy.py"]
    assert "noxfile.py" in info["tampered"] and any(t.startswith("tests/")
                                                      for t in info["tampered"])
    assert regrade.integrity.summary(info).startswith("modified: ")
    assert "| added: conftest.py" in regrade.integrity.summary(info)


@pytest.mark.parametrize("kind", ["missing", "symlink", "fifo", "folder"])
def test_a_module_that_is_not_a_plain_file_grades_the_starter(exports, checkout, monkeypatch,
                                                               tmp_path, kind):
    module = checkout / f"{LAB}.py"
    module.unlink()
    if kind == "symlink":
        (tmp_path / "elsewhere.py").write_text("# someone else's\n")
        module.symlink_to(tmp_path / "elsewhere.py")
    elif kind == "fifo":
        os.mkfifo(module)  # a reader that opened it the usual way would wait for ever
    elif kind == "folder":
        module.mkdir()
    files, data, result = _work_tree_of(monkeypatch, checkout, exports)
    assert data == (exports[LAB] / f"{LAB}.py").read_bytes()
    assert any("untouched starter" in note for note in result.notes), result.notes


def test_a_seed_file_others_can_read_is_refused(exports, checkout, monkeypatch, tmp_path):
    seed = tmp_path / "seed"
    seed.write_text("12345\n")
    seed.chmod(0o644)
    with pytest.raises(regrade.RegradeError, match="chmod 600"):
        _work_tree_of(monkeypatch, checkout, exports, seed_file=seed)
    monkeypatch.setenv("MSDA_GRADE_SEED_FILE", str(seed))
    with pytest.raises(regrade.RegradeError, match="can be read by other users"):
        _work_tree_of(monkeypatch, checkout, exports)
    seed.chmod(0o600)
    *_, result = _work_tree_of(monkeypatch, checkout, exports, seed_file=seed)
    assert any("secret seed" in note for note in result.notes)


def test_the_command_line_refuses_a_readable_seed_file(checkout, tmp_path, capsys):
    from msda_labs.cli import main

    seed = tmp_path / "seed"
    seed.write_text("12345\n")
    seed.chmod(0o640)
    assert main(["regrade", str(checkout), "--seed-file", str(seed)]) == 2
    err = capsys.readouterr().err
    assert "can be read by other users (mode 0640)" in err and f"chmod 600 {seed}" in err


def test_gradebook_rows_are_sealed_and_checked(tmp_path):
    result = GradeResult(LAB, stages=["cpu"], exercises=[
        ExerciseResult("1.1", "f", [Verdict("test_x", "passed", 2, 2)])])
    rows = [regrade.GradebookRow("ada", LAB, 2, 2, "clean", "abc", result=result).seal(),
            regrade.GradebookRow("bob", LAB, "", "", "not graded", "", "why").seal()]
    book = regrade.write_gradebook(rows, tmp_path / "gradebook.csv")
    listing = tmp_path / "regrade.json"
    listing.write_text(json.dumps(regrade.rows_json(rows)))
    assert regrade.verify_outputs(rows, book, listing) == []
    text = book.read_text()
    book.write_text(text.replace(f"bob,{LAB},,,", f"bob,{LAB},16,16,"))
    assert book.read_text() != text
    assert [p for p in regrade.verify_outputs(rows, book) if "bob" in p]
    forged = json.loads(listing.read_text())
    forged[0]["result"]["score"] = 99
    listing.write_text(json.dumps(forged))
    assert [p for p in regrade.verify_outputs(rows, json_path=listing) if "ada" in p]


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

    def fake_gpu(job):
        seen.update(lab_id=job.lab.id, tests=(job.lab.folder / "tests").is_dir(),
                    name=job.submission.name, seed=job.secret)
        return GradeResult(job.lab.id, stages=["gpu"], exercises=[
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
