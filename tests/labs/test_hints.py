"""Every handout's hints escalate: for each task with code to write, a nudge, the idea,
then nearly the lines, each in its own ``<details>``, in that order; and every code line of a
"nearly the lines" hint is true for the chip (it occurs in one of the chip's lines)."""

import re

import pytest
from kit import MANIFEST, ROOT, chip_path, lab_ids

from msda_labs.authoring.handout import collect_tasks

LEVELS = ("Nudge", "Idea", "Nearly the lines")
LABS = lab_ids()


def _hints(lab: str) -> str:
    text = (ROOT / MANIFEST.lab(lab).folder / "README.md").read_text()
    assert "## Hints" in text, f"{lab}: the handout has no Hints section"
    return text.split("## Hints", 1)[1].split("\n## ", 1)[0]


def _by_task(hints: str) -> dict[str, list[tuple[str, str]]]:
    """{task id: [(summary, body), ...]} under each ``### Task X.Y`` heading."""
    found = {}
    for head, body in re.findall(r"^### Task (\S+)[^\n]*\n(.*?)(?=^### |\Z)", hints, re.S | re.M):
        found[head] = re.findall(r"<details><summary>(.*?)</summary>\n(.*?)</details>", body,
                                 re.S)
    return found


@pytest.mark.parametrize("lab", LABS)
def test_each_task_has_a_nudge_an_idea_and_nearly_the_lines(lab):
    chip = chip_path(lab).read_text()
    tasks = [t for t in collect_tasks(ROOT / MANIFEST.lab(lab).folder)
             if f"TODO(Task {t})" in chip]  # not 8.4 or 10.4: nothing to write there
    assert tasks, f"{lab}: no task with a TODO in the chip"
    found = _by_task(_hints(lab))
    for task in tasks:
        assert task in found, f"{lab}: no '### Task {task}' in the hints"
        summaries = [summary for summary, _ in found[task]]
        assert summaries == list(LEVELS), f"{lab} Task {task}: {summaries}"


@pytest.mark.parametrize("lab", LABS)
def test_nearly_the_lines_are_true_for_the_chip(lab):
    chip_lines = [line.strip() for line in chip_path(lab).read_text().splitlines()]
    for task, hints in _by_task(_hints(lab)).items():
        body = dict(hints).get("Nearly the lines", "")
        for block in re.findall(r"```python\n(.*?)```", body, re.S):
            for line in block.splitlines():
                code = line.split("  #", 1)[0].strip()
                if not code or code.startswith(("#", "...")):
                    continue
                assert any(code in chip for chip in chip_lines), \
                    f"{lab} Task {task}: the hint's line {code!r} is not in the chip"
