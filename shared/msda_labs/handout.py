"""Keep generated parts of each lab in step with their single sources.

* the starter module ``lab-NN-*/labNN.py`` is the chip with its solutions stripped;
* the tasks table in the handout (between ``<!-- tasks:begin -->`` and ``<!-- tasks:end -->``)
  is built from the tests' ``task`` markers (points) and the chip's TODO comments (size hints).

``python -m msda_labs sync`` rewrites both; ``--check`` only reports drift (exit 1).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path

from msda_labs.solution import strip

__all__ = ["collect_tasks", "tasks_table", "sync_lab"]

BEGIN, END = "<!-- tasks:begin -->", "<!-- tasks:end -->"


class _Collector:
    def __init__(self):
        self.tasks: OrderedDict[str, list] = OrderedDict()

    def pytest_collection_finish(self, session):
        from msda_labs.grading.plugin import GRADE_KEY

        gs = session.config.stash[GRADE_KEY]
        for task_id, name in gs.tasks.items():
            self.tasks[task_id] = [name, 0, 0, False]
        for item in session.items:
            if item.nodeid in gs.points:
                task_id, points = gs.points[item.nodeid]
                entry = self.tasks[task_id]
                entry[1] += points
                entry[2] += 1
                if item.get_closest_marker("stage") is not None:
                    entry[3] = True


def collect_tasks(lab_dir: Path) -> OrderedDict[str, list]:
    """{task id: [name, points, number of tests, has GPU tests]} from the lab's test markers."""
    import os

    import pytest

    collector = _Collector()
    code = pytest.main([str(lab_dir / "tests"), "--collect-only", "-p", "no:terminal",
                        "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir", str(lab_dir),
                        "--msda-stage", "all"], plugins=[collector])
    if int(code) not in (0, 5):
        raise RuntimeError(f"collecting the tests of {lab_dir} failed (pytest exit {int(code)})")
    return collector.tasks


def _size_hints(chip_text: str) -> dict[str, str]:
    hints = {}
    for match in re.finditer(r"TODO\(Task ([0-9.]+)\):(.*?)\(about ([0-9]+(?:-[0-9]+)?) lines?\)",
                             chip_text, flags=re.S):
        hints.setdefault(match.group(1), match.group(3))
    return hints


def tasks_table(tasks, chip_text: str) -> str:
    hints = _size_hints(chip_text)
    lines = ["| Task | Exercise | Points | Tests | About |", "|---|---|---|---|---|"]
    for task_id, (name, points, count, gpu) in tasks.items():
        size = hints.get(task_id, "")
        if size:
            size += " line" if size == "1" else " lines"
        suffix = " (incl. GPU stage)" if gpu else ""
        lines.append(f"| {task_id} | `{name}` | {points}{suffix} | {count} | {size} |")
    total = sum(entry[1] for entry in tasks.values())
    lines.append(f"| | **Total** | **{total}** | | |")
    return "\n".join(lines)


def sync_lab(lab_dir: Path, lab_id: str, chip: Path, check: bool = False) -> list[str]:
    """Bring the starter and the handout's tasks table in line; returns what differed."""
    drift = []
    chip_text = chip.read_text()
    starter = lab_dir / f"{lab_id}.py"
    wanted = strip(chip_text, str(chip))
    if not starter.is_file() or starter.read_text() != wanted:
        drift.append(str(starter))
        if not check:
            starter.write_text(wanted)
    readme = lab_dir / "README.md"
    if readme.is_file():
        text = readme.read_text()
        if BEGIN in text and END in text:
            table = tasks_table(collect_tasks(lab_dir), chip_text)
            head, rest = text.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            new = f"{head}{BEGIN}\n{table}\n{END}{tail}"
            if new != text:
                drift.append(f"{readme} (tasks table)")
                if not check:
                    readme.write_text(new)
    return drift
