"""Record what a lab's judge-side truth (``lab-NN-*/tests/truth_labNN.py``) gives on the calls
its tests make, into ``tests/truth_labNN.pt``, which the lab's template carries in its place.

    python scripts/record_truth.py lab00 lab03

Grades the chip and the starter on the CPU with ``$MSDA_TRUTH_RECORD`` set (every judged call
is recorded; the tests take their truth before either of a test's checks runs, so both runs
make every call a test can make), and merges what the judge processes wrote. The kit's own grading
checks each call against the recording (:mod:`msda_labs.grading.judge.owntruth`), so a stale
recording fails the self-test's chip and starter grades.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "shared"))


def record(lab_id: str) -> Path:
    import torch

    from msda_labs.course.manifest import find_manifest, load_manifest
    from msda_labs.grading.judge.owntruth import ARGS, RECORD_ENV

    manifest = load_manifest(find_manifest(ROOT))
    lab = manifest.lab(lab_id)
    module = ROOT / lab.folder / "tests" / f"truth_{lab.id}.py"
    if not module.is_file():
        raise SystemExit(f"{lab.id} has no {module.relative_to(ROOT)}")
    merged: dict = {}
    with tempfile.TemporaryDirectory(prefix="msda-truth-") as tmp:
        env = {**os.environ, RECORD_ENV: tmp, "MSDA_CASE_SALT": ""}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "shared"),
                                                          env.get("PYTHONPATH")]))
        for extra in (["--solution"], []):
            subprocess.run([sys.executable, "-m", "msda_labs", "grade", lab.id, "--stage", "cpu",
                            "--json", str(Path(tmp) / "grade.json"), *extra],
                           cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        for part in sorted(Path(tmp).glob(f"{lab.id}-*.pt")):
            for name, calls in torch.load(part, weights_only=True).items():
                if name == ARGS:  # {function: {digest: arguments}}: merged per function
                    for function, args in calls.items():
                        merged.setdefault(ARGS, {}).setdefault(function, {}).update(args)
                else:
                    merged.setdefault(name, {}).update(calls)
    if not merged:
        raise SystemExit(f"no judged call was recorded for {lab.id}")
    target = module.with_suffix(".pt")
    torch.save({name: dict(sorted(calls.items())) for name, calls in sorted(merged.items())},
               target)
    return target


if __name__ == "__main__":
    for key in sys.argv[1:] or ["lab00", "lab03"]:
        path = record(key)
        print(f"recorded {path.relative_to(ROOT)}")
