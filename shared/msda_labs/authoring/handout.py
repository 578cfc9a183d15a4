"""Keep generated parts of each lab in step with their single sources.

* the starter module ``lab-NN-*/labNN.py`` is the chip with its solutions stripped;
* the tasks table in the handout (between ``<!-- tasks:begin -->`` and ``<!-- tasks:end -->``)
  is built from the tests' ``task`` markers (points) and the chip's TODO comments (size hints);
* the handout's sample failures are what the grader reports for a planted bug
  (:mod:`msda_labs.authoring.samples`);
* the handout's commands (between ``<!-- run:begin -->`` and ``<!-- run:end -->``): how to grade
  the lab and how to run its module by hand, in the lab environment (:func:`by_hand_command`, the
  one place that spells that command; the exported README's "Getting started" uses it too).

``python -m msda_labs sync`` rewrites them; ``--check`` only reports drift (exit 1). Both also
check the handouts' rules tables (:func:`rules_problems`): every row maps, in
``tests/mutants/rules.yaml``, to the tests that enforce it and a mutant that breaks it, or says
plainly that it is not graded.
"""

from __future__ import annotations

import re
import textwrap
from collections import OrderedDict
from pathlib import Path

from msda_labs.authoring.fences import strip
from msda_labs.authoring.samples import sync_samples
from msda_labs.labenv import ENV_DIR
from msda_labs.student.selfcheck import has_big

__all__ = ["collect_tasks", "collect_rules", "tasks_table", "by_hand_command", "run_block",
           "sync_lab", "sync_ladder", "rules_rows", "rules_problems"]

BEGIN, END = "<!-- tasks:begin -->", "<!-- tasks:end -->"
RUN_BEGIN, RUN_END = "<!-- run:begin -->", "<!-- run:end -->"


class _Collector:
    def __init__(self):
        self.tasks: OrderedDict[str, list] = OrderedDict()
        self.rules: OrderedDict[str, list[str]] = OrderedDict()  # rule -> test function names
        self.gpu_tests: set[str] = set()
        self.names: list[str] = []  # every graded test function, in order

    def pytest_collection_finish(self, session):
        from msda_labs.grading.judge.plugin import GRADE_KEY, is_gpu_test

        gs = session.config.stash[GRADE_KEY]
        for task_id, name in gs.tasks.items():
            self.tasks[task_id] = [name, 0, 0, False]
        for item in session.items:
            if item.nodeid in gs.points:
                if item.originalname not in self.names:
                    self.names.append(item.originalname)
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
    from msda_labs.grading.judge.stage_run import collect

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


def by_hand_command(lab_id: str) -> str:
    """The command that runs ``labNN.py`` by hand, at the root of the lab's repository: the
    interpreter of the lab environment that the first ``nox -s labNN`` builds there
    (:mod:`msda_labs.labenv`), which has the pinned torch and triton and this kit's package. A
    bare ``python labNN.py`` in another environment stops at ``No module named 'msda_labs'``."""
    return f"{ENV_DIR}/bin/python {lab_id}.py"


def run_block(lab_id: str, tasks) -> str:
    """The handout's commands: install nox, grade, grade one task (the first), the GPU stage
    where a task has GPU tests, and the run by hand; then where that interpreter comes from.
    ``tasks`` is :func:`collect_tasks`'s mapping."""
    gpu = any(entry[3] for entry in tasks.values())
    first, (name, *_) = next(iter(tasks.items()))
    rows = [("pip install nox", "once"),
            (f"nox -s {lab_id}", ("grade the CPU stages" if gpu else "grade every task")
             + f" (the first run builds {ENV_DIR})"),
            (f"nox -s {lab_id} -- --task {first}", f"only Task {first} ({name})")]
    if gpu:
        rows.append((f"nox -s {lab_id}-gpu",
                     "the GPU stage: local CUDA, else Modal with your own account"))
    rows.append((by_hand_command(lab_id), "try your functions on small examples (not the grade)"))
    if has_big(int(lab_id[3:])):
        rows.append((f"{by_hand_command(lab_id)} --big", "and on its cases of size and precision"))
    width = max(len(command) for command, _ in rows) + 2
    commands = "\n".join(f"{command:<{width}}# {comment}" for command, comment in rows)
    where = (f"`{ENV_DIR}` is the lab environment, at the root of this repository: the first "
             f"`nox -s {lab_id}` builds it (the pinned torch and triton, and the kit's "
             f"`msda_labs`), later runs reuse it. A bare `python {lab_id}.py` in another "
             f"environment stops at `No module named 'msda_labs'`. With "
             f"`source {ENV_DIR}/bin/activate` first, `python {lab_id}.py` works too; to work in "
             f"an environment of your own instead, run `pip install -r requirements.txt -e "
             f"shared` in it once.")
    wrapped = _wrap_keeping_code(where)
    return f"```bash\n{commands}\n```\n\n{wrapped}"


def _wrap_keeping_code(text: str, width: int = 100) -> str:
    """``text`` wrapped at ``width`` columns, never inside a `code span`."""
    spans = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", "\0"), text)
    wrapped = textwrap.fill(spans, width=width, break_long_words=False, break_on_hyphens=False)
    return wrapped.replace("\0", " ")


def _replace_region(text: str, begin: str, end: str, body: str) -> str:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def sync_lab(lab_dir: Path, lab_id: str, chip: Path, check: bool = False) -> list[str]:
    """Bring the starter, the handout's tasks table and its commands in line; returns what
    differed."""
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
            new = _replace_region(text, BEGIN, END, table)
            if new != text:
                drift.append(f"{readme} (tasks table)")
                if not check:
                    readme.write_text(new)
                text = new
        if RUN_BEGIN in text and RUN_END in text:
            new = _replace_region(text, RUN_BEGIN, RUN_END,
                                  run_block(lab_id, collect_tasks(lab_dir)))
            if new != text:
                drift.append(f"{readme} (commands)")
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

    graded, gpu = ladder_cells(root, labs)
    problems = ladder.cell_problems(graded)
    # Every row of every handout's rules table maps to a test and a breaking mutant.
    problems += rules_problems(root, labs)
    doc = Path(root) / ladder.DOC
    text = doc.read_text() if doc.is_file() else ""
    new = ladder.splice(text, ladder.render(graded, gpu))
    drift = []
    if new != text:
        drift.append(f"{doc} (ladder table)")
        if not check:
            doc.write_text(new)
    return drift, problems


# -- the handouts' rules tables -------------------------------------------------------------------
RULES_MAP = Path("tests") / "mutants" / "rules.yaml"
# How a rules-table row says that it is not graded (the start of its "checked?" cell).
NOT_GRADED = ("not checked", "nothing to check", "not graded")
GRADED = ("yes", "partly", "only in the gpu stage")


def rules_rows(readme_text: str) -> list[tuple[str, str]]:
    """The rows of a handout's ``## Rules`` table: (rule, checked?) cell texts, in order."""
    match = re.search(r"^## Rules\s*\n(.*?)(?=^## |\Z)", readme_text, flags=re.M | re.S)
    if match is None:
        return []
    rows = []
    for line in match.group(1).splitlines():
        line = line.strip()
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip("|"))]
        if len(cells) < 2 or set(cells[0]) <= {"-", ":"} or cells[0].lower() == "rule":
            continue
        rows.append((cells[0], " | ".join(cells[1:])))
    return rows


def graded_claim(checked: str) -> bool | None:
    """True where a row's "checked?" cell says it is graded, False where it says plainly that it
    is not, None where it says neither."""
    text = checked.strip().lower()
    if text.startswith(NOT_GRADED):
        return False
    if text.startswith(GRADED):
        return True
    return None


def rules_map(root: Path) -> dict:
    """{lab id: [entry, ...]} of ``tests/mutants/rules.yaml``: for each row of each handout's
    rules table, the tests that enforce it and the mutants that break it (or ``graded: no``)."""
    import yaml

    path = Path(root) / RULES_MAP
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def _row_entry(entries: list, rule: str) -> list:
    return [e for e in entries if rule.startswith(str(e.get("row", "")))]


def rules_problems(root: Path, labs) -> list[str]:
    """What is wrong with the handouts' rules tables against ``tests/mutants/rules.yaml``, over
    ``labs`` ((id, folder) pairs): every row must map to the tests that enforce it (by name, or
    by ladder rule) and to at least one mutant of the library that breaks it, or say plainly that
    it is not graded."""
    from msda_labs.mistakes import library

    root = Path(root)
    table = rules_map(root)
    mutant_dir = root / "tests" / "mutants"
    whole = {f"whole_{e['id']}" for e in library.whole_entries(mutant_dir)}
    problems = []
    for lab_id, folder in labs:
        readme = root / folder / "README.md"
        rows = rules_rows(readme.read_text()) if readme.is_file() else []
        entries = list(table.get(lab_id) or [])
        if not rows:
            continue
        tests_by_rule, _ = collect_rules(root / folder)
        names = _test_names(root / folder)
        mutant_ids = {m.id for m in library.load(lab_id, mutant_dir)} | whole | \
            {f"degenerate:{d.id}" for d in library.degenerate(lab_id, mutant_dir)}
        used = set()
        for rule, checked in rows:
            where = f"{lab_id} rules table, row {rule[:60]!r}"
            found = _row_entry(entries, rule)
            claim = graded_claim(checked)
            if claim is None:
                problems.append(f"{where}: its checked cell says neither 'yes' nor plainly that "
                                f"it is not graded ({', '.join(NOT_GRADED)})")
                continue
            if len(found) != 1:
                problems.append(f"{where}: {len(found)} entries of {RULES_MAP} match it (one "
                                f"wanted; an entry's `row` is the start of the row's first cell)")
                continue
            entry = found[0]
            used.add(id(entry))
            if claim is False:
                if entry.get("graded", True) is not False:
                    problems.append(f"{where}: the handout says it is not graded; its entry must "
                                    f"say `graded: no`")
                continue
            if entry.get("graded", True) is False:
                problems.append(f"{where}: the handout says it is graded; its entry says no")
                continue
            tests = entry_tests(entry, tests_by_rule)
            unknown = [t for t in tests if t != "*" and t not in names]
            if not tests or unknown:
                problems.append(f"{where}: no test enforces it" if not tests else
                                f"{where}: no test called {', '.join(unknown)} in {lab_id}")
            mutants = list(entry.get("mutants") or ())
            missing = [m for m in mutants if m not in mutant_ids]
            if not mutants or missing:
                problems.append(f"{where}: no mutant breaks it" if not mutants else
                                f"{where}: no mutant {', '.join(missing)} in the library")
        for entry in entries:
            if id(entry) not in used:
                problems.append(f"{lab_id}: {RULES_MAP} entry {str(entry.get('row'))[:60]!r} "
                                f"matches no row of the handout's rules table")
    return problems


def entry_tests(entry: dict, tests_by_rule: dict) -> list[str]:
    """The test functions a rules-table entry names: its ``tests``, then the tests marked with
    each of its ``ladder`` rules; ``*`` stands for every test of the lab."""
    tests = list(entry.get("tests") or ())
    for rule in entry.get("ladder") or ():
        tests += [t for t in tests_by_rule.get(rule, ()) if t not in tests]
    return tests


def _test_names(lab_dir: Path) -> set[str]:
    collector = _collect(lab_dir)
    return set(collector.names)
