import os
import sys

# `python -m msda_labs grade .` at the root of a student's repository puts that folder first on
# sys.path; the grader imports nothing from it (a module named like an optional import of torch
# or pytest, a metadata folder declaring entry points). The package itself is already imported.
_here = os.getcwd()
sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != _here]

from msda_labs.cli import main  # noqa: E402

raise SystemExit(main())
