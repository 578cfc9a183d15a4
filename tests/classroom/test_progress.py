"""`python -m msda_labs progress` (nox -s progress): one learner's ladder, cached by the hashes of
what a row depends on. One real lab is graded (lab 03, numpy only, a few seconds) in a scratch
checkout; everything else runs on fake results and cache hits."""

import json
import shutil
from pathlib import Path

import pytest
from kit import MANIFEST, ROOT

from msda_labs.classroom import progress
from msda_labs.course.manifest import load_manifest
from msda_labs.flow import chip_path


def _lab_dir(tmp_path, source):
    lab = tmp_path / "lab-10-x"
    (lab / "tests").mkdir(parents=True)
    (lab / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    (lab / "lab10.py").write_text(source)
    return lab


def test_runs_on_names_theirs_or_the_chip(tmp_path):
    lab = _lab_dir(tmp_path, 'from msda_labs.student.earlier import load\n'
                   'fwd, _ = load(6, "msda_forward_autotuned")\n'
                   'bwd, _ = load(8, "msda_backward")\n'
                   'sw = load(9, "use_fp32_grad_accum")\n')
    (lab / "my").mkdir()
    (lab / "my" / "lab08.py").write_text("def msda_backward(*a):\n    pass\n")
    (lab / "my" / "lab09.py").write_text("x = 1\n")
    assert progress.runs_on(lab / "lab10.py", lab, done={"lab06"}) == [
        "lab06: chip (yours is done: copy it to my/lab06.py)",
        "lab08: yours (my/lab08.py)",
        "lab09: chip (my/lab09.py lacks use_fp32_grad_accum)",
    ]
    assert progress.runs_on(lab / "lab10.py", lab)[0] == "lab06: chip"


def test_the_real_lab10_runs_on_three_earlier_labs():
    lab = MANIFEST.lab("lab10")
    where = progress.runs_on(ROOT / lab.folder / "lab10.py", ROOT / lab.folder)
    assert [w.split(":")[0] for w in where] == ["lab06", "lab08", "lab09"]


def test_cache_key_follows_the_module_its_my_files_and_the_tests(tmp_path):
    lab = _lab_dir(tmp_path, "x = 1\n")
    module = lab / "lab10.py"
    first = progress.cache_key(module, lab)
    assert progress.cache_key(module, lab) == first
    (lab / "notes.txt").write_text("unrelated")
    assert progress.cache_key(module, lab) == first
    module.write_text("x = 2\n")
    second = progress.cache_key(module, lab)
    assert second != first
    (lab / "my").mkdir()
    (lab / "my" / "lab06.py").write_text("y = 1\n")
    third = progress.cache_key(module, lab)
    assert third != second
    (lab / "tests" / "test_x.py").write_text("def test_y():\n    pass\n")
    assert progress.cache_key(module, lab) != third


def _grade(*exercises):
    data = {"score": 0, "max_score": 0, "exercises": []}
    for ex_id, score, top, status in exercises:
        data["exercises"].append({"id": ex_id, "name": f"f{ex_id}", "score": score,
                                  "max_score": top, "tests": [{"status": status}]})
        data["score"] += score
        data["max_score"] += top
    return data


def test_status_and_next_task_from_a_grade():
    assert progress._from_grade(_grade(("4.1", 5, 5, "passed"), ("4.2", 6, 6, "passed"))) == \
        (11, 11, "done", "")
    assert progress._from_grade(_grade(("4.1", 5, 5, "passed"), ("4.2", 2, 6, "failed"),
                                       ("4.3", 0, 7, "not_attempted"))) == \
        (7, 18, "in progress", "Task 4.2 `f4.2` (2/6)")
    assert progress._from_grade(_grade(("4.1", 0, 5, "not_attempted"))) == \
        (0, 5, "not started", "Task 4.1 `f4.1` (0/5)")
    assert progress._from_grade(_grade(("4.1", 0, 5, "failed")))[2] == "in progress"
    # the GPU points the handout counts for a task, next to its CPU points (one total)
    with_gpu = {**_grade(("5.7", 0, 3, "failed")), "gpu_points": {"5.7": 2}}
    assert progress._from_grade(with_gpu)[3] == "Task 5.7 `f5.7` (0/3, +2 on the GPU)"


def _scratch_checkout(tmp_path, lab_id):
    """A checkout holding one lab folder and the manifest; returns (manifest, lab dir)."""
    lab = MANIFEST.lab(lab_id)
    shutil.copy(ROOT / "classroom.yml", tmp_path / "classroom.yml")
    shutil.copytree(ROOT / lab.folder, tmp_path / lab.folder,
                    ignore=shutil.ignore_patterns("__pycache__", "my", ".pytest_cache"))
    return load_manifest(tmp_path / "classroom.yml"), tmp_path / lab.folder


def test_a_cached_row_is_not_graded_again(tmp_path, monkeypatch):
    manifest, lab_dir = _scratch_checkout(tmp_path, "lab04")
    (lab_dir / "lab04.py").write_text((lab_dir / "lab04.py").read_text() + "\n# my edit\n")
    key = progress.cache_key(lab_dir / "lab04.py", lab_dir)
    (tmp_path / ".progress").mkdir()
    (tmp_path / ".progress" / "lab04.json").write_text(json.dumps(
        {"key": key, "row": [7, 18, "in progress", "Task 4.2 `f` (0/6)"]}))

    def no_grading(*args, **kwargs):
        raise AssertionError("graded although the cache holds this exact module")

    monkeypatch.setattr(progress, "_grade", no_grading)
    [row] = progress.ladder_progress(manifest, ["lab04"])
    assert (row.score, row.max_score, row.status, row.how) == (7, 18, "in progress", "cached")
    # Changing the module invalidates the entry: the (fake) grader runs.
    (lab_dir / "lab04.py").write_text((lab_dir / "lab04.py").read_text() + "# again\n")
    monkeypatch.setattr(progress, "_grade", lambda *a: _grade(("4.1", 5, 5, "passed")))
    [row] = progress.ladder_progress(manifest, ["lab04"])
    assert (row.score, row.status) == (5, "done") and row.how.startswith("graded now")


def test_an_untouched_starter_is_not_graded(tmp_path, monkeypatch):
    manifest, lab_dir = _scratch_checkout(tmp_path, "lab03")
    monkeypatch.setattr(progress, "_grade", lambda *a: pytest.fail("graded a starter"))
    [row] = progress.ladder_progress(manifest, ["3"])
    assert (row.score, row.status, row.how) == (0, "not started", "untouched starter (not graded)")
    assert row.max_score > 0 and row.next_task.startswith("Task 3.1 `sectors_touched")


def test_one_real_grade_then_a_cache_hit_and_the_page(tmp_path):
    manifest, lab_dir = _scratch_checkout(tmp_path, "lab03")
    [starter] = progress.ladder_progress(manifest, ["lab03"])  # the maximum, from the markers
    top = starter.max_score
    shutil.copy(chip_path("lab03"), lab_dir / "lab03.py")
    [row] = progress.ladder_progress(manifest, ["lab03"])
    assert (row.score, row.max_score, row.status, row.next_task) == (top, top, "done", "")
    assert row.how.startswith("graded now")
    [again] = progress.ladder_progress(manifest, ["lab03"])
    assert again.how == "cached" and again.score == top
    table = progress.render_table([again])
    assert f"| lab03 | The machine | {top}/{top} | done" in table
    page = progress.write_html([again], tmp_path / "out" / "progress.html").read_text()
    assert '<html lang="en">' in page and "<caption>" in page and 'scope="col"' in page
    assert f"{top}/{top}" in page and "status-done" in page


def test_the_page_escapes_what_it_shows(tmp_path):
    row = progress.LabProgress("lab04", "<b>Hello</b>", 0, 5, "not started", "Task 4.1 `<x>`")
    page = progress.write_html([row], Path(tmp_path) / "p.html").read_text()
    assert "<b>Hello</b>" not in page and "&lt;b&gt;Hello&lt;/b&gt;" in page
