"""Keep generated parts of each lab in step with their single sources.

* the starter module ``lab-NN-*/labNN.py`` is the chip with its solutions stripped;
* the tasks table in the handout (between ``<!-- tasks:begin -->`` and ``<!-- tasks:end -->``)
  is built from the tests' ``task`` markers (points) and the chip's TODO comments (size hints);
* the handout's sample failures are what the grader reports for a planted bug
  (:mod:`msda_labs.authoring.samples`).

``python -m msda_labs sync`` rewrites both; ``--check`` only reports drift (exit 1).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path

from msda_labs.authoring.fences import strip
from msda_labs.authoring.samples import sync_samples

__all__ = ["collect_tasks", "collect_rules", "tasks_table", "sync_lab", "sync_ladder"]

BEGIN, END = "<!-- tasks:begin -->", "<!-- tasks:end -->"


class _Collector:
    def __init__(self):
        self.tasks: OrderedDict[str, list] = OrderedDict()
        self.rules: OrderedDict[str, list[str]] = OrderedDict()  # rule -> test function names
        self.gpu_tests: set[str] = set()

    def pytest_collection_finish(self, session):
        from msda_labs.grading.plugin import GRADE_KEY, is_gpu_test

        gs = session.config.stash[GRADE_KEY]
        for task_id, name in gs.tasks.items():
            self.tasks[task_id] = [name, 0, 0, False]
        for item in session.items:
            if item.nodeid in gs.points:
                task_id, points = gs.points[item.nodeid]
                entry = self.tasks[task_id]
                entry[1] += points
                entry[2] += 1
                if is_gpu_test(item):
                    entry[3] = True
                    self.gpu_tests.add(item.originalname)
                for mark in item.iter_markers("rule"):
                    for rule in mark.args:
                        names = self.rules.setdefault(rule, [])
                        if item.originalname not in names:
                            names.append(item.originalname)


def collect_tasks(lab_dir: Path) -> OrderedDict[str, list]:
    """{task id: [name, points, number of tests, has GPU tests]} from the lab's test markers."""
    return _collect(lab_dir).tasks


def collect_rules(lab_dir: Path) -> tuple[OrderedDict[str, list[str]], set[str]]:
    """({ladder rule: [test function, ...]}, the GPU-stage test functions) from the markers."""
    collector = _collect(lab_dir)
    return collector.rules, collector.gpu_tests


_COLLECTED: dict[Path, _Collector] = {}


def _collect(lab_dir: Path) -> _Collector:
    """One collection per lab folder per process (sync reads tasks and rules from it)."""
    key = Path(lab_dir).resolve()
    if key not in _COLLECTED:
        _COLLECTED[key] = _run_collection(key)
    return _COLLECTED[key]


def _run_collection(lab_dir: Path) -> _Collector:
    from msda_labs.grading.stage_run import collect

    collector = _Collector()
    code = collect(lab_dir, collector, "all")
    if code not in (0, 5):
        raise RuntimeError(f"collecting the tests of {lab_dir} failed (pytest exit {code})")
    return collector


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
        drift += sync_samples(lab_dir, lab_id, chip_text, readme, check=check)
    return drift


def ladder_cells(root: Path, labs) -> tuple[dict[tuple[str, str], list[str]], set[str]]:
    """{(rule, lab id): [test, ...]} and the GPU-stage tests, over ``labs`` ((id, folder) pairs)."""
    graded: dict[tuple[str, str], list[str]] = {}
    gpu: set[str] = set()
    for lab_id, folder in labs:
        rules, gpu_tests = collect_rules(Path(root) / folder)
        for rule, tests in rules.items():
            graded[(rule, lab_id)] = list(tests)
        gpu |= gpu_tests
    return graded, gpu


def sync_ladder(root: Path, labs, check: bool = False) -> tuple[list[str], list[str]]:
    """Rewrite the audit table of ``docs/ladder.md`` from the tests' rule markers.

    Returns (what differed, what is wrong with the cells: empty, contradictory, unknown).
    """
    from msda_labs.course import ladder

    wanted = [(lab_id, folder) for lab_id, folder in labs if lab_id in ladder.LABS]
    graded, gpu = ladder_cells(root, wanted)
    problems = ladder.cell_problems(graded) if len(wanted) == len(ladder.LABS) else []
    doc = Path(root) / ladder.DOC
    text = doc.read_text() if doc.is_file() else ""
    new = ladder.splice(text, ladder.render(graded, gpu))
    drift = []
    if new != text:
        drift.append(f"{doc} (ladder table)")
        if not check:
            doc.write_text(new)
    return drift, problems
