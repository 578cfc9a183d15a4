"""The handouts' commands: every lab's handout and its exported README say how to run the lab
module by hand with the lab environment's interpreter, from one place
(msda_labs.authoring.handout.by_hand_command; sync keeps the handouts' region in step)."""

import re
from collections import OrderedDict
from pathlib import Path

import pytest
from kit import MANIFEST, ROOT, built_labs

from msda_labs.authoring import handout
from msda_labs.classroom import export
from msda_labs.labenv import ENV_DIR, python_of

LABS = [lab.id for lab in built_labs()]


def _region(text: str) -> str:
    assert handout.RUN_BEGIN in text and handout.RUN_END in text, "no commands region"
    return text.split(handout.RUN_BEGIN, 1)[1].split(handout.RUN_END, 1)[0]


def test_the_command_is_the_lab_environments_interpreter():
    """The interpreter that labenv builds and the noxfile grades with, on the platforms the
    handouts are for (Linux, WSL, a Codespace)."""
    assert handout.by_hand_command("lab05") == ".venv/bin/python lab05.py"
    assert python_of(Path(ENV_DIR)).as_posix() == ".venv/bin/python"


@pytest.mark.parametrize("lab_id", LABS)
def test_every_handout_runs_the_module_with_the_lab_environment(lab_id):
    text = (ROOT / MANIFEST.lab(lab_id).folder / "README.md").read_text()
    commands = _region(text)
    assert f"\n{handout.by_hand_command(lab_id)} " in commands, commands
    # no shell block of the handout runs the module with whatever `python` is first on PATH
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            assert not re.match(rf"\s*(\$ )?python3? {lab_id}\.py\b", line), \
                f"{lab_id}'s handout runs `{line.strip()}` outside the lab environment"


@pytest.mark.parametrize("lab_id", ["lab01", "lab05"])
def test_the_exported_readme_gives_the_same_command(lab_id):
    lab = MANIFEST.lab(lab_id)
    text = export._readme((ROOT / lab.folder / "README.md").read_text(), MANIFEST, lab)
    start = text.split("## Getting started", 1)[1].split("\n## ", 1)[0]
    assert f"`{handout.by_hand_command(lab_id)}`" in start
    assert f"\n{handout.by_hand_command(lab_id)} " in _region(text)


def _tasks(gpu: bool) -> OrderedDict:
    return OrderedDict([("5.1", ["load_point", 3, 3, False]), ("5.2", ["gather", 4, 4, gpu])])


def test_the_gpu_session_is_listed_only_where_a_task_has_gpu_tests():
    with_gpu = handout.run_block("lab05", _tasks(gpu=True))
    without = handout.run_block("lab05", _tasks(gpu=False))
    assert "nox -s lab05-gpu" in with_gpu and "nox -s lab05-gpu" not in without
    # the comments line up in one column, whose width follows the longest command
    assert re.search(r"\nnox -s lab05 -- --task 5\.1 +# only Task 5\.1 \(load_point\)\n", without)
    assert "\n.venv/bin/python lab05.py " in without
    assert all(len(line) <= 100 for line in with_gpu.splitlines())


def test_sync_rewrites_a_stale_commands_region(tmp_path, monkeypatch):
    lab_dir = tmp_path / "lab-05-x"
    lab_dir.mkdir()
    chip = tmp_path / "lab05_chip.py"
    chip.write_text("x = 1\n")
    (lab_dir / "lab05.py").write_text("x = 1\n")
    stale = (f"# Lab 05\n\n## Run it\n\n{handout.RUN_BEGIN}\n```bash\npython lab05.py\n```\n"
             f"{handout.RUN_END}\n\nmore\n")
    (lab_dir / "README.md").write_text(stale)
    monkeypatch.setattr(handout, "collect_tasks", lambda _: _tasks(gpu=False))
    monkeypatch.setattr(handout, "sync_samples", lambda *a, **k: [])
    assert handout.sync_lab(lab_dir, "lab05", chip, check=True) == \
        [f"{lab_dir / 'README.md'} (commands)"]
    assert (lab_dir / "README.md").read_text() == stale  # --check writes nothing
    handout.sync_lab(lab_dir, "lab05", chip)
    fresh = (lab_dir / "README.md").read_text()
    assert _region(fresh).strip() == handout.run_block("lab05", _tasks(gpu=False))
    assert fresh.endswith(f"{handout.RUN_END}\n\nmore\n")
    assert handout.sync_lab(lab_dir, "lab05", chip, check=True) == []
