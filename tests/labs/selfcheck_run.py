"""Run ``python labNN.py``'s ``__main__`` block on several versions of one lab module, in this one
process, and print what each printed as JSON (driven by test_selfcheck.py).

Usage: python selfcheck_run.py JOBS.json, a list of ``[lab, name, file, direct]``.

Each file is copied to a fresh folder as ``labNN.py`` and run as ``__main__`` (runpy), as a
student runs it. With ``direct`` (a lab whose module has no ``run_lab`` block yet), the module is
imported and ``run_lab`` called on it instead. Prints ``{lab: {name: {stdout, seconds}}}``.
"""

import contextlib
import io
import json
import os
import runpy
import shutil
import sys
import tempfile
import time
from pathlib import Path


def run_one(lab: str, source: Path, direct: bool) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"selfcheck-{lab}-"))
    target = folder / f"{lab}.py"
    shutil.copy(source, target)
    os.chdir(folder)  # no my/ folder here: earlier labs come from the chips
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        if direct:
            from msda_labs.student.check import run_lab

            namespace = runpy.run_path(str(target), run_name=f"selfcheck_{lab}")
            run_lab(int(lab[3:]), namespace)
        else:
            runpy.run_path(str(target), run_name="__main__")
    return {"stdout": out.getvalue(), "seconds": round(time.perf_counter() - start, 2)}


def main(argv: list[str]) -> None:
    results: dict = {}
    for lab, name, path, direct in json.loads(Path(argv[0]).read_text()):
        results.setdefault(lab, {})[name] = run_one(lab, Path(path), direct)
    print("SELFCHECK-JSON " + json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
