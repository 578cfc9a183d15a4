"""Prove every GPU stage on real hardware: the chips pass; a slow and a wrong submission fail.

    PYTHONPATH=shared python3 -m msda_labs.gpu.prove --out DIR [--labs lab05 lab06]
                                                    [--variants chip slow wrong] [--compact]
                                                    [--speed-only] [--repeat K]

For every built lab whose classroom.yml entry has a ``gpu`` stage, three submissions are made
from the lab's chip by text edits (a block appended to the chip's source, nothing else; the
blocks are the whole-submission mutants of ``msda_labs.mistakes.submissions``):

    chip   the chip as it is: every GPU test must pass (full marks);
    slow   in labs 05, 06, 08 and 10, the chip's own public calls on up to 256 pieces of the
           queries, one after another (``mistakes.submissions.serialized``); elsewhere, after
           each public call the device sleeps ten times that call's own time (2 to 50 ms): same
           results, much slower; it must lose points to a test that says "too slow";
    wrong  each public call's floating-point outputs are off by one element (the first, by
           1 + |x|/2): it must lose points on correctness.

Each is graded in its own process with this machine's python: ``python -m msda_labs grade
<lab folder> --submission FILE --stage gpu --json ...``, with ``MSDA_GPU_RUNNER=local`` (this
harness never goes to Modal and needs no network; it imports nothing of modal). DIR receives,
per run, ``<lab>-<variant>.json`` (the grade report), ``<lab>-<variant>.log`` (the terminal
report and any error) and ``<lab>-<variant>/`` (plots and tables the tests wrote); and
``submissions/``, ``env.json``, ``summary.md``, ``summary.json`` and ``prove-bundle.tar.gz``
(all of it in one file). With ``--compact`` only the summary files, the bundle and up to four
plots stay at DIR's top level (for tools that bring back few files).

Exit status: 0 when every expectation holds, 1 when one does not, 2 when nothing could run.
``--stage cpu`` grades the other stages the same way: the kit's own tests use it to prove this
harness on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from msda_labs.gpu.body import ARTIFACT_ENV, ARTIFACT_SUFFIXES, ensure_importable
from msda_labs.mistakes.submissions import SERIAL_ENTRIES, SUBMISSIONS, planted, serialized

__all__ = ["VARIANTS", "make_variant", "Run", "main"]

VARIANTS = ("chip", *SUBMISSIONS)  # ("chip", "slow", "wrong")


# The tests --speed-only grades: every GPU lab's speed tests (pytest -k; whole test names,
# since -k also matches the names of the folders above a test).
SPEED_TESTS = ("test_forward_speed_against_the_reference or test_gpu_race_wide_beats_narrow or "
               "test_gpu_speed_against_chip or test_gpu_autotuned_vs_fixed_and_chip or "
               "test_backward_speed_against_the_reference or test_gpu_speed_against_the_reference")


def make_variant(chip_source: str, variant: str, lab: str | None = None) -> str:
    """The chip's source as the ``variant`` submission (``chip``, ``slow`` or ``wrong``). The
    slow copy of a GPU lab (:data:`SERIAL_ENTRIES`) runs the chip's own kernels on pieces of
    the queries one after another (:func:`msda_labs.mistakes.submissions.serialized`), slow in
    a way no rule can see; elsewhere it sleeps after each call."""
    if variant == "chip":
        return chip_source
    if variant not in SUBMISSIONS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    if variant == "slow" and lab in SERIAL_ENTRIES:
        return serialized(chip_source, lab)
    return planted(chip_source, variant)


@dataclass
class Run:
    lab: str
    variant: str
    exit_code: int | None = None
    seconds: float = 0.0
    score: int | None = None
    max_score: int | None = None
    failed: list[dict] = field(default_factory=list)  # {name, status, message}
    speed: list[dict] = field(default_factory=list)  # the grade's speed trials (verdicts)
    tests: list[dict] = field(default_factory=list)  # {name, status, seconds}
    notes: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    ok: bool = False
    verdict: str = ""
    error: str = ""


def _environment() -> dict:
    env = {"python": platform.python_version(), "platform": platform.platform(),
           "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    try:
        import torch

        env["torch"] = torch.__version__
        env["torch_cuda"] = torch.version.cuda
        env["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env["device"] = props.name
            env["capability"] = f"{props.major}.{props.minor}"
            env["memory_gib"] = round(props.total_memory / 2**30, 1)
            env["multiprocessors"] = props.multi_processor_count
    except ImportError:
        env["torch"] = "missing"
    from importlib.metadata import PackageNotFoundError, version

    for name in ("triton", "pytest", "numpy", "pyyaml", "jsonschema", "matplotlib", "modal"):
        try:
            env[name] = version(name)
        except PackageNotFoundError:
            env[name] = "missing"
    return env


def _snapshot(folder: Path) -> dict[str, float]:
    if not folder.is_dir():
        return {}
    return {str(p): p.stat().st_mtime for p in folder.rglob("*")
            if p.is_file() and p.suffix.lower() in ARTIFACT_SUFFIXES
            and "__pycache__" not in p.parts}


def _judge(run: Run, data: dict | None) -> None:
    if data is None:
        run.ok, run.verdict = False, f"not graded: {run.error or 'no report'}"
        return
    run.score, run.max_score = data["score"], data["max_score"]
    run.notes = list(data.get("notes", []))
    run.speed = [{k: t.get(k) for k in ("key", "status", "why", "times_us", "verdicts",
                                        "attempts")} for t in data.get("speed", []) or []]
    run.tests = [{"name": t["name"], "status": t["status"],
                  "seconds": round(float(t.get("duration") or 0.0), 1)}
                 for ex in data["exercises"] for t in ex["tests"]]
    run.failed = [{"task": ex["id"], "name": t["name"], "status": t["status"],
                   "message": t["message"]}
                  for ex in data["exercises"] for t in ex["tests"] if t["status"] != "passed"]
    if not run.max_score:
        run.ok, run.verdict = False, "no test ran (no CUDA device, or the stage has no tests)"
        return
    if run.variant == "chip":
        run.ok = run.score == run.max_score
        run.verdict = "full marks" if run.ok else \
            f"lost points: {run.failed[0]['name']}: {run.failed[0]['message'][:300]}"
        return
    run.ok = run.score < run.max_score
    if not run.ok:
        run.verdict = "kept full marks: no test caught it"
        return
    first = run.failed[0]
    run.verdict = f"{first['name']} ({first['status']}): {first['message'][:300]}"
    if run.variant == "slow":
        # Caught by a clock: a test failed because the time was too slow, not by a rule.
        speed = [f["name"] for f in run.failed if "too slow" in f["message"].lower()]
        others = [f["name"] for f in run.failed if f["name"] not in speed]
        run.ok = bool(speed)
        run.verdict = (f"caught by speed test(s) {', '.join(speed)}; " if speed else
                       "lost points, but no speed test failed on its clock; ") + \
            (f"also failed: {', '.join(others)}; " if others else "") + run.verdict


def _grade(lab, lab_dir: Path, submission: Path, run: Run, out: Path, stage: str,
           timeout: float | None, job_timeout: float, select: str = "",
           repeat: int = 1) -> None:
    report = out / f"{run.lab}-{run.variant}.json"
    artifacts = out / f"{run.lab}-{run.variant}"
    artifacts.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env[ARTIFACT_ENV] = str(artifacts)
    env["MSDA_GPU_RUNNER"] = "local"
    env.setdefault("PYTHONUNBUFFERED", "1")
    cmd = [sys.executable, "-m", "msda_labs", "grade", str(lab_dir), "--submission",
           str(submission), "--stage", stage, "--json", str(report)]
    if timeout:
        cmd += ["--timeout", str(timeout)]
    if select:
        cmd += ["--select", select]
    if repeat > 1:
        cmd += ["--speed-repeat", str(repeat)]
    before = _snapshot(lab_dir)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=artifacts, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=job_timeout)
        run.exit_code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the grade command and its grading workers
        text, _ = proc.communicate()
        text = f"{text or ''}\n[prove] stopped after {job_timeout:g} s"
        run.error = f"the grade command ran past {job_timeout:g} s"
    run.seconds = round(time.monotonic() - start, 1)
    (out / f"{run.lab}-{run.variant}.log").write_text(" ".join(cmd) + "\n\n" + text)
    for path, mtime in _snapshot(lab_dir).items():  # plots a test wrote beside the lab
        if before.get(path) != mtime:
            shutil.copy2(path, artifacts / Path(path).name)
    run.artifacts = sorted(str(p.relative_to(out)) for p in artifacts.rglob("*") if p.is_file())
    data = None
    if report.is_file():
        data = json.loads(report.read_text())
    elif not run.error:
        lines = [x for x in text.strip().splitlines() if x.strip()]
        run.error = f"exit {run.exit_code}: {lines[-1][:300] if lines else 'no output'}"
    _judge(run, data)


def _summary(runs: list[Run], env: dict, stage: str) -> str:
    device = env.get("device") or "no CUDA device"
    lines = [f"# GPU stages proved: {stage} stage on {device}", "",
             f"python {env.get('python')}, torch {env.get('torch')} (CUDA {env.get('torch_cuda')}),"
             f" triton {env.get('triton')}, pytest {env.get('pytest')}; {env.get('time_utc')} UTC",
             "", "| lab | submission | score | time (s) | expected | as expected | what happened |",
             "|---|---|---|---|---|---|---|"]
    expected = {"chip": "full marks", "slow": "loses points (speed)",
                "wrong": "loses points (correctness)"}
    for run in runs:
        score = "-" if run.score is None else f"{run.score}/{run.max_score}"
        verdict = run.verdict.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {run.lab} | {run.variant} | {score} | {run.seconds} | "
                     f"{expected[run.variant]} | {'yes' if run.ok else 'NO'} | {verdict} |")
    speed = [(run, note) for run in runs for note in run.notes if note.startswith("speed of")]
    if speed:
        lines += ["", "## Speed (student's operator vs the chip, same run)", ""]
        lines += [f"- {run.lab} {run.variant}: {note}" for run, note in speed]
    lines += _verdict_table(runs)
    failures = [(run, f) for run in runs if run.variant != "chip" for f in run.failed]
    if failures:
        lines += ["", "## Failure messages of the slow and wrong submissions", ""]
        lines += [f"- {run.lab} {run.variant} `{f['name']}` ({f['status']}): "
                  f"{f['message'][:400]}" for run, f in failures]
    plots = [(run, a) for run in runs for a in run.artifacts]
    if plots:
        lines += ["", "## Files the tests wrote", ""]
        lines += [f"- {run.lab} {run.variant}: {a}" for run, a in plots]
    held = sum(run.ok for run in runs)
    lines += ["", f"{held}/{len(runs)} expectations hold."]
    return "\n".join(lines) + "\n"


def _verdict_table(runs: list[Run]) -> list[str]:
    """Every graded ratio of every speed trial, gathered per lab, submission and ratio: how
    many trials, the ratios (each with its bootstrap interval), the threshold, how many
    passed, and the smallest margin (1 at the ideal, 0 at the threshold)."""
    rows: dict[tuple, list[dict]] = {}
    for run in runs:
        for trial in run.speed:
            for verdict in trial.get("verdicts") or []:
                key = (run.lab, run.variant, trial["key"], verdict["ratio"])
                rows.setdefault(key, []).append({**verdict, "attempts": trial.get("attempts")})
    if not rows:
        return []
    lines = ["", "## Speed verdicts (every trial; ratio [95% bootstrap interval])", "",
             "| lab | submission | trial | ratio | trials | values | threshold | passed | "
             "smallest margin | measurements |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (lab, variant, trial, ratio), found in rows.items():
        values = "; ".join(f"{v['value']:.2f} [{v['interval'][0]:.2f}, {v['interval'][1]:.2f}]"
                           for v in found)
        sign = ">=" if found[0]["at_least"] else "<="
        passed = sum(bool(v["passes"]) for v in found)
        margin = min(v["margin"] for v in found)
        attempts = ", ".join(str(v.get("attempts")) for v in found)
        lines.append(f"| {lab} | {variant} | {trial} | {ratio} | {len(found)} | {values} | "
                     f"{sign} {found[0]['limit']:g} | {passed}/{len(found)} | {margin:.2f} | "
                     f"{attempts} |")
    return lines


def _write_summaries(out: Path, runs: list[Run], env: dict, stage: str) -> str:
    summary = _summary(runs, env, stage)
    (out / "summary.md").write_text(summary)
    (out / "summary.json").write_text(json.dumps(
        {"env": env, "stage": stage, "runs": [asdict(r) for r in runs]}, indent=2) + "\n")
    return summary


def _bundle(out: Path, name: str = "prove-bundle.tar.gz") -> Path:
    target = out / name
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path.is_file() and path != target:
                tar.add(path, arcname=str(path.relative_to(out)))
    return target


def _compact(out: Path, runs: list[Run]) -> None:
    keep = {"summary.md", "summary.json", "env.json", "prove-bundle.tar.gz"}
    plots = [out / a for run in runs if run.variant == "chip" for a in run.artifacts
             if a.endswith((".png", ".svg"))][:4]
    for plot in plots:
        shutil.copy2(plot, out / f"{plot.parent.name}-{plot.name}")
        keep.add(f"{plot.parent.name}-{plot.name}")
    for path in list(out.iterdir()):
        if path.name in keep:
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m msda_labs.gpu.prove",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for reports and plots")
    parser.add_argument("--labs", nargs="*", help="lab ids (default: built labs with a gpu stage)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--stage", default="gpu", choices=["gpu", "cpu", "all"],
                        help="the stage to grade (default gpu; cpu is for dry runs)")
    parser.add_argument("--manifest", type=Path, help="classroom.yml (default: the kit's)")
    parser.add_argument("--chips", type=Path, help="folder of labNN.py chips (default: the kit's)")
    parser.add_argument("--timeout", type=float, help="seconds one test's code may run")
    parser.add_argument("--job-timeout", type=float,
                        help="seconds one grading run may take (default: the stage's "
                             "job_timeout_s)")
    parser.add_argument("--speed-only", action="store_true",
                        help="grade only the speed tests of each stage (pytest -k "
                             f"'{SPEED_TESTS}')")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every speed trial this many times in one grading run "
                             "(the fairness table); default 1")
    parser.add_argument("--compact", action="store_true",
                        help="leave only the summaries, the bundle and a few plots in --out")
    args = parser.parse_args(argv)

    from msda_labs.course.manifest import ManifestError, find_manifest, load_manifest

    ensure_importable()
    try:
        manifest = load_manifest(args.manifest or find_manifest())
        labs = [manifest.lab(key) for key in args.labs] if args.labs else \
            [lab for lab in manifest.labs if lab.built and lab.has_gpu]
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.chips is None:
        import msda_labs.chips

        args.chips = Path(msda_labs.chips.__file__).parent
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    select = SPEED_TESTS if args.speed_only else ""
    env = _environment()
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    print(f"[prove] {env.get('device', 'no CUDA device')}; torch {env.get('torch')}, "
          f"triton {env.get('triton')}; labs: {', '.join(lab.id for lab in labs) or 'none'}",
          flush=True)
    if not labs:
        print("error: no built lab has a gpu stage in classroom.yml: nothing to prove",
              file=sys.stderr)
        return 2
    runs: list[Run] = []
    for lab in labs:
        chip = args.chips / f"{lab.id}.py"
        lab_dir = manifest.root / lab.folder
        stage = lab.stage("gpu")
        job_timeout = args.job_timeout or float(stage.job_timeout_s if stage else 1800)
        for variant in args.variants:
            run = Run(lab=lab.id, variant=variant)
            runs.append(run)
            if not chip.is_file() or not lab_dir.is_dir():
                run.error = f"missing {chip if not chip.is_file() else lab_dir}"
                _judge(run, None)
                continue
            submission = out / "submissions" / f"{lab.id}-{variant}" / f"{lab.id}.py"
            submission.parent.mkdir(parents=True, exist_ok=True)
            submission.write_text(make_variant(chip.read_text(), variant, lab.id))
            _grade(lab, lab_dir, submission, run, out, args.stage, args.timeout, job_timeout,
                   select, args.repeat)
            score = "-" if run.score is None else f"{run.score}/{run.max_score}"
            print(f"[prove] {lab.id} {variant:<5} {score:>7} {run.seconds:>7.1f} s  "
                  f"{'ok' if run.ok else 'NOT AS EXPECTED'}: {run.verdict[:160]}", flush=True)
            _write_summaries(out, runs, env, args.stage)  # a run cut short keeps what it did
    summary = _write_summaries(out, runs, env, args.stage)
    _bundle(out)
    if args.compact:
        _compact(out, runs)
    print(summary)
    if not any(run.max_score for run in runs):
        return 2
    return 0 if all(run.ok for run in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
