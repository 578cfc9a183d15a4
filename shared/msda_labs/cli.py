"""``python -m msda_labs``: grade a lab, and the classroom commands.

    python -m msda_labs grade LAB [--submission FILE | --solution] [--json OUT] [--stage S]

LAB is a lab id (``lab05`` or ``5``), a lab folder name, or a path to a lab folder (``.`` at the
root of an exported template). Exit status: 0 whenever grading ran, whatever the score; 2 for a
usage or infrastructure error, with a message that says what to do.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["main", "GradeRequest", "grade", "resolve_lab", "UsageProblem"]


class UsageProblem(Exception):
    """A usage or infrastructure error: exit status 2 with this message."""


@dataclass
class ResolvedLab:
    id: str
    folder: Path
    title: str
    timeouts: dict[str, int]
    stages: list[str]
    gpu: str | None


def _lab_from_manifest(key: str, start: Path | None = None,
                       by_path: bool = False) -> ResolvedLab | None:
    from msda_labs.course.manifest import ManifestError, find_manifest, load_manifest

    try:
        manifest = load_manifest(find_manifest(start))
    except ManifestError as exc:
        if "no classroom.yml" in str(exc):
            return None
        raise UsageProblem(str(exc)) from None
    try:
        lab = manifest.lab(key)
    except ManifestError as exc:
        if by_path:  # a lab folder given by path need not be in this manifest
            return None
        raise UsageProblem(str(exc)) from None
    if not lab.built and not by_path:
        raise UsageProblem(f"{lab.id} ({lab.title}) is declared in classroom.yml but not built "
                           f"yet (status: {lab.status}); there is nothing to grade")
    folder = manifest.root / lab.folder
    if not folder.is_dir():
        folder = manifest.root  # an exported template: the lab sits at the root
    gpu = lab.stage("gpu").gpu if lab.has_gpu else None
    return ResolvedLab(lab.id, folder, lab.title, {s.name: s.timeout_s for s in lab.stages},
                       [s.name for s in lab.stages], gpu)


def resolve_lab(key: str) -> ResolvedLab:
    path = Path(key)
    if path.is_dir() and (path / "tests").is_dir():
        modules = sorted(p.stem for p in path.glob("lab[0-9][0-9].py"))
        if not modules:
            raise UsageProblem(f"{path} has a tests/ folder but no labNN.py student module")
        lab_id = modules[0]
        info = _lab_from_manifest(lab_id, path, by_path=True)
        if info is not None:
            info.folder = path.resolve()
            return info
        return ResolvedLab(lab_id, path.resolve(), "", {}, [], None)
    if path.is_dir() or "/" in key:
        raise UsageProblem(f"{key} is not a lab folder (a lab folder holds labNN.py and tests/)")
    info = _lab_from_manifest(key)
    if info is None:
        raise UsageProblem(f"no lab {key!r}: there is no classroom.yml here; pass the path of a "
                           f"lab folder instead (e.g. `grade .` at the root of a lab repository)")
    return info


@dataclass
class GradeRequest:
    lab: str
    submission: str | None = None
    solution: bool = False
    stage: str = "cpu"
    tasks: tuple[str, ...] = ()
    timeout: float | None = None
    seed: int | None = None
    # "auto": the GPU stage runs on local CUDA, else on Modal (msda_labs.gpu); "here": every
    # asked stage runs in this process, whatever devices exist (GPU tests skip without CUDA).
    where: str = "auto"


def _chip_path(lab_id: str) -> Path:
    import msda_labs.chips as chips

    return Path(chips.__file__).parent / f"{lab_id}.py"


def _integrity(lab: ResolvedLab) -> dict:
    try:
        from msda_labs.classroom.integrity import check_folder
    except ImportError:  # pragma: no cover - older kits
        return {"checked": False, "modified": []}
    return check_folder(lab.folder)


class _Capture:
    """A pytest plugin object that keeps the grading session's result and collection errors."""

    def __init__(self):
        self.result = None
        self.errors: list[str] = []

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(f"{report.nodeid}: {str(report.longrepr).strip().splitlines()[-1]}")

    def pytest_sessionfinish(self, session, exitstatus):
        from msda_labs.grading.plugin import GRADE_KEY

        gs = session.config.stash.get(GRADE_KEY, None)
        if gs is not None and (gs.records or gs.notes):  # notes: GPU tests skipped, no CUDA
            self.result = gs.result()


def grade(request: GradeRequest):
    """Grade one lab; returns the GradeResult or raises UsageProblem."""
    import pytest

    from msda_labs.grading.executor import InfrastructureError

    lab = resolve_lab(request.lab)
    if request.solution:
        sub = _chip_path(lab.id)
        if not sub.is_file():
            raise UsageProblem(f"--solution: the chip of {lab.id} is not part of this copy of the "
                               f"kit (an exported lab carries only the chips of earlier labs)")
    elif request.submission:
        sub = Path(request.submission)
        if not sub.is_file():
            raise UsageProblem(f"--submission {request.submission}: no such file")
    else:
        sub = lab.folder / f"{lab.id}.py"
        if not sub.is_file():
            raise UsageProblem(f"{sub} is missing: the student module of {lab.id} should be there")
    if request.stage in ("gpu", "all") and request.where != "here":
        return _grade_with_gpu(request, lab, sub)
    if request.seed is not None:
        os.environ["MSDA_GRADE_SEED"] = str(request.seed)
    stage_timeouts = [t for name, t in lab.timeouts.items()
                      if (name == "gpu") == (request.stage == "gpu")]
    timeout = request.timeout or (max(stage_timeouts) if stage_timeouts else 60)
    args = [str(lab.folder / "tests"), "-p", "no:terminal", "-p", "no:cacheprovider",
            "--rootdir", str(lab.folder), "-c", os.devnull, "--strict-markers",
            "--msda-submission", str(sub.resolve()), "--msda-stage", request.stage,
            "--msda-timeout", str(timeout)]
    for task in request.tasks:
        args += ["--msda-task", task]
    if not _plugin_autoloads():
        args += ["-p", "msda_labs.grading.plugin"]
    capture = _Capture()
    try:
        code = pytest.main(args, plugins=[capture])
    except InfrastructureError as exc:
        raise UsageProblem(f"the grader could not run: {exc}") from None
    if capture.errors:
        raise UsageProblem("the lab's tests could not be collected (a grading file is broken; "
                           "restore it with `git checkout -- tests`):\n  "
                           + "\n  ".join(capture.errors))
    if capture.result is None:
        if int(code) == 4:
            raise UsageProblem("pytest refused the grading run (see the message above)")
        raise UsageProblem(f"no tests of {lab.id} ran for stage '{request.stage}'"
                           + (f" and tasks {', '.join(request.tasks)}" if request.tasks else ""))
    result = capture.result
    result.title = lab.title or result.title
    try:
        result.submission = str(sub.resolve().relative_to(Path.cwd()))
    except ValueError:
        result.submission = str(sub.resolve())
    if request.solution:
        result.notes.insert(0, "graded the chip (reference solution)")
    result.integrity = _integrity(lab)
    return result


def _plugin_autoloads() -> bool:
    """True when pytest will load the grading plugin by itself (the package is installed)."""
    from importlib.metadata import entry_points

    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(ep.name == "msda_labs" for ep in entry_points(group="pytest11"))


def _grade_with_gpu(request: GradeRequest, lab: ResolvedLab, sub: Path):
    """``--stage gpu``: the GPU tests on local CUDA, else on Modal, else how to enable either;
    ``--stage all``: the CPU stages here, merged with the GPU stage into one report."""
    from dataclasses import replace

    from msda_labs.gpu import GpuUnavailable, route, run_gpu_stage

    if lab.stages and "gpu" not in lab.stages:
        if request.stage == "gpu":
            raise UsageProblem(f"{lab.id} has no GPU stage (its stages: {', '.join(lab.stages)})")
        return grade(replace(request, stage="cpu"))
    try:
        route(lab.id)  # fail fast, before the CPU stages spend their time
        result = grade(replace(request, stage="cpu")) if request.stage == "all" else None
        gpu = run_gpu_stage(lab.id, lab.folder, sub, timeout=request.timeout,
                            tasks=request.tasks, seed=request.seed)
    except GpuUnavailable as exc:
        raise UsageProblem(str(exc)) from None
    gpu.title = lab.title or gpu.title
    try:
        gpu.submission = str(sub.resolve().relative_to(Path.cwd()))
    except ValueError:
        gpu.submission = str(sub.resolve())
    if request.solution:
        gpu.notes.insert(0, "graded the chip (reference solution)")
    if result is None:
        gpu.integrity = _integrity(lab)
        return gpu
    return result.merge(gpu)


def _cmd_grade(ns) -> int:
    from msda_labs.grading.render import render_markdown, render_terminal

    if ns.solution and ns.submission:
        raise UsageProblem("give either --submission FILE or --solution, not both")
    request = GradeRequest(lab=ns.lab, submission=ns.submission, solution=ns.solution,
                           stage=ns.stage, tasks=tuple(ns.task or ()), timeout=ns.timeout,
                           seed=ns.seed)
    result = grade(request)
    print(render_terminal(result))
    if ns.json:
        result.write_json(ns.json)
    if ns.markdown:
        Path(ns.markdown).write_text(render_markdown(result))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and ns.summary:
        with open(summary, "a") as fh:
            fh.write(render_markdown(result))
    if ns.annotations:
        _print_annotations(ns.lab, result)
    return 0


def _print_annotations(lab_key: str, result) -> None:
    """GitHub workflow commands pointing at the graded functions (msda_labs.grading.annotations);
    file paths are relative to $GITHUB_WORKSPACE (else the current folder)."""
    from msda_labs.grading.annotations import annotation_lines

    module = Path(result.submission).resolve()
    base = Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    try:
        label = module.relative_to(base).as_posix()
    except ValueError:
        label = module.name
    tests = resolve_lab(lab_key).folder / "tests"
    for line in annotation_lines(result, module, tests, label):
        print(line)


def _cmd_sync(ns) -> int:
    from msda_labs.authoring.handout import sync_lab, sync_ladder
    from msda_labs.course.manifest import find_manifest, load_manifest

    manifest = load_manifest(find_manifest())
    labs = [manifest.lab(key) for key in ns.labs] if ns.labs else \
        [lab for lab in manifest.labs if lab.built]
    drift = []
    for lab in labs:
        chip = _chip_path(lab.id)
        if not chip.is_file():
            raise UsageProblem(f"{lab.id}: no chip at {chip}")
        drift += sync_lab(manifest.root / lab.folder, lab.id, chip, check=ns.check)
    problems = []
    if not ns.labs:  # the audit spans every lab: only a whole-course sync rewrites it
        ladder_drift, problems = sync_ladder(
            manifest.root, [(lab.id, lab.folder) for lab in labs], check=ns.check)
        drift += ladder_drift
    for path in drift:
        print(("out of date: " if ns.check else "rewrote: ") + path)
    for problem in problems:
        print(f"ladder audit: {problem}")
    return 1 if ((ns.check and drift) or problems) else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m msda_labs",
                                     description="MSDA Triton course kit")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade a lab", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("lab", help="lab id (lab05), lab folder name, or path to a lab folder")
    g.add_argument("--submission", metavar="FILE", help="grade FILE instead of the lab's labNN.py")
    g.add_argument("--solution", action="store_true", help="grade the chip (kit self-checks)")
    g.add_argument("--json", metavar="OUT", help="write the result as JSON to OUT")
    g.add_argument("--markdown", metavar="OUT", help="write the result as Markdown to OUT")
    g.add_argument("--summary", action="store_true",
                   help="append the Markdown report to $GITHUB_STEP_SUMMARY")
    g.add_argument("--annotations", action="store_true",
                   help="print a GitHub annotation per exercise that did not pass, at the def "
                        "line of the function it grades")
    g.add_argument("--stage", choices=["cpu", "gpu", "all"], default="cpu",
                   help="cpu (default): every test that needs no GPU; gpu: the GPU stage")
    g.add_argument("--task", action="append", metavar="ID", help="grade only task ID (e.g. 1.2)")
    g.add_argument("--timeout", type=float, help="seconds one test's code may run")
    g.add_argument("--seed", type=int, help="secret seed offset for the random cases")
    g.set_defaults(func=_cmd_grade)
    s = sub.add_parser("sync", help="regenerate starters (from chips) and handout task tables")
    s.add_argument("labs", nargs="*", help="lab ids (default: every built lab)")
    s.add_argument("--check", action="store_true", help="report drift and exit 1, change nothing")
    s.set_defaults(func=_cmd_sync)
    try:
        from msda_labs.classroom import commands
    except ImportError:
        commands = None
    if commands is not None:
        commands.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        return ns.func(ns)
    except UsageProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 2
