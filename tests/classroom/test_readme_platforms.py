"""The exported README says truthfully where each lab runs."""

import re

import pytest
from kit import MANIFEST, ROOT

from msda_labs.classroom import workflows
from msda_labs.classroom.export import platform_note

TRITON_STAGES = {"interpret", "aot", "gpu"}


def _triton_pinned_for_linux_only() -> bool:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.startswith("triton=="):
            return 'platform_system == "Linux"' in line
    return False


@pytest.mark.parametrize("lab", MANIFEST.labs, ids=lambda lab: lab.id)
def test_platform_note_follows_the_stages(lab):
    note = platform_note(lab)
    uses_triton = any(stage.name in TRITON_STAGES for stage in lab.stages)
    assert "Windows" in note and "WSL2" in note, note
    if uses_triton:
        assert _triton_pinned_for_linux_only(), "requirements.txt no longer pins triton to Linux"
        assert "Linux on x86-64" in note and "Codespace" in note
        assert "macOS (Python" not in note, "a Triton lab cannot run natively on macOS"
    else:
        assert "Linux, macOS (Python 3.11+) | runs natively" in note
    assert ("needs a CUDA GPU" in note) == lab.has_gpu


def test_cpu_and_triton_labs_split_as_the_course_says():
    cpu_only = [lab.number for lab in MANIFEST.labs
                if all(stage.name == "cpu" for stage in lab.stages)]
    assert cpu_only == [0, 1, 2, 3, 7]


def test_template_no_longer_claims_native_windows():
    text = workflows.template("readme-start.md")
    assert "Linux or Windows" not in text
    assert "@@PLATFORM@@" in text
    filled = workflows.fill(text, LAB="lab05", BY_HAND=".venv/bin/python lab05.py",
                            COURSE_TITLE="t",
                            PLATFORM=platform_note(MANIFEST.lab("lab05")),
                            WHEN_GRADED=workflows.when_graded(MANIFEST, MANIFEST.lab("lab05")))
    assert not re.search(r"@@[A-Z_]+@@", filled)
    assert "| Linux on x86-64 (Python 3.11+) |" in filled
