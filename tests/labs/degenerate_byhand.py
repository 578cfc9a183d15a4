"""``python labNN.py``'s examples against the degenerate answers (driven by test_degenerate.py).

Usage: python degenerate_byhand.py JOBS.json, a list of ``[lab, step, answer id, file]``: each
file (a chip with one degenerate answer planted) is imported as a module and the self-check of
``step`` (msda_labs.student.check.check on the lab's example) runs on it. Prints
``DEGENERATE-JSON {answer id: [status, report]}``; the status must not be "ok".
"""

import importlib.util
import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    from msda_labs.student.check import case, check

    results = {}
    for lab, step, answer, path in json.loads(Path(argv[0]).read_text()):
        os.chdir(Path(path).parent)  # no my/ folder here: earlier labs come from the chips
        spec = importlib.util.spec_from_file_location(f"degenerate_{lab}_{len(results)}", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            report = check(getattr(module, step), case(int(lab[3:]), step, module), name=step,
                           show=False)
            results[answer] = [report.status, str(report)]
        except Exception as exc:  # noqa: BLE001 - a module that does not even load is a finding
            results[answer] = ["crash", f"{type(exc).__name__}: {exc}"]
    print("DEGENERATE-JSON " + json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
