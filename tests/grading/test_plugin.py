"""The plugin refuses malformed lab tests, and the grade command keeps its exit-status contract."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _lab(tmp_path: Path, test_body: str) -> Path:
    lab = tmp_path / "lab-98-probe"
    (lab / "tests").mkdir(parents=True)
    (lab / "lab98.py").write_text("def f():\n    return 1\n")
    (lab / "tests" / "test_lab98_probe.py").write_text(textwrap.dedent(test_body))
    return lab


def _grade(lab: Path, *extra):
    return subprocess.run([sys.executable, "-m", "msda_labs", "grade", str(lab), *extra],
                          capture_output=True, text=True, timeout=300)


HEADER = '''
import pytest
LAB = "lab98"
MODE = "cpu"
TASKS = {"98.1": "f"}
'''


def test_grades_a_lab_folder_by_path(tmp_path):
    lab = _lab(tmp_path, HEADER + '''
@pytest.mark.task("98.1", points=3)
def test_f(submission):
    assert submission.call("f") == 1
''')
    proc = _grade(lab)
    assert proc.returncode == 0, proc.stderr
    assert "3/3" in proc.stdout


@pytest.mark.parametrize("body, message", [
    ('def test_f(submission):\n    pass\n', "needs exactly one @pytest.mark.task"),
    ('@pytest.mark.task("98.2", points=1)\ndef test_f(submission):\n    pass\n',
     "task '98.2' is not declared in TASKS"),
    ('@pytest.mark.task("98.1", points=1.5)\ndef test_f(submission):\n    pass\n',
     "points must be a non-negative int"),
    ('@pytest.mark.task("98.1", points=1)\n@pytest.mark.tsak("x")\n'
     'def test_f(submission):\n    pass\n', "tsak"),
    ('@pytest.mark.task("98.1", points=1)\n@pytest.mark.stage("cpu")\n'
     'def test_f(submission):\n    pass\n', "the one stage marker is @pytest.mark.stage('gpu')"),
])
def test_malformed_tests_are_a_usage_error(tmp_path, body, message):
    proc = _grade(_lab(tmp_path, HEADER + body))
    assert proc.returncode == 2
    assert message in proc.stdout + proc.stderr


def test_usage_errors_exit_2_with_advice(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "msda_labs", "grade", "lab01", "--submission",
                           str(tmp_path / "missing.py")], capture_output=True, text=True)
    assert proc.returncode == 2 and "no such file" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "msda_labs", "grade", "lab42"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "known labs" in proc.stderr


def test_probes_from_a_sibling_module_and_the_package_run_in_the_child(tmp_path):
    """A probe defined in tests/probes_labNN.py (imported by the test module) and the package's
    own probe (submission.call) both resolve in the isolated child."""
    lab = _lab(tmp_path, HEADER + '''
import probes_lab98 as probes


@pytest.mark.task("98.1", points=2)
def test_sibling_probe(submission):
    assert submission.run(probes.double_f) == 2


@pytest.mark.task("98.1", points=1)
def test_package_probe(submission):
    assert submission.call("f") == 1
''')
    (lab / "tests" / "probes_lab98.py").write_text(
        "def double_f(module):\n    return 2 * module.f()\n")
    proc = _grade(lab)
    assert proc.returncode == 0, proc.stderr
    assert "3/3" in proc.stdout, proc.stdout
