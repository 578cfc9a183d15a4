"""How much ``regrade --jobs`` gains on this machine: a class of N lab 03 chips (a CPU-only lab)
regraded as one batch with each number of jobs given, alternating, and one JSON line per run.

    python scripts/regrade_jobs_speedup.py --students 16 --jobs 1 8 [--rounds 2]

Each run is ``python -m msda_labs regrade CLASS --batch --lab lab03 --pristine EXPORT --jobs J``
in a subprocess (with the machine's separation, as the instructor's regrade has it); the line
gives its wall time, the CPU seconds of its process tree and the gradebook's rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "shared"))

LAB = "lab03"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=16)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)

    from msda_labs.classroom.export import export_lab
    from msda_labs.course.manifest import find_manifest, load_manifest

    manifest = load_manifest(find_manifest(ROOT))
    base = Path(tempfile.mkdtemp(prefix="msda-jobs-"))
    base.chmod(0o755)  # the sandbox's uid passes through it, as through /tmp
    try:
        pristine = export_lab(manifest, manifest.lab(LAB), base / "export")
        klass = base / "class"
        for i in range(args.students):
            shutil.copytree(pristine, klass / f"s{i:03d}", symlinks=True)
            shutil.copy(ROOT / "shared/msda_labs/chips" / f"{LAB}.py",
                        klass / f"s{i:03d}" / f"{LAB}.py")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MSDA_", "GITHUB_"))}
        env.update(PYTHONPATH=str(ROOT / "shared"), TMPDIR=str(base))
        for round_no in range(args.rounds):
            order = args.jobs if round_no % 2 == 0 else args.jobs[::-1]
            for jobs in order:
                out = base / f"out-{round_no}-{jobs}"
                out.mkdir()
                before, began = os.times(), time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, "-m", "msda_labs", "regrade", str(klass), "--batch", "--lab",
                     LAB, "--pristine", str(pristine), "--gradebook", str(out / "g.csv"),
                     "--no-insight", "--jobs", str(jobs)],
                    env=env, capture_output=True, text=True, timeout=3600)
                wall, after = time.perf_counter() - began, os.times()
                book = out / "g.csv"
                rows = len(book.read_text().splitlines()) - 1 if book.exists() else 0
                cpu = (after.children_user + after.children_system
                       - before.children_user - before.children_system)
                print(json.dumps({"students": args.students, "jobs": jobs, "round": round_no,
                                  "exit": proc.returncode, "wall_s": round(wall, 1),
                                  "cpu_s": round(cpu, 1), "rows": rows,
                                  "cores": os.cpu_count(),
                                  "error": proc.stderr[-300:] if proc.returncode else ""}),
                      flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
