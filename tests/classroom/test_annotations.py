"""GitHub annotations of a grading run: the def line of the graded function (found by reading
source, never importing it), one per exercise, errors for lost points (cause first: see
tests/grading/test_diagnosis.py), notices for exercises not attempted, GitHub's per-step cap,
escaping; and the job summary's table, the terminal's rows and feedback lines."""

from __future__ import annotations

import json
import subprocess
import sys

from kit import MANIFEST, ROOT, chip_path, mutants, starter_path

from msda_labs.grading.judge.annotations import (
    annotation_lines,
    definitions,
    escape_property,
    graded_functions,
)
from msda_labs.grading.judge.render import render_markdown, render_terminal
from msda_labs.grading.judge.results import ExerciseResult, GradeResult
from msda_labs.grading.judge.results import TestResult as Verdict


def _lab05_result() -> GradeResult:
    return GradeResult("lab05", "The forward kernel, correct", exercises=[
        ExerciseResult("5.1", "msda_forward_kernel", [
            Verdict("test_kernel_matches_reference[single]", "failed", 0, 2,
                       "x and y swapped: element [0, 1] 1.0 vs 2.0"),
            Verdict("test_msda_forward_derives_level_starts", "passed", 1, 1)]),
        ExerciseResult("5.2", "query tiles and masks", [
            Verdict("test_store_masks_the_query_tail", "failed", 0, 2, "unmasked tail"),
            Verdict("test_any_block_q[single-1]", "crashed", 0, 1, "the process died")]),
        ExerciseResult("5.3", "fp32 accumulation", [
            Verdict("test_accumulates_in_fp32", "not_attempted", 0, 3, "")]),
    ])


def test_exercises_point_at_the_def_line_of_the_function_they_grade():
    lab = MANIFEST.lab("lab05")
    module = starter_path("lab05")
    lines = module.read_text().splitlines()
    where = graded_functions(_lab05_result(), module, ROOT / lab.folder / "tests")
    # 5.1 names the kernel; 5.2 and 5.3 name no function: their tests launch the kernel
    assert {k: name for k, (name, _) in where.items()} == {
        "5.1": "msda_forward_kernel", "5.2": "msda_forward_kernel", "5.3": "msda_forward_kernel"}
    line = where["5.1"][1]
    assert lines[line - 1].startswith("def msda_forward_kernel(")
    assert definitions(module)["msda_forward_kernel"] == line


def test_one_annotation_per_exercise_in_task_order_when_no_mistake_is_named():
    lab = MANIFEST.lab("lab05")
    out = annotation_lines(_lab05_result(), starter_path("lab05"), ROOT / lab.folder / "tests",
                           "lab05.py")
    assert [line.split(" ", 1)[0] for line in out] == ["::error", "::error", "::notice"]
    assert "title=Task 5.1 msda_forward_kernel (1/3 pts)::" in out[0]
    assert out[0].endswith("x and y swapped: element [0, 1] 1.0 vs 2.0")
    assert "title=Task 5.2 query tiles and masks (0/3 pts) in msda_forward_kernel" in out[1]
    assert out[1].endswith("::FAILED: test_store_masks_the_query_tail: unmasked tail")
    assert out[2].startswith("::notice file=lab05.py,line=") and "not attempted" in out[2]


def test_annotations_respect_the_cap_and_escape():
    exercises = [ExerciseResult(f"9.{i}", f"f{i}, g", [Verdict("t", "failed", 0, 1,
                                                                   "a: b, 100%\nnext")])
                 for i in range(12)]
    out = annotation_lines(GradeResult("lab09", exercises=exercises), chip_path("lab09"),
                           None, "lab09.py", per_kind=10)
    assert len([x for x in out if x.startswith("::error ")]) == 10
    assert out[-1].startswith("2 more exercise(s) did not pass")
    assert "%2C" in out[0] and "a: b, 100%25%0Anext" in out[0]
    assert escape_property("Task 1.1 a: b, c") == "Task 1.1 a%3A b%2C c"


def test_grade_prints_the_annotations_of_a_broken_lab05(tmp_path):
    planted = mutants("lab05")[0]
    broken = tmp_path / "lab05.py"
    broken.write_text(planted.apply(chip_path("lab05").read_text()))
    proc = subprocess.run([sys.executable, "-m", "msda_labs", "grade", "lab05", "--submission",
                           str(broken), "--annotations", "--task", planted.tasks[0],
                           "--json", str(tmp_path / "g.json")], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    errors = [line for line in proc.stdout.splitlines() if line.startswith("::error ")]
    line = definitions(broken)["msda_forward_kernel"]
    assert errors and errors[0].startswith(f"::error file=lab05.py,line={line},title=Task "
                                           f"{planted.tasks[0]} ")
    assert planted.expect in proc.stdout
    assert json.loads((tmp_path / "g.json").read_text())["lab"] == "lab05"


def test_job_summary_shows_the_terminal_rows_and_feedback():
    result = _lab05_result()
    terminal, markdown = render_terminal(result), render_markdown(result)
    for ex in result.exercises:
        assert f"| {ex.id} | `{ex.name}` | {ex.score}/{ex.max_score} |" in markdown
    for line in terminal.splitlines():
        if line.startswith("      "):  # a feedback line under an exercise
            assert f"`{line.strip()}`" in markdown
    assert "x and y swapped" in markdown and "| | **Total** | **1/9** | | |" in markdown
