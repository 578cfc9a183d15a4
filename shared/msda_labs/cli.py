"""``python -m msda_labs``: grade a lab, and the classroom commands.

    python -m msda_labs grade LAB [--submission FILE | --solution] [--json OUT] [--stage S]
    python -m msda_labs pictures [--check] [NAME|LAB ...]   redraw the handouts' pictures

LAB is a lab id (``lab05`` or ``5``), a lab folder name, or a path to a lab folder (``.`` at the
root of an exported template). Exit status: 0 whenever grading ran, whatever the score; 2 for a
usage or infrastructure error, with a message that says what to do.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from msda_labs.classroom import commands
from msda_labs.errors import KitError

__all__ = ["main", "build_parser"]


def _cmd_grade(ns) -> int:
    from msda_labs.flow import GradeRequest, grade
    from msda_labs.grading.judge.render import render_markdown, render_terminal

    if ns.solution and ns.submission:
        raise KitError("give either --submission FILE or --solution, not both")
    request = GradeRequest(lab=ns.lab, submission=ns.submission, solution=ns.solution,
                           stage=ns.stage, tasks=tuple(ns.task or ()), timeout=ns.timeout,
                           seed=ns.seed, seed_file=ns.seed_file, select=ns.select or "",
                           speed_repeat=ns.speed_repeat)
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
    """GitHub workflow commands pointing at the graded functions
    (msda_labs.grading.judge.annotations);
    file paths are relative to $GITHUB_WORKSPACE (else the current folder)."""
    from msda_labs.course.resolve import resolve_lab
    from msda_labs.grading.judge.annotations import annotation_lines

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
    from msda_labs.flow import chip_path

    manifest = load_manifest(find_manifest())
    labs = [manifest.lab(key) for key in ns.labs] if ns.labs else \
        [lab for lab in manifest.labs if lab.built]
    drift = []
    for lab in labs:
        chip = chip_path(lab.id)
        if not chip.is_file():
            raise KitError(f"{lab.id}: no chip at {chip}")
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


def _cmd_pictures(ns) -> int:
    from msda_labs.authoring.pictures import sync_pictures
    from msda_labs.course.manifest import find_manifest, load_manifest

    manifest = load_manifest(find_manifest())
    folders = {lab.id: lab.folder for lab in manifest.labs}
    try:
        drift, problems = sync_pictures(manifest.root, folders, check=ns.check, names=ns.names)
    except (ValueError, RuntimeError) as exc:
        raise KitError(str(exc)) from None
    except ImportError as exc:
        raise KitError(f"drawing the pictures needs matplotlib ({exc}): "
                       "pip install -r requirements-dev.txt") from None
    for path in drift:
        print(("out of date: " if ns.check else "rewrote: ") + path)
    for problem in problems:
        print(f"handout: {problem}")
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
    g.add_argument("--select", metavar="EXPR",
                   help="grade only the tests a pytest -k EXPR picks (the kit's measurements)")
    g.add_argument("--speed-repeat", type=int, default=1, metavar="K",
                   help="run every speed trial K times, each kept (the kit's fairness runs)")
    g.add_argument("--seed", type=int,
                   help="secret seed for the random cases (visible in the process list: "
                        "prefer --seed-file or $MSDA_GRADE_SEED)")
    g.add_argument("--seed-file", metavar="PATH", help="read the secret seed from PATH")
    g.set_defaults(func=_cmd_grade)
    s = sub.add_parser("sync", help="regenerate starters (from chips) and handout task tables")
    s.add_argument("labs", nargs="*", help="lab ids (default: every built lab)")
    s.add_argument("--check", action="store_true", help="report drift and exit 1, change nothing")
    s.set_defaults(func=_cmd_sync)
    p = sub.add_parser("pictures", help="redraw the handouts' pictures (lab-NN-*/img/*.png)")
    p.add_argument("names", nargs="*", help="picture names or lab ids (default: all)")
    p.add_argument("--check", action="store_true",
                   help="report pictures that differ from what the code draws, change nothing")
    p.set_defaults(func=_cmd_pictures)
    commands.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        return ns.func(ns)
    except KitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 2
