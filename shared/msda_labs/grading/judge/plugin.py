"""The grading pytest plugin: points live on the tests, verdicts come from an isolated submission.

A lab's test module declares only its tasks::

    TASKS = {"1.1": "bilinear_sample", "1.2": "msda_naive_student"}

and every test carries ``@pytest.mark.task("1.1", points=2)`` (GPU-only tests also
``@pytest.mark.stage("gpu")``: the gpu grading stage; :func:`is_gpu_test`). Which lab the tests
belong to, its title and where the submission's code runs come from the grading job
(:class:`~msda_labs.grading.judge.job.GradingJob`, built from the lab's entry in classroom.yml),
which :mod:`msda_labs.grading.judge.stage_run` hands to this plugin whole; task ids must be the
lab's own (``1.k`` for lab 01). A test asks the ``submission`` fixture to run code and compares what
comes back with the shared helpers; it never imports the student's module itself.

Statuses (:class:`~msda_labs.grading.judge.results.Status`): passed; failed (an assertion: the
one-line feedback); not_attempted (the stub's NotImplementedError); error (the submission raised);
crashed (its process died); timeout.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import pytest

from msda_labs.course.ladder import RULES, unknown_rules
from msda_labs.grading.isolation.executor import Executor, InfrastructureError, Outcome
from msda_labs.grading.isolation.sandbox import FEEDBACK_ONLY
from msda_labs.grading.judge.annotations import definitions, reached_names
from msda_labs.grading.judge.dependencies import chip_path, lab_dependencies, task_functions
from msda_labs.grading.judge.job import GradingJob
from msda_labs.grading.judge.prose import named_mistakes
from msda_labs.grading.judge.results import (
    Evidence,
    ExerciseResult,
    GradeResult,
    Status,
    TestResult,
)
from msda_labs.grading.judge.rules import SourceInfo, forbidden_imports
from msda_labs.grading.judge.submission import (  # the lab tests import these names from here
    NotAttempted,
    RuleViolation,
    Submission,
    SubmissionCrashed,
    SubmissionError,
    SubmissionProblem,
    SubmissionTimeout,
    imported_probe,
)
from msda_labs.student.cases import SALT_ENV

__all__ = [
    "Submission",
    "SubmissionProblem",
    "NotAttempted",
    "SubmissionError",
    "SubmissionCrashed",
    "SubmissionTimeout",
    "RuleViolation",
    "GRADE_KEY",
    "JOB_KEY",
    "JobCarrier",
    "is_gpu_test",
]


def is_gpu_test(item: pytest.Item) -> bool:
    """True for a test of the gpu grading stage (marked ``@pytest.mark.stage("gpu")``): it runs
    only where torch sees a CUDA device, in the gpu mode."""
    return any(mark.args[:1] == ("gpu",) for mark in item.iter_markers("stage"))


GRADE_KEY = pytest.StashKey["GradingSession"]()
JOB_KEY = pytest.StashKey["GradingJob"]()


class JobCarrier:
    """Hands a grading job to the plugin: :func:`msda_labs.grading.judge.stage_run.run_stage` passes
    one to ``pytest.main(plugins=[...])``, and it is stashed before the plugin configures."""

    def __init__(self, job: GradingJob):
        self.job = job

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[JOB_KEY] = self.job


class GradingSession:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.job: GradingJob | None = config.stash.get(JOB_KEY, None)
        job = self.job
        self.lab: str | None = job.lab.id if job else None
        self.lab_dir: Path | None = Path(job.lab.folder) if job else None
        self.title = job.lab.title if job else ""
        self.tasks: OrderedDict[str, str] = OrderedDict()
        self.records: dict[str, tuple[str, str, TestResult]] = {}
        self.order: list[str] = []
        self.points: dict[str, tuple[str, int]] = {}
        self.timeout = float(job.timeout) if job else 60.0
        self.stage = job.stage if job else "all"
        self._executor: Executor | None = None
        self._source: SourceInfo | None = None
        self._forbidden: list[str] | None = None
        self.submission: Path | None = None
        self.notes: list[str] = []
        self.speed: list[dict] = []  # judge-clock speed records (grading.judge.speedjudge)
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
            if mode == "gpu" and self._preflight[mode].kind == "ok":
                self._compile_ahead()
        outcome = self._preflight[mode]
        if outcome.kind != "ok":
            message = outcome.message
            if outcome.kind in ("crashed", "timeout", "error"):
                message = f"while importing your module: {message}"
            raise SubmissionProblem.for_outcome(outcome.kind, message)

    def _compile_ahead(self) -> None:
        """Once a GPU stage, before its first test: the kernels its tests will need, compiled in
        parallel. Each test module may declare ``COMPILE_AHEAD``, the ``(probe, args)`` its GPU
        tests run (one child runs them all at once, in threads: :func:`probes.compile_ahead`), and
        ``JUDGE_COMPILE_AHEAD``, the ``(case, dtype name, call, baselines)`` of its speed trials
        (compiled meanwhile in a thread of this process: :func:`speedjudge.warm_baselines`).
        Nothing of it is graded; a failure here leaves the work to the test, which reports it."""
        from msda_labs.grading.judge import speedjudge
        from msda_labs.grading.judge.probes import compile_ahead

        modules = list(dict.fromkeys(item.module for item in self.items
                                     if is_gpu_test(item) and getattr(item, "module", None)))
        for module in modules:
            for case, dtype_name, call, baselines in getattr(module, "JUDGE_COMPILE_AHEAD", ()):
                speedjudge.warm_baselines(case, dtype_name, call, baselines())
        calls = [call for module in modules for call in getattr(module, "COMPILE_AHEAD", ())]
        if calls:
            # within one test's time limit: a submission that hangs costs one limit here
            self.executor().run(compile_ahead, calls, max(10.0, self.timeout - 15), mode="gpu",
                                timeout=self.timeout)

    def mode_of(self, item: pytest.Item) -> str:
        """Where the submission's code runs for this test: gpu, else the lab's mode."""
        return "gpu" if is_gpu_test(item) else (self.job.mode if self.job else "cpu")

    @property
    def source(self) -> SourceInfo:
        if self._source is None:
            # The job's bytes, read once: the rules and the child see the same program.
            self._source = SourceInfo.from_bytes(self.submission, self.job.source)
        return self._source

    def forbidden(self) -> list[str]:
        """The import rule's findings on the submission, read once per run (a walk of its
        syntax tree: a second per test on a lab of two dozen tests)."""
        if self._forbidden is None:
            self._forbidden = forbidden_imports(self.source, int(self.lab[3:]))
        return self._forbidden

    def executor(self) -> Executor:
        if self._executor is None:
            number = self.job.number
            self._executor = Executor(
                self.submission, workdir=self.lab_dir, preload=_child_side_files(self.items),
                preload_modules=_earlier_chips(number), default_timeout=self.timeout,
                lab=number, lab_dir=self.lab_dir, env={SALT_ENV: str(self.job.salt)},
                source=self.source.text if self.source.readable else None)
        return self._executor

    def separation(self) -> dict:
        """How the submission's code ran: ``separated`` and how (uid, netns), or why not."""
        info = self._executor.separation if self._executor is not None else None
        return dict(info) if info else {"separated": False, "why": "no submission code ran"}

    def dependencies(self) -> dict[str, list[str]]:
        """Which task builds on which (:mod:`msda_labs.grading.judge.dependencies`); never fails a
        run (an unreadable chip or test: no dependencies)."""
        try:
            return lab_dependencies(self.lab or "", _task_functions(self))
        except (OSError, SyntaxError, ValueError):
            return {}

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()

    # -- results --------------------------------------------------------------------------
    def record(self, item: pytest.Item, status: str, message: str, duration: float,
               evidence: Evidence | None = None) -> None:
        task_id, points = self.points[item.nodeid]
        score = points if status == "passed" else 0
        self.records[item.nodeid] = (task_id, item.name, TestResult(
            name=item.name, status=status, score=score, max_score=points,
            message=message.strip(), stage="gpu" if is_gpu_test(item) else "cpu",
            mode=self.mode_of(item), duration=round(duration, 3),
            evidence=evidence or Evidence()))

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
        result.depends = self.dependencies()
        if not result.separation.get("separated") and self._executor is not None:
            result.notes.append(FEEDBACK_ONLY)
        return result


def _task_functions(session: GradingSession) -> dict[str, list[str]]:
    """Each task's functions of the lab's chip: those its TASKS entry names, else those its
    tests reach (a task named "query tiles and masks" exercises the kernel its tests launch)."""
    wanted = definitions(chip_path(session.lab or ""))
    declared = task_functions(dict(session.tasks))
    tests = sorted({Path(item.path).parent for item in session.items})
    files = [p for folder in tests for p in sorted(folder.glob("*.py"))]
    out = {}
    for task, names in declared.items():
        named = [n for n in names if n in wanted]
        if not named and wanted:
            bases = {getattr(item, "originalname", item.name) for item in session.items
                     if session.points.get(item.nodeid, ("",))[0] == task}
            named = reached_names(files, bases, wanted)
        out[task] = named
    return out


def _child_side_files(items) -> list[str]:
    """What a zygote preloads from the lab's tests folder: the probe modules and their helpers,
    never a test_, judge_ or truth_ module (those are the judge's; see
    grading.isolation.childguard)."""
    folders = sorted({Path(item.path).parent for item in items})
    return [str(p) for folder in folders for p in sorted(folder.glob("*.py"))
            if not p.name.startswith(("test_", "judge_", "truth_", "conftest"))]


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
    return module is not None and isinstance(getattr(module, "TASKS", None), dict)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items):
    gs: GradingSession = config.stash[GRADE_KEY]
    graded, deselected = [], []
    job = gs.job
    wanted_tasks = set(job.tasks) if job else set()
    problems = []
    for item in items:
        if not _is_lab_test(item):
            continue
        if job is None:
            raise pytest.UsageError("a lab's tests run through the grader, which knows the lab: "
                                    "`python -m msda_labs grade LAB` (or `nox -s LAB`)")
        module = item.module
        for task_id, name in module.TASKS.items():
            if job.number is not None and task_id.split(".")[0] != str(job.number):
                problems.append(f"{item.path.name}: task {task_id!r} is not a task of {job.lab.id} "
                                f"(its tasks are {job.number}.1, {job.number}.2, ...)")
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
        gs.modes.add(gs.mode_of(item))
    if problems:
        raise pytest.UsageError("malformed lab tests:\n  " + "\n  ".join(problems))
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [i for i in items if i not in deselected]
    gs.items = graded
    gs.order = [i.nodeid for i in graded]
    if graded:
        gs.submission = job.submission
        # Warm the workers while the first tests are prepared.
        if os.environ.get("MSDA_NO_PREWARM") != "1" and not config.option.collectonly:
            for mode in sorted(gs.modes):
                if mode != "gpu":
                    gs.executor().start(mode)
            if "gpu" in gs.modes:
                _warm_cuda()


def _warm_cuda() -> None:
    """Start this (the judge's) process's CUDA context in the background: its first use, for a
    baseline or a truth, comes after the first child returns, and the context took 11 s to make
    on an H100 host. The children that run student code come from the zygote, never from this
    process, so nothing forks with the context made."""
    import threading

    import torch

    def init():
        try:
            if torch.cuda.is_available():
                torch.cuda.init()
        except Exception:  # noqa: BLE001 - the first real use reports the problem
            pass

    threading.Thread(target=init, name="msda-cuda-warm", daemon=True).start()


@pytest.fixture
def submission(request: pytest.FixtureRequest) -> Submission:
    """The student's work, run in isolation (see :class:`Submission`)."""
    gs: GradingSession = request.config.stash[GRADE_KEY]
    item = request.node
    if gs.submission is None:
        raise pytest.UsageError("the submission fixture is only for graded lab tests")
    info = gs.source
    if not info.readable:
        raise SubmissionError(info.unreadable)
    if info.tree is None:
        raise SubmissionError(f"{gs.submission.name} does not parse: {info.syntax_error}")
    found = gs.forbidden()
    if found:
        raise RuleViolation("rules: " + "; ".join(found)
                            + " (a submission may not use the answers it is graded against)")
    mode = gs.mode_of(item)
    gs.preflight(mode)
    return Submission(gs, mode)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if is_gpu_test(item):
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU: run the GPU stage (`nox -s <lab>-gpu`) on a machine "
                        "with one, or on Modal")


def _evidence_of(exc: BaseException, status: Status, message: str, item) -> Evidence:
    """What the test saw, as data: the evidence its exception carries, with the function the
    test called when the exception names none. A test that still explains itself in prose
    only ("this is exactly the output of X", "this is a/an X: why", a mistake catalogue's
    sentence, a broken rule) has that one named mistake read here, once, as it is recorded."""
    evidence = getattr(exc, "evidence", None)
    evidence = Evidence.from_dict(evidence.to_dict()) if isinstance(evidence, Evidence) \
        else Evidence()
    called = getattr(item.funcargs.get("submission"), "called", None) \
        if hasattr(item, "funcargs") else None
    if not evidence.function and called:
        evidence.function = called[-1]
    if not evidence.named and not evidence.matched and not (evidence.error and evidence.line):
        names = named_mistakes(message)
        if len(names) == 1:
            label, meaning = names[0]
            evidence.named = meaning if meaning.startswith(label) else f"{label}: {meaning}"
    return evidence


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
        evidence = None
        if status != "passed" and call.excinfo is not None:
            evidence = _evidence_of(call.excinfo.value, Status(status), message, item)
        gs.record(item, status, message, call.duration, evidence)
        if status != "passed" and message:
            report.longrepr = f"[{status}] {message}"


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    session.config.stash[GRADE_KEY].close()


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    gs: GradingSession = config.stash[GRADE_KEY]
    if not gs.records:
        return
    from msda_labs.grading.judge.render import render_terminal

    terminalreporter.write_line("")
    for line in render_terminal(gs.result()).splitlines():
        terminalreporter.write_line(line)
