"""The direction of imports inside msda_labs: import-linter's contracts in pyproject.toml.

The layers (docs/architecture.md): the command line on top, then the classroom tooling, the
grading flow, the GPU runner, the grading core, and the course model, ground truth and student
modules at the bottom; the grading worker imports neither the command line nor the classroom
tooling, and no package or module imports another in a circle.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shared" / "msda_labs"


def _lint_imports(package_parent: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with the kit's contracts, on the msda_labs in ``package_parent``."""
    if cwd != ROOT:
        shutil.copy(ROOT / "pyproject.toml", cwd / "pyproject.toml")
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    code = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_kit_keeps_every_import_contract():
    proc = _lint_imports(ROOT / "shared", ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout, proc.stdout


def test_a_worker_that_imports_the_command_line_breaks_the_contracts(tmp_path):
    """The check can fail: a copy of the package whose grading plugin imports the CLI."""
    copy = tmp_path / "src" / "msda_labs"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    plugin = copy / "grading" / "judge" / "plugin.py"
    plugin.write_text(plugin.read_text() + "\n\ndef _late():\n    import msda_labs.cli  # noqa\n")
    proc = _lint_imports(tmp_path / "src", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    broken = proc.stdout.split("Broken contracts", 1)[-1]
    assert "The grading worker imports neither the command line" in broken, proc.stdout
    assert "Layers: each layer imports only the layers below it" in broken, proc.stdout
    assert "msda_labs.grading.judge.plugin -> msda_labs.cli" in broken, proc.stdout


# The lab test modules live outside the package, where import-linter does not look. They are the
# judge and the child's probes; they may use the grading core and the course's truth, never the
# layers that decide where and how a whole grade runs.
_LAB_TESTS_MAY_NOT = ("msda_labs.cli", "msda_labs.flow", "msda_labs.classroom", "msda_labs.gpu",
                      "msda_labs.authoring", "msda_labs.__main__")


def _kit_imports(path: Path) -> list[tuple[int, str]]:
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _upward_imports(folder: Path) -> list[str]:
    return [f"{path.relative_to(folder)}:{line}: imports {name}"
            for path in sorted(folder.glob("lab-*/tests/*.py"))
            for line, name in _kit_imports(path)
            if any(name == bad or name.startswith(bad + ".") for bad in _LAB_TESTS_MAY_NOT)]


def test_lab_test_modules_import_only_the_grading_core_and_the_course(tmp_path):
    assert _upward_imports(ROOT) == []
    # and the check sees such an import: a lab test module that reaches for the GPU runner
    fake = tmp_path / "lab-99-x" / "tests"
    fake.mkdir(parents=True)
    (fake / "probes_lab99.py").write_text("from msda_labs.gpu import runner\n")
    assert _upward_imports(tmp_path) == ["lab-99-x/tests/probes_lab99.py:1: imports msda_labs.gpu",
                                         "lab-99-x/tests/probes_lab99.py:1: imports "
                                         "msda_labs.gpu.runner"]


# The child side: what the grading worker imports before it forks the child that runs a
# submission. import-linter holds the package's child-side modules to it (pyproject.toml); this
# holds every lab's probes_labNN.py to it, and the lab modules beside it that a probe imports. A
# probe may use the student package and the child-side grading modules, nothing else of the kit:
# no ground truth, no mistakes, no chip (an earlier lab's comes through msda_labs.student.earlier),
# no judge, no test module.
_CHILD_SIDE = ("msda_labs.student", "msda_labs.grading.judge.probes",
               "msda_labs.grading.judge.guards", "msda_labs.grading.judge.spies",
               "msda_labs.grading.speed.timing", "msda_labs.grading.judge.compare",
               "msda_labs.grading.judge.bigcase", "msda_labs.grading.judge.submission")


def _child_side_problems(folder: Path) -> list[str]:
    problems = []
    for probes in sorted(folder.glob("lab-*/tests/probes_lab*.py")):
        todo, seen = [probes], set()
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            where = path.relative_to(folder)
            for line, name in _kit_imports(path):
                top = name.split(".")[0]
                if top == "msda_labs":
                    if name in ("msda_labs", "msda_labs.grading", "msda_labs.grading.judge",
                                "msda_labs.grading.speed") or any(
                            name == ok or name.startswith(ok + ".") for ok in _CHILD_SIDE):
                        continue
                    problems.append(f"{where}:{line}: imports {name}")
                elif (path.parent / f"{top}.py").is_file():
                    if top.startswith(("test_", "judge_", "truth_", "conftest")):
                        problems.append(f"{where}:{line}: imports the judge's {top}")
                    else:
                        todo.append(path.parent / f"{top}.py")
    return problems


def test_probe_modules_hold_no_ground_truth(tmp_path):
    """Every lab's probes (lab 05's included) import only the child side."""
    assert _child_side_problems(ROOT) == []
    # and the check sees each kind of reach: truth, a chip, a judge module, through a sibling
    fake = tmp_path / "lab-99-x" / "tests"
    fake.mkdir(parents=True)
    (fake / "probes_lab99.py").write_text(
        "import helper_lab99\nfrom msda_labs.grading.judge.probes import shared_run\n"
        "from msda_labs.student.cases import make_inputs\n")
    (fake / "helper_lab99.py").write_text(
        "import judge_lab99\nfrom msda_labs.truth.reference import msda_reference\n"
        "import msda_labs.chips.lab99\nfrom msda_labs.grading.judge import plugin\n")
    (fake / "judge_lab99.py").write_text("")
    assert _child_side_problems(tmp_path) == [
        "lab-99-x/tests/helper_lab99.py:1: imports the judge's judge_lab99",
        "lab-99-x/tests/helper_lab99.py:2: imports msda_labs.truth.reference",
        "lab-99-x/tests/helper_lab99.py:2: imports msda_labs.truth.reference.msda_reference",
        "lab-99-x/tests/helper_lab99.py:3: imports msda_labs.chips.lab99",
        "lab-99-x/tests/helper_lab99.py:4: imports msda_labs.grading.judge.plugin"]
