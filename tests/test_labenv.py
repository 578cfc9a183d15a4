"""The lab sessions' one environment (msda_labs.labenv): built once, pip only when the pins or
the package's metadata change, and the noxfile's lab sessions use it (no nox virtualenv)."""

from __future__ import annotations

import ast
import json

from kit import ROOT

from msda_labs import labenv


def test_built_once_then_pip_only_when_the_pins_change(tmp_path):
    (tmp_path / "requirements.txt").write_text("torch==1\n")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    calls = []

    def run(cmd):
        calls.append(cmd)
        if cmd[1:3] == ["-m", "venv"]:  # what `python -m venv` leaves: the interpreter
            python = labenv.python_of(tmp_path / ".venv")
            python.parent.mkdir(parents=True)
            python.write_text("")

    def ensure():
        calls.clear()
        return labenv.ensure(tmp_path, run, extras=("jinja2==3.1.6",), log=lambda _: None)

    python = ensure()
    assert python == labenv.python_of(tmp_path / ".venv")
    assert [c[1:3] for c in calls] == [["-m", "venv"], ["-m", "pip"], ["-m", "pip"]]
    assert "jinja2==3.1.6" in calls[1] and calls[2][-2:] == ["-e", str(tmp_path / "shared")]
    stamp = json.loads((tmp_path / ".venv" / labenv.STAMP).read_text())
    assert stamp["key"] == labenv.environment_key(tmp_path, ("jinja2==3.1.6",))
    ensure()
    assert calls == []  # warm: nothing runs
    (tmp_path / "requirements.txt").write_text("torch==2\n")
    ensure()
    assert [c[1:3] for c in calls] == [["-m", "pip"], ["-m", "pip"]]  # no new venv, pip again
    ensure()
    assert calls == []


def test_lab_sessions_run_in_the_shared_environment():
    """Every labNN and progress session of the kit's noxfile has no nox virtualenv and runs
    the shared .venv's interpreter; labNN-gpu exists only for the labs with a GPU stage."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    sessions = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "session":
                    sessions[node.name] = {k.arg: ast.literal_eval(k.value) for k in deco.keywords
                                           if isinstance(k.value, ast.Constant)}
    assert sessions["grade_cpu"].get("venv_backend") == "none"
    assert sessions["progress"].get("venv_backend") == "none"
    source = (ROOT / "noxfile.py").read_text()
    assert "_lab_python(session)" in source and "labenv.py" in source


def test_gpu_sessions_only_for_labs_with_a_gpu_stage():
    import subprocess
    import sys

    from kit import built_labs

    listed = subprocess.run([sys.executable, "-m", "nox", "-l", "-f", str(ROOT / "noxfile.py")],
                            cwd=ROOT, capture_output=True, text=True, timeout=120).stdout
    names = {line.split()[1] for line in listed.splitlines() if line.startswith(("* ", "- "))}
    assert {n for n in names if n.endswith("-gpu")} == \
        {f"{lab.id}-gpu" for lab in built_labs() if lab.has_gpu}
    assert {f"{lab.id}" for lab in built_labs()} | {"progress"} <= names
    assert "nox -s progress" in listed  # the header names it
