"""Fixtures of the classroom tests: exports of every ready lab, a graded sample result."""

from __future__ import annotations

from pathlib import Path

import pytest
from classroom_kit import (  # noqa: F401  (re-exported for older imports)
    SCHEMAS,
    cheapest_lab,
    clean_env,
    grade_export,
    representative_lab,
    schema,
    validate,
)
from kit import MANIFEST, ROOT, built_labs, chip_path

from msda_labs.classroom.export import export_lab
from msda_labs.grading.judge.results import ExerciseResult, GradeResult, TestResult


@pytest.fixture(scope="session")
def exports(tmp_path_factory) -> dict[str, Path]:
    """{lab id: export folder} for every lab classroom.yml marks ready (read-only for tests)."""
    out = tmp_path_factory.mktemp("exports")
    return {lab.id: export_lab(MANIFEST, lab, out) for lab in built_labs()}


@pytest.fixture
def sample_result() -> GradeResult:
    """A result with every verdict, two tasks and a modified grading file."""
    result = GradeResult(lab="lab05", title="The forward kernel, correct", stages=["interpret"],
                         submission="lab05.py",
                         integrity={"checked": True, "modified": ["tests/test_lab05.py"]})
    result.exercises = [
        ExerciseResult("5.1", "msda_fwd", [
            TestResult("test_small", "passed", 2, 2, "", "interpret", 0.25),
            TestResult("test_ragged", "failed", 0, 3, "case B=1 Q=5: element [0, 3] 1.0 vs 2.0",
                       "interpret", 0.5),
        ]),
        ExerciseResult("5.2", "msda_fwd_levels", [
            TestResult("test_levels", "not_attempted", 0, 2, "Task 5.2: msda_fwd_levels"),
            TestResult("test_crash", "crashed", 0, 1, "the process died (SIGSEGV)"),
            TestResult("test_hang", "timeout", 0, 1, "ran past 120 s"),
            TestResult("test_err", "error", 0, 1, "IndexError: index 9 is out of bounds"),
        ]),
    ]
    return result


@pytest.fixture
def chip_of():
    return chip_path


@pytest.fixture(scope="session")
def kit_root() -> Path:
    return ROOT
