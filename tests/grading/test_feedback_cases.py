"""Feedback that never blames correct code: small wrong submissions, graded for real.

Each case is a chip with one plausible mistake. The report must not explain the mistake with
advice about code the attempt got right (a wrong stride is not "an unmasked tail"; an overcount
in one task is not "behind" a crash in another), and must start where the mistake is: the
``start_here`` field of the JSON report, and the first line of the terminal report.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kit import MANIFEST, ROOT, chip_path, run_grade, starter_path

from msda_labs.grading.judge.annotations import annotation_lines, definitions
from msda_labs.grading.judge.dependencies import lab_dependencies
from msda_labs.grading.judge.render import render_terminal
from msda_labs.grading.judge.results import Evidence, ExerciseResult, GradeResult
from msda_labs.grading.judge.results import TestResult as Verdict


def _mutant(tmp_path: Path, lab: str, old: str, new: str) -> Path:
    source = chip_path(lab).read_text()
    assert source.count(old) == 1, f"{old!r} is not once in the {lab} chip"
    path = tmp_path / f"{lab}.py"
    path.write_text(source.replace(old, new))
    return path


def _messages(data: dict) -> str:
    return "\n".join(t["message"] for ex in data["exercises"] for t in ex["tests"])


def _causes(data: dict) -> dict[str, dict]:
    return {t["name"]: t["cause"] for ex in data["exercises"] for t in ex["tests"]}


_COPY_OFFS = "offs = offs_r[:, None] * C + offs_c[None, :]  # [BLOCK_R, BLOCK_C]"
_COPY_MASK = "mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)  # [BLOCK_R, BLOCK_C]"


def test_lab04_copy_with_row_stride_r_is_not_blamed_on_its_mask(tmp_path):
    """A row stride of R instead of C writes past the end and leaves in-bounds elements
    unwritten: an unmasked tail would leave them right, so the right mask is not blamed."""
    wrong = _mutant(tmp_path, "lab04", _COPY_OFFS,
                    _COPY_OFFS.replace("offs_r[:, None] * C", "offs_r[:, None] * R"))
    data = run_grade("lab04", submission=wrong, tasks=["4.1"])
    text = _messages(data) + data["_stdout"]
    assert data["score"] < data["max_score"]
    assert "unmasked tail" not in text and "offs_c < C" not in text
    assert data["start_here"]["task"] == "4.1" and data["start_here"]["cause"] == ""
    assert "no known mistake matches" in data["start_here"]["text"]
    assert data["_stdout"].splitlines()[1] == data["start_here"]["text"]


def test_lab04_copy_without_its_column_mask_is_an_unmasked_tail(tmp_path):
    """The control: a copy whose mask lacks offs_c < C keeps every in-bounds element right and
    writes past the end, and that is named an unmasked tail, where the report starts."""
    wrong = _mutant(tmp_path, "lab04", _COPY_MASK,
                    "mask = (offs_r[:, None] < R) & (offs_c[None, :] < BLOCK_C * 64)")
    data = run_grade("lab04", submission=wrong, tasks=["4.1"])
    assert data["start_here"]["task"] == "4.1"
    assert data["start_here"]["cause"] == "an unmasked tail"
    named = [c for c in _causes(data).values() if c.get("kind") == "named"]
    assert named and all(c["label"] == "an unmasked tail" for c in named)


def test_lab04_bilinear_with_block_d_as_row_stride_is_not_told_its_mask(tmp_path):
    wrong = _mutant(tmp_path, "lab04", "out_offs = offs_q[:, None] * D + d_row",
                    "out_offs = offs_q[:, None] * BLOCK_D + d_row")
    data = run_grade("lab04", submission=wrong, tasks=["4.3"])
    text = _messages(data) + data["_stdout"]
    assert data["score"] < data["max_score"]
    assert "mask_q[:, None] & mask_d[None, :]" not in text and "unmasked tail" not in text
    assert data["start_here"]["task"] == "4.3" and data["start_here"]["cause"] == ""


def test_lab03_overcount_is_not_put_behind_an_unrelated_crash(tmp_path):
    """Task 3.1 raises in efficiency; Task 3.2 (forward_min_bytes, which calls nothing of
    Task 3.1) overcounts. Neither is tied to the other; the report starts at the crash and
    lists the overcount as its own task."""
    source = chip_path("lab03").read_text()
    source = source.replace("delivered = sectors_touched(pattern) * SECTOR_BYTES",
                            "delivered = int('sectors') * SECTOR_BYTES")
    source = source.replace("return int(corners + params + output)",
                            "return int(corners + params + output + output)")
    wrong = tmp_path / "lab03.py"
    wrong.write_text(source)
    data = run_grade("lab03", submission=wrong, tasks=["3.1", "3.2"])
    assert "may be behind" not in data["_stdout"]
    causes = {c["task"]: c for c in _causes(data).values() if c}
    assert data["start_here"]["task"] == "3.1"
    assert "ValueError" in data["start_here"]["cause"]
    assert all(c["kind"] != "follows" for name, c in _causes(data).items()
               if c and name.startswith(("test_forward_min", "test_min")))
    assert "3.2" in causes


def test_lab01_one_bound_bug_starts_the_report_once(tmp_path):
    """An off-by-one bound in bilinear_sample (Task 1.1) raises at one line, in every test
    that reaches it: the report names it once."""
    wrong = _mutant(tmp_path, "lab01", "if 0 <= row < H and 0 <= col < W:",
                    "if 0 <= row <= H and 0 <= col <= W:")
    data = run_grade("lab01", submission=wrong)
    assert data["start_here"]["task"] == "1.1"
    assert data["start_here"]["causes"] == 1
    lines = data["_stdout"].splitlines()
    assert lines[1].startswith("start here: Task 1.1 (bilinear_sample): IndexError")
    assert sum(line.count("start here") for line in lines) == 1


@pytest.mark.parametrize(("lab", "tasks", "expected"), [
    ("lab01", {"1.1": "bilinear_sample", "1.2": "msda_naive_student"}, {"1.2": ["1.1"]}),
    ("lab09", {"9.4": "backward_signature", "9.5": "compile_backward"}, {"9.5": ["9.4"]}),
    ("lab04", {"4.1": "copy2d_kernel", "4.2": "gather_kernel", "4.3": "bilinear_kernel"}, {}),
])
def test_task_dependencies_are_read_from_the_chips(lab, tasks, expected):
    assert lab_dependencies(lab, tasks) == expected


def test_grading_writes_nothing_into_the_lab_folder(tmp_path):
    tests = ROOT / "lab-04-hello-triton" / "tests"
    cache = tests / "__pycache__"
    if cache.exists():
        for path in sorted(cache.iterdir()):
            path.unlink()
        cache.rmdir()
    run_grade("lab04", solution=True, tasks=["4.2"])
    assert not cache.exists()
    assert not (ROOT / "lab-04-hello-triton" / ".pytest_cache").exists()


def _task_result(lab: str, tasks: dict[str, str], failing: dict[str, list]) -> GradeResult:
    result = GradeResult(lab, depends=lab_dependencies(lab, tasks))
    for task, name in tasks.items():
        result.exercises.append(ExerciseResult(task, name, failing.get(task) or [
            Verdict(f"test_{task}", "passed", 1, 1)]))
    return result


def test_lab09_a_signature_bug_is_where_task_9_5_starts():
    """A wrong backward_signature (Task 9.4) makes compile_backward (Task 9.5), which calls
    it, fail too: 9.5 follows from 9.4 and the report starts at 9.4."""
    wrong = Evidence(function="compile_backward", case="the chip's kernel", wrong=2, total=4,
                     first_wrong="[1]", yours=0.0, reference=1.0)
    result = _task_result("lab09", {"9.4": "backward_signature", "9.5": "compile_backward"}, {
        "9.4": [Verdict("test_signature_orders_branches", "failed", 0, 2, "wrong order",
                        evidence=Evidence(function="backward_signature", first_wrong="[0]",
                                          wrong=1, total=3, yours=1.0, reference=2.0))],
        "9.5": [Verdict("test_compile_backward", "failed", 0, 2, "2 of 4 differ",
                        evidence=wrong)]})
    data = result.to_dict()
    assert data["start_here"]["task"] == "9.4"
    cause = data["exercises"][1]["tests"][0]["cause"]
    assert cause["kind"] == "follows" and cause["task"] == "9.4"
    assert "follows from Task 9.4 (backward_signature)" in render_terminal(result)


def test_lab06_annotation_sits_on_the_function_the_failing_test_exercised():
    lab = MANIFEST.lab("lab06")
    module = starter_path("lab06")
    result = _task_result("lab06", {"6.1": "msda_forward_chunked_kernel", "6.2": "autotune"}, {
        "6.2": [Verdict("test_autotuned_launch[BLOCK_Q=16]", "failed", 0, 2, "differ",
                        evidence=Evidence(function="msda_forward_autotuned", wrong=3, total=9,
                                          first_wrong="[0, 1]", yours=1.0, reference=2.0))]})
    out = annotation_lines(result, module, ROOT / lab.folder / "tests", "lab06.py")
    defs = definitions(module)
    assert f",line={defs['msda_forward_autotuned']}," in out[0]
    assert f",line={defs['forward_configs']}," not in out[0]
