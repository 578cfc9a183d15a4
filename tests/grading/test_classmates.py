"""A submission cannot be graded on a classmate's work: the class's checkouts are closed to every
child of a separated batch regrade.

The borrower's ``lab03.py`` looks, when a child imports it, for every other ``lab03.py`` of the
class folder; where it can read one that holds a real answer it runs that one and so answers
with the classmate's functions (a module a student could write, knowing how the instructor's
regrade lays out the class: ``regrade-class.yml`` fetches a batch into ``../submissions``). Its
fallback answers say which classmates' files it could read. The class is graded with the child's
private world off: that world hides only world-writable folders (and is off in the gpu mode), so
what is tested here is the regrade's own closing of the checkouts. Two lab 03 regrades, about
8 s of CPU. Separation needs root; elsewhere this test skips.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from kit import MANIFEST, chip_path, separation_unavailable

from msda_labs.classroom.export import export_lab

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attacks.suite import regrade_class  # noqa: E402

pytestmark = pytest.mark.skipif(bool(separation_unavailable()),
                                reason=f"the regrade runs separated here: "
                                       f"{separation_unavailable()}")

LAB = "lab03"  # plain Python: its tests read no source for open() or exec
BORROWER = '''
import glob, os

CLASS = {klass!r}
_readable, _answer = [], None
for path in sorted(glob.glob(os.path.join(CLASS, "*", "lab03.py"))):
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        continue
    _readable.append(path)
    stubs = [line for line in text.splitlines() if line.strip().startswith("raise NotImpl")]
    if "BORROWER" not in text and not stubs:
        _answer = text

if _answer is not None:
    exec(compile(_answer, "classmate", "exec"))  # BORROWER: the classmate's functions are ours
else:
    def _refuse(*args, **kwargs):
        raise RuntimeError("classmates readable: " + repr(_readable))

    sectors_touched = efficiency = forward_min_bytes = tiling_speedup = _refuse
'''


@pytest.fixture
def open_folder():
    """A folder every user may pass through, as a class's folder of clones usually is (pytest's
    own temporary folders are closed to other users, which would hide the class by accident)."""
    path = Path(tempfile.mkdtemp(prefix="msda-classmates-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_submission_cannot_read_a_classmates_module(open_folder):
    pristine = export_lab(MANIFEST, MANIFEST.lab(LAB), open_folder / "export")
    klass = open_folder / "class"
    for student in ("aa-borrower", "zz-honest"):
        shutil.copytree(pristine, klass / student)
    shutil.copy(chip_path(LAB), klass / "zz-honest" / f"{LAB}.py")
    (klass / "aa-borrower" / f"{LAB}.py").write_text(BORROWER.format(klass=str(klass)))
    for path in (klass, klass / "zz-honest", klass / "zz-honest" / f"{LAB}.py"):
        assert path.stat().st_mode & 0o005, f"{path} starts open to every user, as a clone is"

    results, notes, output = regrade_class(klass, LAB, pristine, seed=None,
                                           env={"MSDA_PRIVATE_WORLD": "0"})
    honest_result, borrowed = results["zz-honest"], results["aa-borrower"]
    assert honest_result and honest_result["score"] == honest_result["max_score"] > 0, output
    assert borrowed and (borrowed.get("separation") or {}).get("separated"), (notes, output)
    assert borrowed["score"] == 0, (f"the borrower scored {borrowed['score']}/"
                                    f"{borrowed['max_score']}: it ran a classmate's module")
    messages = [t.get("message") or "" for ex in borrowed["exercises"] for t in ex["tests"]]
    said = [m for m in messages if "classmates readable" in m]
    assert said, f"the borrower's own answers did not run: {messages[:3]}"
    assert all("zz-honest" not in m for m in said), said[0]
