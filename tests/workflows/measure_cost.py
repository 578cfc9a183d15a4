"""What a grading job costs, measured under act on this host, and what a class costs in Actions
minutes under each ``course.grade_on``.

    python tests/workflows/measure_cost.py --out cost.json [--labs lab01,lab05] [--variant chip]

For each lab, its exported workflow (``grade_on: push``) runs one warm push under act, on a
Python without pip (a job that tried to install would fail): the grading environment comes from
act's cache server, seeded by one cold run (conftest.py; its times are in the seed's
``cold-run.json`` and repeated here). The job time is act's wall time for the job (setting up,
checkout, setup-python, the restore, grading, the reporter); the steps' own times are listed.
The load average is recorded with each run: this host is shared, and its wall times are upper
bounds of what an idle runner takes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

JOB = "run-autograding-tests"
STUDENTS, PUSHES = 100, 10


def billed(seconds: float) -> int:
    """GitHub bills each job's minutes rounded up to a whole minute."""
    return max(1, math.ceil(seconds / 60))


def class_minutes(labs: int, cold_s: float, warm_s: float, gate_s: float,
                  submissions: int = 1, students: int = STUDENTS,
                  pushes: int = PUSHES) -> dict[str, int]:
    """Billed minutes of a class: ``students`` x ``labs`` repositories, ``pushes`` each.

    Each repository's first graded run builds the environment (cold); later graded runs
    restore it (warm). ``submission``: only the submissions run, and each is cold (a tag's run
    saves its cache under the tag, which no other tag can restore). ``throttled``: every push
    still starts a job (the gate's, billed a minute, or a warm grade)."""
    repos = students * labs
    push = repos * (billed(cold_s) + (pushes - 1) * billed(warm_s))
    return {"push": push,
            "submission": repos * submissions * billed(cold_s),
            "throttled": repos * (billed(cold_s) + (pushes - 1) * max(billed(warm_s),
                                                                      billed(gate_s)))}


def measure(labs: list[str], variant: str) -> dict:
    import act_env
    from harness import commit_all, ensure_env_cache, run_act
    from kit import MANIFEST, chip_path

    from msda_labs.classroom.export import export_lab

    setup = act_env.setup()
    cold = ensure_env_cache(setup, lambda out: export_lab(MANIFEST, MANIFEST.lab("lab01"), out,
                                                           git=True))
    rows = []
    for lab_id in labs:
        lab = MANIFEST.lab(lab_id)
        work = Path(tempfile.mkdtemp(prefix=f"msda-cost-{lab_id}-"))
        try:
            repo = export_lab(MANIFEST, lab, work / "repos", git=True)
            if variant == "chip":
                shutil.copy2(chip_path(lab_id), repo / lab.module)
                commit_all(repo, "done")
            load = os.getloadavg()[0]
            run = run_act(setup, repo, work / "act", bare="nothing")
            steps = run.steps(JOB)
            points = [n.message for n in run.notices("Autograding complete")]
            rows.append({
                "lab": lab_id, "variant": variant, "job_s": round(run.job_seconds(JOB), 1),
                "with_act_cleanup_s": round(run.job_seconds(JOB, cleanup=True), 1),
                "act_s": round(run.seconds, 1),
                "result": run.jobs.get(JOB), "points": points[0] if points else None,
                "restored": "Cache restored from key: msda-env-" in run.log,
                "installed": any(name.startswith("Build the grading") for name in steps),
                "steps_s": {k: round(v[1], 1) for k, v in steps.items()},
                "load_before": round(load, 1), "load_after": round(os.getloadavg()[0], 1)})
            print(json.dumps(rows[-1]), flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return {"cold": cold, "warm": rows}


def main() -> int:
    from kit import built_labs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--labs", default="all")
    parser.add_argument("--variant", choices=("chip", "starter"), default="chip")
    args = parser.parse_args()
    labs = ([lab.id for lab in built_labs()] if args.labs == "all"
            else [key.strip() for key in args.labs.split(",") if key.strip()])
    result = measure(labs, args.variant)
    warm = max(row["job_s"] for row in result["warm"])
    # the cold job's own time: its steps (the seed's wall time also holds act's start and its
    # deletion of the job's folder, which a hosted runner does not do)
    cold_s = sum(result["cold"]["steps"].values())
    result["class"] = class_minutes(len(labs), cold_s, warm, gate_s=20)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["class"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
