"""The grading pytest plugin: points live on the tests, verdicts come from an isolated submission.

A lab's test module declares::

    LAB = "lab01"                      # which lab; the student module is <lab folder>/lab01.py
    MODE = "cpu"                       # cpu | interpret | aot: where the submission's code runs
    TASKS = {"1.1": "bilinear_sample", "1.2": "msda_naive_student"}

and every test carries ``@pytest.mark.task("1.1", points=2)`` (GPU-only tests also
``@pytest.mark.stage("gpu")``: the gpu grading stage; :func:`is_gpu_test`). A test asks the
``submission`` fixture to run code and compares what comes back with the shared helpers; it
never imports the student's module itself.

Statuses (:class:`~msda_labs.grading.results.Status`): passed; failed (an assertion: the one-line
feedback); not_attempted (the stub's NotImplementedError); error (the submission raised);
crashed (its process died); timeout.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import pytest

from msda_labs.course.ladder import RULES, unknown_rules
from msda_labs.grading.executor import Executor, InfrastructureError, Outcome
from msda_labs.grading.results import ExerciseResult, GradeResult, Status, TestResult
from msda_labs.grading.rules import SourceInfo, forbidden_imports
from msda_labs.grading.sandbox import FEEDBACK_ONLY
from msda_labs.grading.submission import (  # the lab tests import these names from here
    NotAttempted,
    RuleViolation,
    Submission,
    SubmissionCrashed,
    SubmissionError,
    SubmissionProblem,
    SubmissionTimeout,
    imported_probe,
)

__all__ = [
    "Submission",
    "SubmissionProblem",
    "NotAttempted",
    "SubmissionError",
    "SubmissionCrashed",
    "SubmissionTimeout",
    "RuleViolation",
    "GRADE_KEY",
    "is_gpu_test",
]


def is_gpu_test(item: pytest.Item) -> bool:
    """True for a test of the gpu grading stage (marked ``@pytest.mark.stage("gpu")``): it runs
    only where torch sees a CUDA device, in the gpu mode."""
    return any(mark.args[:1] == ("gpu",) for mark in item.iter_markers("stage"))


def _mode_of(item: pytest.Item) -> str:
    """Where the submission's code runs for this test: gpu, else the test module's MODE."""
    return "gpu" if is_gpu_test(item) else getattr(item.module, "MODE", "cpu")


GRADE_KEY = pytest.StashKey["GradingSession"]()


class GradingSession:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.lab: str | None = None
        self.lab_dir: Path | None = None
        self.title = ""
        self.tasks: OrderedDict[str, str] = OrderedDict()
        self.records: dict[str, tuple[str, str, TestResult]] = {}
        self.order: list[str] = []
        self.points: dict[str, tuple[str, int]] = {}
        self.timeout = float(config.getoption("msda_timeout") or 60)
        self.stage = config.getoption("msda_stage") or "all"
        self._executor: Executor | None = None
        self._source: SourceInfo | None = None
        self._forbidden: list[str] | None = None
        self.submission: Path | None = None
        self.notes: list[str] = []
        self.speed: list[dict] = []  # judge-clock speed records (grading.speedjudge)
        self.last_output = ""
        self.modes: set[str] = set()
        self.items: list[pytest.Item] = []
        self._preflight: dict[str, Outcome] = {}
        # Points of GPU tests this run does not grade (the cpu stage, or no CUDA device here).
        self.gpu_points: OrderedDict[str, int] = OrderedDict()

    def skip_gpu(self, task_id: str, points: int) -> None:
        self.gpu_points[task_id] = self.gpu_points.get(task_id, 0) + points

    def preflight(self, mode: str) -> None:
        """Import the submission once per mode; if that alone fails, every test fails the same
        way at once (a module that hangs or exits at import costs one time limit, not one per
        test)."""
        if mode not in self._preflight:
            self._preflight[mode] = self.executor().run(imported_probe, mode=mode,
                                                        timeout=self.timeout)
        outcome = self._preflight[mode]
        if outcome.kind != "ok":
            message = outcome.message
            if outcome.kind in ("crashed", "timeout", "error"):
                message = f"while importing your module: {message}"
            raise SubmissionProblem.for_outcome(outcome.kind, message)

    # -- the submission -------------------------------------------------------------------
    def resolve_submission(self) -> Path:
        given = self.config.getoption("msda_submission")
        path = Path(given) if given else self.lab_dir / f"{self.lab}.py"
        if not path.is_file():
            raise pytest.UsageError(f"no submission to grade: {path} does not exist")
        return path.resolve()

    @property
    def source(self) -> SourceInfo:
        if self._source is None:
            self._source = SourceInfo.read(self.submission)
        return self._source

    def forbidden(self) -> list[str]:
        """The import rule's findings on the submission, read once per run (a walk of its
        syntax tree: a second per test on a lab of two dozen tests)."""
        if self._forbidden is None:
            self._forbidden = forbidden_imports(self.source, int(self.lab[3:]))
        return self._forbidden

    def executor(self) -> Executor:
        if self._executor is None:
            number = int(self.lab[3:]) if self.lab and self.lab[3:].isdigit() else None
            self._executor = Executor(
                self.submission, workdir=self.lab_dir, preload=_child_side_files(self.items),
                preload_modules=_earlier_chips(number), default_timeout=self.timeout,
                lab=number, lab_dir=self.lab_dir)
        return self._executor

    def separation(self) -> dict:
        """How the submission's code ran: ``separated`` and how (uid, netns), or why not."""
        info = self._executor.separation if self._executor is not None else None
        return dict(info) if info else {"separated": False, "why": "no submission code ran"}

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()

    # -- results --------------------------------------------------------------------------
    def record(self, item: pytest.Item, status: str, message: str, duration: float) -> None:
        task_id, points = self.points[item.nodeid]
        score = points if status == "passed" else 0
        self.records[item.nodeid] = (task_id, item.name, TestResult(
            name=item.name, status=status, score=score, max_score=points,
            message=message.strip(), stage="gpu" if is_gpu_test(item) else "cpu",
            mode=_mode_of(item), duration=round(duration, 3)))

    def result(self) -> GradeResult:
        result = GradeResult(lab=self.lab or "?", title=self.title,
                             submission=str(self.submission or ""))
        stages = []
        for task_id, name in self.tasks.items():
            result.exercises.append(ExerciseResult(task_id, name))
        for nodeid in self.order:
            if nodeid not in self.records:
                continue
            task_id, _, test = self.records[nodeid]
            result.exercise(task_id).tests.append(test)
            if test.stage not in stages:
                stages.append(test.stage)
        result.exercises = [ex for ex in result.exercises if ex.tests]
        result.stages = stages
        result.separation = self.separation()
        result.notes = list(self.notes)
        result.speed = list(self.speed)
        result.gpu_points = {task: self.gpu_points[task] for task in self.tasks
                             if self.gpu_points.get(task)}
        if not result.separation.get("separated") and self._executor is not None:
            result.notes.append(FEEDBACK_ONLY)
        return result


def _child_side_files(items) -> list[str]:
    """What a zygote preloads from the lab's tests folder: the probe modules and their helpers,
    never a test_ or judge_ module (those are the judge's; see grading.childguard)."""
    folders = sorted({Path(item.path).parent for item in items})
    return [str(p) for folder in folders for p in sorted(folder.glob("*.py"))
            if not p.name.startswith(("test_", "judge_", "conftest"))]


def _earlier_chips(lab: int | None) -> list[str]:
    """The chips of the labs before ``lab`` that this copy of the kit carries (a submission may
    build on them through msda_labs.student.earlier), and lab 10's shipped operator from lab 10
    on: preloaded, so a separated child needs no read access to the chips folder."""
    if lab is None:
        return []
    import msda_labs.chips

    folder = Path(msda_labs.chips.__file__).parent
    numbers = sorted(int(p.stem[3:]) for p in folder.glob("lab[0-9][0-9].py"))
    if not numbers or lab > numbers[-1] + 1:  # not a lab of this course (a test's lab99)
        return []
    return [f"msda_labs.chips.lab{n:02d}" for n in numbers if n < lab] + \
        (["msda_labs.student.shipped"] if lab >= 10 else [])


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("msda_labs", "MSDA course grading")
    group.addoption("--msda-submission", default=None,
                    help="grade this file instead of the lab's own student module")
    group.addoption("--msda-stage", default=None, choices=["cpu", "gpu", "all"],
                    help="cpu: every test that needs no GPU; gpu: only GPU tests; all (default)")
    group.addoption("--msda-task", action="append", default=[],
                    help="grade only this task id (repeatable), e.g. 1.2")
    group.addoption("--msda-timeout", type=float, default=None,
                    help="seconds one test's submission code may run (default 60)")
    group.addoption("--msda-json", default=None, help="also write the grade JSON here")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "task(id, points): the course exercise this test grades and its points")
    config.addinivalue_line(
        "markers", "stage(name): 'gpu' for tests that need a CUDA device")
    config.addinivalue_line(
        "markers",
        "rule(name, ...): the ladder rules this test enforces (msda_labs.course.ladder.RULES)")
    config.stash[GRADE_KEY] = GradingSession(config)


def _is_lab_test(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    return module is not None and hasattr(module, "TASKS") and hasattr(module, "LAB")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items):
    gs: GradingSession = config.stash[GRADE_KEY]
    graded, deselected = [], []
    wanted_tasks = set(config.getoption("msda_task") or [])
    problems = []
    for item in items:
        if not _is_lab_test(item):
            continue
        module = item.module
        if gs.lab is None:
            gs.lab = module.LAB
            gs.lab_dir = Path(module.__file__).resolve().parent.parent
            gs.title = getattr(module, "TITLE", "")
        elif module.LAB != gs.lab:
            problems.append(f"{item.nodeid}: tests of {module.LAB} and {gs.lab} in one run")
            continue
        for task_id, name in module.TASKS.items():
            if gs.tasks.get(task_id, name) != name:
                problems.append(f"task {task_id} is named both {gs.tasks[task_id]!r} and {name!r}")
            gs.tasks.setdefault(task_id, name)
        marks = list(item.iter_markers("task"))
        if len(marks) != 1:
            problems.append(f"{item.nodeid}: needs exactly one @pytest.mark.task(id, points=N), "
                            f"has {len(marks)}")
            continue
        mark = marks[0]
        task_id = mark.args[0] if mark.args else None
        points = mark.kwargs.get("points")
        if task_id not in module.TASKS:
            problems.append(f"{item.nodeid}: task {task_id!r} is not declared in TASKS")
            continue
        if not isinstance(points, int) or isinstance(points, bool) or points < 0:
            problems.append(f"{item.nodeid}: points must be a non-negative int, got {points!r}")
            continue
        rule_names = [name for m in item.iter_markers("rule") for name in m.args]
        unknown = unknown_rules(rule_names)
        if unknown or any(not m.args for m in item.iter_markers("rule")):
            problems.append(f"{item.nodeid}: unknown ladder rule(s) {unknown or '(none named)'}; "
                            f"the rules are {', '.join(RULES)} (msda_labs/course/ladder.py)")
            continue
        if any(m.args != ("gpu",) for m in item.iter_markers("stage")):
            problems.append(f"{item.nodeid}: the one stage marker is @pytest.mark.stage('gpu')")
            continue
        is_gpu = is_gpu_test(item)
        if (gs.stage == "cpu" and is_gpu) or (gs.stage == "gpu" and not is_gpu) or \
                (wanted_tasks and task_id not in wanted_tasks):
            if gs.stage == "cpu" and is_gpu and (not wanted_tasks or task_id in wanted_tasks):
                gs.skip_gpu(task_id, points)
            deselected.append(item)
            continue
        gs.points[item.nodeid] = (task_id, points)
        graded.append(item)
        gs.modes.add(_mode_of(item))
    if problems:
        raise pytest.UsageError("malformed lab tests:\n  " + "\n  ".join(problems))
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [i for i in items if i not in deselected]
    gs.items = graded
    gs.order = [i.nodeid for i in graded]
    if graded:
        gs.submission = gs.resolve_submission()
        # Warm the workers while the first tests are prepared.
        if os.environ.get("MSDA_NO_PREWARM") != "1" and not config.option.collectonly:
            for mode in sorted(gs.modes):
                if mode != "gpu":
                    gs.executor().start(mode)


@pytest.fixture
def submission(request: pytest.FixtureRequest) -> Submission:
    """The student's work, run in isolation (see :class:`Submission`)."""
    gs: GradingSession = request.config.stash[GRADE_KEY]
    item = request.node
    if gs.submission is None:
        raise pytest.UsageError("the submission fixture is only for graded lab tests")
    info = gs.source
    if info.tree is None:
        raise SubmissionError(f"{gs.submission.name} does not parse: {info.syntax_error}")
    found = gs.forbidden()
    if found:
        raise RuleViolation("rules: " + "; ".join(found)
                            + " (a submission may not use the answers it is graded against)")
    mode = _mode_of(item)
    gs.preflight(mode)
    return Submission(gs, mode)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if is_gpu_test(item):
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU: run the GPU stage (`nox -s <lab>-gpu`) on a machine "
                        "with one, or on Modal")


def _verdict_of(excinfo) -> tuple[Status, str]:
    """The status and one-line message that a graded test's exception earns."""
    exc = excinfo.value
    if isinstance(exc, SubmissionProblem):
        return exc.status, str(exc)
    if isinstance(exc, (AssertionError, pytest.fail.Exception)):
        text = str(exc).strip()
        return Status.FAILED, text.splitlines()[0] if text else "assertion failed"
    if isinstance(exc, InfrastructureError):
        raise exc
    text = str(exc).strip().splitlines()
    last = text[-1] if text else ""
    return Status.ERROR, f"the check could not run: {type(exc).__name__}: {last}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    gs: GradingSession = item.config.stash[GRADE_KEY]
    if item.nodeid not in gs.points:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if report.passed:
            status, message = "passed", ""
        elif report.skipped:
            if is_gpu_test(item) and report.when == "setup":
                gs.skip_gpu(*gs.points.pop(item.nodeid))
                reason = str(getattr(call.excinfo.value, "msg", "")) if call.excinfo else ""
                note = "GPU tests skipped: no CUDA device here" \
                    if not reason or reason.startswith("needs a CUDA GPU") else \
                    f"GPU test {item.name} not graded here (skipped: {reason})"
                if note not in gs.notes:
                    gs.notes.append(note)
                return
            reason = call.excinfo.value.msg if call.excinfo else "skipped"
            status, message = "error", f"skipped, so not graded: {reason}"
        else:
            status, message = _verdict_of(call.excinfo)
        gs.record(item, status, message, call.duration)
        if status != "passed" and message:
            report.longrepr = f"[{status}] {message}"


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    gs: GradingSession = session.config.stash[GRADE_KEY]
    gs.close()
    path = session.config.getoption("msda_json")
    if path and gs.lab:
        gs.result().write_json(path)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    gs: GradingSession = config.stash[GRADE_KEY]
    if not gs.records:
        return
    from msda_labs.grading.render import render_terminal

    terminalreporter.write_line("")
    for line in render_terminal(gs.result()).splitlines():
        terminalreporter.write_line(line)
