"""A class regrade that cannot lose the class, end to end (``python -m msda_labs regrade FOLDER``).

* checkouts that hang, flood or slow a judge that reads them unbounded (``.msda/template.txt`` a
  FIFO, or a link to ``/dev/zero``; grading files linked to ``/proc/self/pagemap``), between two
  honest students, graded two at a time: every student graded, the odd ones on their
  ``labNN.py`` alone, the odd entries listed;
* a batch killed with SIGKILL after its first row: the finished rows are kept, no worker
  survives it, and the next run grades only the rest;
* the per-student limit: a student past it is killed with its whole process tree and gets a
  "not graded" row, and the exit status says so;
* a refused seed: exit status non-zero, the gradebook untouched.

Lab 03 (plain Python), about 45 s of CPU in all (nine lab 03 grades).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from kit import MANIFEST, chip_path, separation_unavailable

from msda_labs.classroom.export import export_lab
from msda_labs.grading.isolation import stem

ROOT = Path(__file__).resolve().parents[2]
LAB = "lab03"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return export_lab(MANIFEST, MANIFEST.lab(LAB), tmp_path_factory.mktemp("batch") / "export")


@pytest.fixture
def scratch():
    """This test's TMPDIR: a folder other users may pass through, as /tmp is (the sandbox's
    uid works in it; pytest's own folders are closed to other users)."""
    path = Path(tempfile.mkdtemp(prefix="msda-batch-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _class(base: Path, pristine: Path, students: list[str]) -> Path:
    klass = base / "class"
    for student in students:
        shutil.copytree(pristine, klass / student, symlinks=True)
        shutil.copy(chip_path(LAB), klass / student / f"{LAB}.py")
    return klass


def _env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MSDA_", "GITHUB_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(ROOT / "shared"), TMPDIR=str(tmp))  # this test's scratch only
    return env


def _command(klass: Path, out: Path, *extra: str, pristine: Path) -> list[str]:
    return [sys.executable, "-m", "msda_labs", "regrade", str(klass), "--batch", "--lab", LAB,
            "--pristine", str(pristine), "--gradebook", str(out / "gradebook.csv"),
            "--no-insight", *extra]


def _rows(out: Path) -> dict[str, dict]:
    with open(out / "gradebook.csv", newline="") as fh:
        return {row["student"]: row for row in csv.DictReader(fh)}


def _journal(out: Path) -> list[dict]:
    path = out / "gradebook.rows.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _left_behind(marker: str) -> list[str]:
    """Processes whose command line or environment names ``marker`` (this test's TMPDIR, which
    the batch, its workers and their grading processes inherit)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                text = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                    errors="replace")
                env = Path(f"/proc/{name}/environ").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if marker in text or marker in env:
                found.append(f"{name}: {text[:200]}")
    return found


def test_odd_checkouts_are_graded_within_their_limit_and_the_class_completes(pristine,
                                                                            tmp_path, scratch):
    students = ["aa-honest", "bb-fifo", "cc-zero", "dd-pagemap", "zz-honest"]
    klass = _class(tmp_path, pristine, students)
    template = ".msda/template.txt"
    (klass / "bb-fifo" / template).unlink()
    os.mkfifo(klass / "bb-fifo" / template)
    (klass / "cc-zero" / template).unlink()
    (klass / "cc-zero" / template).symlink_to("/dev/zero")
    linked = ["noxfile.py", sorted(p.relative_to(pristine).as_posix()
                                   for p in (pristine / "tests").glob("*.py"))[0]]
    for rel in linked:
        (klass / "dd-pagemap" / rel).unlink()
        (klass / "dd-pagemap" / rel).symlink_to("/proc/self/pagemap")
    out = tmp_path / "out"
    env = _env(scratch)
    stems = scratch / "stems"  # the batch's zygote stems, kept here to be counted
    separated = not separation_unavailable()
    if separated:
        stems.mkdir(mode=0o700)
        env[stem.STEMS_ENV] = str(stems)
    start = time.monotonic()
    with stem.held(str(stems)) if separated else contextlib.nullcontext():
        proc = subprocess.run(_command(klass, out, "--jobs", "2", "--student-limit", "240",
                                       pristine=pristine),
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        served = sorted(p.name for p in stems.glob("*.sock"))
        if separated:
            stem.stop_all(str(stems))
    took = time.monotonic() - start
    text = proc.stdout + proc.stderr
    # each of the two slots works in one folder, student after student, so that one stem serves
    # every student of a slot (a folder per student started a stem per student); none is left
    assert len(served) <= 2 and (served or not separated), served
    assert not list(scratch.glob("msda-regrade-*")), list(scratch.iterdir())
    assert proc.returncode == 0, text[-3000:]
    rows = _rows(out)
    assert sorted(rows) == students and took < 240 * 3, text[-2000:]
    for student, row in rows.items():  # everyone graded on labNN.py alone: the chip's marks
        assert row["score"] == row["max"] and int(row["max"]) > 0, (student, row)
    assert rows["aa-honest"]["integrity"] == rows["zz-honest"]["integrity"] == "clean"
    assert f"odd: {template} (FIFO)" in rows["bb-fifo"]["integrity"]
    assert f"odd: {template} (symbolic link)" in rows["cc-zero"]["integrity"]
    for rel in linked:
        assert f"{rel} (symbolic link)" in rows["dd-pagemap"]["integrity"]
        assert rel in rows["dd-pagemap"]["integrity"].split(" | ")[0]  # modified, restored
    assert len(_journal(out)) == len(students)


def test_a_killed_batch_keeps_its_rows_and_resumes(pristine, tmp_path, scratch):
    students = ["aa", "bb", "cc"]
    klass = _class(tmp_path, pristine, students)
    out = tmp_path / "out"
    command = _command(klass, out, "--jobs", "2", pristine=pristine)
    proc = subprocess.Popen(command, cwd=ROOT, env=_env(scratch), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not _journal(out) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = _journal(out)
    assert kept, "no row was journalled before the kill"
    assert not (out / "gradebook.csv").exists()
    # the workers got SIGTERM when the batch died and kill their trees; the zygote stems see the
    # batch's hold on their folder go (msda_labs.grading.isolation.stem.held) and end
    deadline = time.monotonic() + 10
    while _left_behind(str(scratch)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _left_behind(str(scratch)), _left_behind(str(scratch))
    first = {entry["checkout"] for entry in kept}

    again = subprocess.run(command, cwd=ROOT, env=_env(scratch), capture_output=True, text=True,
                           timeout=900)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    rows = _rows(out)
    assert sorted(rows) == students
    assert all(row["score"] == row["max"] for row in rows.values()), rows
    graded = [entry["checkout"] for entry in _journal(out)]
    assert sorted(graded) == students, f"graded again after the resume: {graded}"
    assert first <= set(graded[:len(kept)])


def test_a_student_past_the_limit_is_killed_whole_and_the_exit_says_so(pristine, tmp_path,
                                                                       scratch):
    klass = _class(tmp_path, pristine, ["aa"])
    out = tmp_path / "out"
    start = time.monotonic()
    proc = subprocess.run(_command(klass, out, "--student-limit", "2", pristine=pristine),
                          cwd=ROOT, env=_env(scratch), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-2000:]
    assert time.monotonic() - start < 60
    row = _rows(out)["aa"]
    assert row["score"] == "" and "over the per-student limit of 2 s" in row["note"], row
    assert "NOT GRADED: 1 of 1" in proc.stderr
    time.sleep(0.5)
    assert not _left_behind(str(scratch)), _left_behind(str(scratch))


def test_a_refused_seed_exits_non_zero_and_keeps_the_gradebook(pristine, tmp_path, scratch):
    klass = _class(tmp_path, pristine, ["aa"])
    out = tmp_path / "out"
    out.mkdir()
    (out / "gradebook.csv").write_text("student,lab,score\naa,lab03,14\n")
    seed = tmp_path / "seed"
    seed.write_text("12345\n")
    seed.chmod(0o644)
    proc = subprocess.run(_command(klass, out, "--seed-file", str(seed), pristine=pristine),
                          cwd=ROOT, env=_env(scratch), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0
    assert "can be read by other users" in proc.stderr + proc.stdout
    assert (out / "gradebook.csv").read_text() == "student,lab,score\naa,lab03,14\n"
    assert not (out / "gradebook.rows.jsonl").exists()
