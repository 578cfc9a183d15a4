"""The speed attack table, the chips' judge-clock times against the in-process ones, and a sample
class's leaderboard: what docs/results/h200-speed-protocol.json records, measured on a GPU.

    PYTHONPATH=shared python tests/attacks/speed/table.py --out DIR [--part attacks|prove|all]

``attacks``: every file of this folder, lab 05's chip, its slow copy (msda_labs.mistakes
.submissions) and an honest torch operator are graded twice on Task 5.8: the old way (the
student's process times itself with ``race_all``; the judge times the baselines and checks the
first output: the speed test before the judge's clock) and the new way (``python -m msda_labs
grade lab-05-forward-correct --stage gpu``: the judge's clock). The lab 05 and lab 08 chips are
timed three times each way (the in-process race: device time and end to end; the judge's clock:
time per call, its spread and the protocol's overhead). The new grade reports of lab 05 make a
sample class, whose leaderboard (HTML and CSV) is written. ``prove``: ``msda_labs.gpu.prove`` on
labs 06, 08 and 10 (the chip keeps every speed point, the slow copy loses them).

Results: DIR/speed-protocol.json, DIR/leaderboard.html, DIR/leaderboard.csv, DIR/reports/,
DIR/prove/. Without CUDA it runs the old and new ways on the CPU on a small case (plumbing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
LAB05 = ROOT / "lab-05-forward-correct"
sys.path[:0] = [str(ROOT / "shared"), str(LAB05 / "tests"), str(HERE)]

import torch  # noqa: E402

from msda_labs.grading.isolation.executor import Executor  # noqa: E402
from msda_labs.grading.judge.results import GradeResult  # noqa: E402
from msda_labs.grading.judge.submission import Submission  # noqa: E402

GPU = torch.cuda.is_available()
MODE = "gpu" if GPU else "interpret"  # without CUDA the chips run in Triton's interpreter
if not GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")


class _Session:
    def __init__(self, executor, timeout=300.0):
        self._executor = executor
        self.timeout = timeout
        self.notes: list[str] = []
        self.speed: list[dict] = []
        self.last_output = ""

    def executor(self):
        return self._executor


def _submission(executor) -> Submission:
    sub = Submission.__new__(Submission)
    sub._session, sub.mode, sub.path = _Session(executor), MODE, executor.submission
    return sub


def _executor(path: Path, lab: int, preload: list[Path]) -> Executor:
    lab_dir = {5: LAB05, 8: ROOT / "lab-08-concurrent-writes"}[lab]
    return Executor(path, workdir=lab_dir, preload=[str(p) for p in preload],
                    default_timeout=300, lab=lab, lab_dir=lab_dir)


def _case():
    from msda_labs.truth.cases import DECODER, MULTI_LEVEL

    return (DECODER, "float16") if GPU else (MULTI_LEVEL, "float32")


# -- the old way: the student's process times itself ----------------------------------------------
def old_score(path: Path) -> dict:
    """Task 5.8 as it was graded before the judge's clock (the same calls as that test)."""
    import judge_lab05 as judge
    import probes_lab05 as probes

    from msda_labs.grading import expect_close
    from msda_labs.grading.judge.baseline import with_baselines
    from msda_labs.grading.judge.probes import timed_output
    from msda_labs.grading.judge.submission import SubmissionProblem
    from msda_labs.grading.speed.timing import check_reference_speed
    from msda_labs.truth.cases import make_inputs
    from msda_labs.truth.reference import msda_reference

    case, dtype_name = _case()
    dtype = getattr(torch, dtype_name)
    start = time.monotonic()
    with _executor(path, 5, [LAB05 / "tests" / "probes_lab05.py"]) as ex:
        sub = _submission(ex)
        try:
            measured = with_baselines(sub.run(probes.speed_probe, case, dtype_name),
                                      judge.speed_baselines(case, dtype_name))
            value, shapes, _s, loc, attn = make_inputs(case, dtype)
            expect_close(timed_output(measured),
                         msda_reference(value.double(), shapes, loc.double(), attn.double()),
                         what="msda_forward (the call that is timed)", case=case.describe(),
                         dtype=dtype)
            line = check_reference_speed(measured, what=f"msda_forward on {case.id}",
                                         limit=1.0, submission=sub)
            return {"score": 2, "line": line, "times_us": measured["times_us"],
                    "seconds": round(time.monotonic() - start, 1)}
        except (AssertionError, SubmissionProblem) as exc:
            return {"score": 0, "line": str(exc)[:400],
                    "seconds": round(time.monotonic() - start, 1)}


# -- the new way: the grader, on the judge's clock -------------------------------------------------
def new_grade(path: Path, reports: Path, name: str, lab_dir: Path = LAB05) -> dict:
    report = reports / f"{name}.json"
    env = {**os.environ, "MSDA_GPU_RUNNER": "local", "PYTHONPATH": str(ROOT / "shared"),
           "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "msda_labs", "grade", str(lab_dir),
                           "--submission", str(path), "--stage", "gpu", "--json", str(report)],
                          capture_output=True, text=True, env=env, cwd=reports, timeout=420)
    (reports / f"{name}.log").write_text(proc.stdout + proc.stderr)
    found = {"seconds": round(time.monotonic() - start, 1), "exit": proc.returncode}
    if not report.is_file():
        return {**found, "score": None, "line": (proc.stdout + proc.stderr)[-400:]}
    data = json.loads(report.read_text())
    found["tests"] = {test["name"]: [test["score"], test["max_score"], test["message"][:300]]
                      for ex in data["exercises"] for test in ex["tests"]}
    for ex in data["exercises"]:
        for test in ex["tests"]:
            if test["name"] == "test_forward_speed_against_the_reference":
                found.update(score=test["score"], status=test["status"],
                             line=test["message"][:400])
    found["gpu_stage"] = f"{data['score']}/{data['max_score']}"
    found["speed"] = data.get("speed", [])
    found["notes"] = [n for n in data.get("notes", []) if n.startswith("speed of")]
    return found


def submissions(folder: Path) -> dict[str, Path]:
    """chip, slow copy, honest torch operator, and every attack of this folder."""
    from msda_labs.mistakes.submissions import planted

    chip = ROOT / "shared" / "msda_labs" / "chips" / "lab05.py"
    folder.mkdir(parents=True, exist_ok=True)
    made = {"chip": chip}
    (folder / "slow.py").write_text(planted(chip.read_text(), "slow"))
    made["slow"] = folder / "slow.py"
    text = (HERE / "lab05_timed_pattern.py").read_text()
    base = text[text.index("import time"):text.index("_SEEN = set()")]
    (folder / "torch_operator.py").write_text(
        base + "\ndef msda_forward(value, spatial_shapes, level_start_index,\n"
        "                 sampling_locations, attention_weights, BLOCK_Q=32):\n"
        "    return _honest(value, spatial_shapes, level_start_index, sampling_locations,\n"
        "                   attention_weights)\n")
    made["torch_operator"] = folder / "torch_operator.py"
    for path in sorted(HERE.glob("lab05_*.py")):
        made[path.stem.removeprefix("lab05_")] = path
    return made


# -- the chips: judge's clock against the in-process race -----------------------------------------
def chip_times(lab: int, repeats: int = 3) -> dict:
    from dataclasses import asdict

    from msda_labs.grading import expect_close
    from msda_labs.grading.judge.speedjudge import expect_close_but_borders, judge_msda_speed
    from msda_labs.truth.cases import DECODER, MULTI_LEVEL
    from msda_labs.truth.reference import msda_reference, reference_grads

    case = DECODER if GPU else MULTI_LEVEL
    dtype_name = ("float16" if lab == 5 else "float32") if GPU else "float32"
    dtype = getattr(torch, dtype_name)
    chip = ROOT / "shared" / "msda_labs" / "chips" / f"lab0{lab}.py"
    fields = {k: v for k, v in asdict(case).items()}
    out = {"lab": f"lab0{lab}", "case": case.id, "dtype": dtype_name, "in_process": [],
           "judge_clock": []}
    with _executor(chip, lab, [HERE / "inprocess_probe.py"]) as ex:
        import inprocess_probe

        for _ in range(repeats):
            race = ex.run(inprocess_probe.race, fields, dtype_name,
                          "forward" if lab == 5 else "backward", mode=MODE)
            if race.kind != "ok":
                out["in_process"].append({"error": race.message})
                continue
            out["in_process"].append({"device_us": race.value["times_us"]["yours"],
                                      "e2e_us": race.value.get("e2e_us", {}).get("yours"),
                                      "method": race.value["method"]})
        for _ in range(repeats):
            sub = _submission(ex)
            if lab == 5:
                def truth(inputs):
                    value, shapes, _s, loc, attn = inputs
                    return msda_reference(value.double(), shapes, loc.double(), attn.double())

                def close(res, ref, what):
                    expect_close(res, ref, what=what, dtype=dtype)
                measured = judge_msda_speed(
                    sub, case, dtype_name, fn="msda_forward", truth=truth, close=close,
                    baselines={"reference": lambda v, s, _st, lo, a: msda_reference(v, s, lo, a)})
            else:
                def truth(inputs):
                    value, shapes, _s, loc, attn, grad = inputs
                    return reference_grads(value, shapes, loc, attn, grad)

                def close(res, refs, what):
                    for i, (got, ref) in enumerate(zip(res, refs)):
                        if i == 1:  # grad_loc, as lab 08's speed test checks it
                            expect_close_but_borders(got, ref, what=what, dtype=dtype)
                        else:
                            expect_close(got, ref, what=what, dtype=dtype, backward=True)
                measured = judge_msda_speed(sub, case, dtype_name, fn="msda_backward",
                                            call="backward", truth=truth, close=close,
                                            baselines={}, verify=2)
            out["judge_clock"].append({k: measured[k] for k in (
                "times_us", "spread_us", "overhead_us", "overhead_round_us", "n", "rounds",
                "verified", "floor_us", "bandwidth_gbs")})

    def spread(values):
        values = [v for v in values if isinstance(v, (int, float))]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)} \
            if values else None

    out["summary"] = {
        "in_process_device_us": spread([r.get("device_us") for r in out["in_process"]]),
        "in_process_e2e_us": spread([r.get("e2e_us") for r in out["in_process"]]),
        "judge_clock_us": spread([r["times_us"]["yours"] for r in out["judge_clock"]]),
        "judge_clock_round_spread_us": spread([r["spread_us"]["yours"]
                                               for r in out["judge_clock"]]),
        "overhead_us_per_call": spread([r["overhead_us"] for r in out["judge_clock"]]),
    }
    return out


def noop_bias(folder: Path, repeats: int = 3) -> dict:
    """What a submission that does nothing (zeros of the right shape) measures on the judge's
    clock: the child's protocol cost less the clean server's, the protocol's own bias."""
    from msda_labs.grading.judge.speedjudge import judge_msda_speed

    case, dtype_name = _case()
    path = folder / "does_nothing.py"
    path.write_text("import torch\n\n\ndef msda_forward(value, spatial_shapes, level_start_index,"
                    " sampling_locations, attention_weights, BLOCK_Q=32):\n"
                    "    return torch.zeros(value.shape[0], sampling_locations.shape[1],\n"
                    "                       value.shape[2] * value.shape[3], dtype=value.dtype,\n"
                    "                       device=value.device)\n")
    found = []
    with _executor(path, 5, []) as ex:
        for _ in range(repeats):
            measured = judge_msda_speed(_submission(ex), case, dtype_name, fn="msda_forward",
                                        truth=lambda inputs: None,
                                        close=lambda res, ref, what: None, baselines={})
            found.append({"yours_minus_noop_us": measured["raw_times_us"]["yours"],
                          "overhead_us": measured["overhead_us"],
                          "spread_us": measured["spread_us"]})
    return {"case": case.id, "dtype": dtype_name, "runs": found}


def _environment() -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__, "gpu": GPU,
           "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = "missing"
    if GPU:
        env["device"] = torch.cuda.get_device_name()
    return env


def part_attacks(out: Path, result: dict) -> None:
    reports = out / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    made = submissions(out / "submissions")
    rows = []
    for name, path in made.items():
        row = {"submission": name, "old": old_score(path)}
        if GPU:
            row["new"] = new_grade(path, reports, name)
        rows.append(row)
        print(f"{name:>20}: old {row['old']['score']}  new "
              f"{row.get('new', {}).get('score', '-')}", flush=True)
        result["attacks"] = rows
        _save(out, result)
    try:
        result["noop_bias"] = noop_bias(out / "submissions")
    except Exception as exc:  # noqa: BLE001 - keep what the other parts measured
        result["noop_bias"] = {"error": f"{type(exc).__name__}: {exc}"}
    _save(out, result)
    result["chips"] = []
    for lab in (5, 8):
        try:
            result["chips"].append(chip_times(lab))
        except Exception as exc:  # noqa: BLE001 - keep what the other parts measured
            result["chips"].append({"lab": f"lab0{lab}", "error": f"{type(exc).__name__}: {exc}"})
        _save(out, result)
    if GPU:
        from msda_labs.classroom.leaderboard import write_leaderboard

        graded = []
        for row in rows:
            report = reports / f"{row['submission']}.json"
            if report.is_file():
                graded.append(SimpleNamespace(student=row["submission"], lab="lab05",
                                              result=GradeResult.from_dict(
                                                  json.loads(report.read_text()))))
        result["leaderboard"] = write_leaderboard(graded, out / "leaderboard.html",
                                                  title="Speed leaderboard: a sample class, "
                                                        "lab 05 on the H200")[2]


def part_chips(out: Path, result: dict) -> None:
    """The protocol's bias and the chips' two timings, then the GPU stage of labs 10, 06 and 08
    graded on their chips (each speed test on the judge's clock), as long as the time lasts."""
    folder = out / "submissions"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        result["noop_bias"] = noop_bias(folder)
    except Exception as exc:  # noqa: BLE001 - keep what the other parts measured
        result["noop_bias"] = {"error": f"{type(exc).__name__}: {exc}"}
    _save(out, result)
    result["chips"] = []
    for lab in (5, 8):
        try:
            result["chips"].append(chip_times(lab))
        except Exception as exc:  # noqa: BLE001
            result["chips"].append({"lab": f"lab0{lab}", "error": f"{type(exc).__name__}: {exc}"})
        _save(out, result)
    reports = out / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    result["chip_grades"] = {}
    for lab, folder_name in (("lab10", "lab-10-ship-it"), ("lab06", "lab-06-make-it-fast"),
                             ("lab08", "lab-08-concurrent-writes")):
        chip = ROOT / "shared" / "msda_labs" / "chips" / f"{lab}.py"
        found = new_grade(chip, reports, f"{lab}-chip", ROOT / folder_name)
        result["chip_grades"][lab] = {k: found.get(k) for k in
                                      ("gpu_stage", "tests", "speed", "notes", "seconds")}
        _save(out, result)


def part_prove(out: Path, result: dict) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared")}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "msda_labs.gpu.prove", "--out",
                           str(out / "prove"), "--labs", "lab06", "lab08", "lab10",
                           "--variants", "chip", "slow", "--compact"],
                          capture_output=True, text=True, env=env, timeout=560)
    result["prove"] = {"exit": proc.returncode, "seconds": round(time.monotonic() - start, 1),
                       "tail": (proc.stdout + proc.stderr)[-3000:]}
    summary = out / "prove" / "summary.json"
    if summary.is_file():
        result["prove"]["summary"] = json.loads(summary.read_text())


def _save(out: Path, result: dict) -> None:
    (out / "speed-protocol.json").write_text(json.dumps(result, indent=2, default=str) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--part", choices=["attacks", "chips", "prove", "all"], default="all")
    ns = parser.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    result = {"environment": _environment()}
    if ns.part in ("attacks", "all"):
        part_attacks(ns.out, result)
    if ns.part == "chips":
        part_chips(ns.out, result)
    if ns.part in ("prove", "all") and GPU:
        part_prove(ns.out, result)
    _save(ns.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
