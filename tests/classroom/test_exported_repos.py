"""Exported template repositories, end to end (quality bar 5 and the integrity promises).

* every ready lab: the export's layout, no answer of the lab itself or a later lab, a clean
  integrity manifest; graded at its root, the starter scores 0 (all not attempted) and the chip,
  copied in as the student module, full marks;
* one representative lab is installed from scratch the way a student does it, `nox -s labNN` in
  a fresh virtualenv (the others reuse this interpreter: a fresh torch+triton install costs about
  a minute and a half here, and it is the same install for every lab);
* a tampered export is flagged by `grade` and regraded correctly by `regrade` (single and batch),
  without touching the student's checkout;
* the Gradescope zip and the Classroom 50 autograder grade a submission end to end.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from classroom_kit import cheapest_lab, clean_env, grade_export, representative_lab, validate
from kit import CHIPS, MANIFEST, all_tests, built_labs, chip_path, separation_unavailable

from msda_labs.authoring.handout import by_hand_command
from msda_labs.classroom.export import ExportError, export_lab, find_leaks, solution_blocks
from msda_labs.cli import main
from msda_labs.course.manifest import load_manifest
from msda_labs.grading.judge import integrity

READY = [lab.id for lab in built_labs()]
CHEAP = cheapest_lab().id
READING_ATTACKS = Path(__file__).resolve().parents[1] / "attacks" / "reading"
REPRESENTATIVE = representative_lab().id


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _first_task(folder: Path) -> str:
    for path in sorted((folder / "tests").glob("test_*.py")):
        match = re.search(r"^TASKS\s*=\s*\{\s*[\"']([0-9.]+)[\"']", path.read_text(), flags=re.M)
        if match:
            return match.group(1)
    raise AssertionError(f"no TASKS in {folder}/tests")


def _tamper(folder: Path) -> str:
    """Append a free 100-point test to the lab's test module; returns its relative path."""
    test_file = sorted((folder / "tests").glob("test_*.py"))[0]
    test_file.write_text(test_file.read_text() + f"""

import pytest as _pytest


@_pytest.mark.task("{_first_task(folder)}", points=100)
def test_free_points(submission):
    pass
""")
    return test_file.relative_to(folder).as_posix()


def _check_full(result: dict, what: str) -> None:
    failing = [(t["name"], t["status"], t["message"]) for _, t in all_tests(result)
               if t["status"] != "passed"]
    assert not failing, f"{what} lost points: {failing}"
    assert result["score"] == result["max_score"] > 0


def _check_zero(result: dict, what: str) -> None:
    assert result["max_score"] > 0
    wrong = [(t["name"], t["status"]) for _, t in all_tests(result)
             if t["status"] != "not_attempted"]
    assert result["score"] == 0 and not wrong, f"{what}: {wrong}"


# ------------------------------------------------------------------------------------- layout

@pytest.mark.parametrize("lab_id", READY)
def test_export_layout(exports, lab_id):
    lab = MANIFEST.lab(lab_id)
    root = exports[lab_id]
    for rel in ("README.md", f"{lab_id}.py", "tests", "shared/msda_labs/cli.py",
                "shared/pyproject.toml", "classroom.yml", "requirements.txt", "noxfile.py",
                ".github/workflows/classroom.yml", ".devcontainer/devcontainer.json",
                ".gitignore", ".gitattributes", ".pre-commit-config.yaml",
                integrity.MANIFEST_PATH):
        assert (root / rel).exists(), rel
    assert not (root / ".git").exists()
    assert (root / "requirements.txt").read_text() == \
        (MANIFEST.root / "requirements.txt").read_text()
    assert "## Getting started" in (root / "README.md").read_text()
    reduced = load_manifest(root / "classroom.yml")
    assert [x.id for x in reduced.labs] == [lab_id]
    assert reduced.labs[0].stages == lab.stages
    chips = sorted(p.stem for p in (root / "shared/msda_labs/chips").glob("lab*.py"))
    kit_chips = sorted(p.stem for p in CHIPS.glob("lab[0-9][0-9].py"))
    assert chips == [c for c in kit_chips if int(c[3:]) < lab.number]
    assert find_leaks(root, lab.number, CHIPS) == []
    # `grep -r` for the lab's own chip: none of its answers appear anywhere in the export
    blocks = solution_blocks(chip_path(lab_id).read_text())
    assert blocks, f"the {lab_id} chip has no solution block to look for"
    text = "\n".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())
    flat = "\n".join(line.strip() for line in text.splitlines() if line.strip())
    assert not [b for b in blocks if b in flat]
    report = integrity.check_folder(root)
    assert report["checked"] and report["modified"] == [], report


def test_leak_check_catches_planted_answers(exports, tmp_path):
    lab = MANIFEST.lab(CHEAP)
    root = _copy(exports[CHEAP], tmp_path / "leaky")
    shutil.copy2(chip_path(CHEAP), root / "shared/msda_labs/chips" / f"{CHEAP}.py")
    assert any("the chip of lab" in leak for leak in find_leaks(root, lab.number, CHIPS))
    (root / "shared/msda_labs/chips" / f"{CHEAP}.py").unlink()
    block = solution_blocks(chip_path(CHEAP).read_text())[0]
    (root / "notes.txt").write_text("copied:\n" + block + "\n")
    assert any("solution block" in leak for leak in find_leaks(root, lab.number, CHIPS))


def test_export_cli_all_with_git_and_refusals(tmp_path, capsys):
    assert main(["export", "all", "--out", str(tmp_path), "--git"]) == 0
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert folders == sorted(MANIFEST.lab(x).folder for x in READY)
    repo = tmp_path / MANIFEST.lab(READY[0]).folder
    count = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=repo, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert count == "1"  # the first and only commit holds the export
    tracked = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True,
                             check=True).stdout.split()
    assert integrity.MANIFEST_PATH in tracked and f"{READY[0]}.py" in tracked
    assert main(["export", READY[0], "--out", str(tmp_path)]) == 2  # exists, not empty
    assert "--force" in capsys.readouterr().err
    planned = [lab for lab in MANIFEST.labs if not lab.built]
    if planned:
        with pytest.raises(ExportError, match="not built"):
            export_lab(MANIFEST, planned[0], tmp_path / "planned")


# ------------------------------------------------------------------------------------ grading

@pytest.mark.parametrize("lab_id", [x for x in READY if x != REPRESENTATIVE])
def test_export_grades_starter_zero_and_chip_full(exports, tmp_path, lab_id):
    root = _copy(exports[lab_id], tmp_path / MANIFEST.lab(lab_id).folder)
    starter = grade_export(root)
    _check_zero(starter, f"{lab_id} exported starter")
    assert starter["integrity"]["checked"] and starter["integrity"]["modified"] == []
    shutil.copy2(chip_path(lab_id), root / f"{lab_id}.py")
    _check_full(grade_export(root), f"{lab_id} exported chip")


def test_fresh_virtualenv_nox_session(exports, tmp_path):
    """As a student: `pip install nox`, `nox -s labNN` in the fresh template repository."""
    lab_id = REPRESENTATIVE
    root = _copy(exports[lab_id], tmp_path / MANIFEST.lab(lab_id).folder)
    env = clean_env()

    def nox(*args):
        proc = subprocess.run([sys.executable, "-m", "nox", *args, "-s", lab_id], cwd=root,
                              env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return json.loads((root / "grade.json").read_text())

    try:
        _check_zero(nox(), f"{lab_id} starter from a fresh virtualenv")
        # the lab sessions share one environment, .venv at the root (msda_labs.labenv)
        venv_python = next(p for p in [root / ".venv" / "bin" / "python",
                                       *(root / ".nox").glob("*/bin/python")] if p.exists())
        probe = subprocess.run([str(venv_python), "-c", "import msda_labs, torch; "
                                "print(msda_labs.__file__)"], capture_output=True, text=True,
                               env=env, check=True)
        assert probe.stdout.strip().startswith(str(root / "shared"))  # not the kit's package
        # the README's command for running the module by hand works in that environment
        by_hand = by_hand_command(lab_id)
        assert f"`{by_hand}`" in (root / "README.md").read_text()
        ran = subprocess.run(by_hand.split(), cwd=root, env=env, capture_output=True, text=True,
                             timeout=600)
        assert ran.returncode == 0 and "Start with Task" in ran.stdout, \
            ran.stdout[-2000:] + ran.stderr[-2000:]
        shutil.copy2(chip_path(lab_id), root / f"{lab_id}.py")
        _check_full(nox("-R"), f"{lab_id} chip from a fresh virtualenv")
    finally:
        for env_dir in (".nox", ".venv"):  # about 2 GB of torch and triton each
            shutil.rmtree(root / env_dir, ignore_errors=True)


# ----------------------------------------------------------------------- tampering, regrade

def test_tampered_export_is_flagged_and_regraded(exports, tmp_path):
    checkout = _copy(exports[CHEAP], tmp_path / "student")
    changed = _tamper(checkout)
    tampered = grade_export(checkout)
    assert changed in tampered["integrity"]["modified"]
    assert "differ from the published ones" in tampered["_stdout"]
    assert tampered["score"] == 100  # the tamper pays off without regrade...
    before = _snapshot(checkout)
    out = tmp_path / "regrade.json"
    proc = subprocess.run([sys.executable, "-m", "msda_labs", "regrade", str(checkout),
                           "--json", str(out)], capture_output=True, text=True, timeout=600,
                          env=clean_env(), cwd=MANIFEST.root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    pristine_max = tampered["max_score"] - 100
    _check_zero(result, "regraded tampered starter")  # ...and not with it
    assert result["max_score"] == pristine_max
    assert changed in result["integrity"]["restored"]
    assert result["integrity"]["modified"] == []
    assert any("restored before grading" in n for n in result["notes"])
    assert _snapshot(checkout) == before  # the student's checkout is untouched


def test_batch_regrade_writes_a_gradebook(exports, tmp_path):
    folder = tmp_path / "class"
    alice = _copy(exports[CHEAP], folder / f"{MANIFEST.lab(CHEAP).folder}-alice")
    shutil.copy2(chip_path(CHEAP), alice / f"{CHEAP}.py")
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@invalid"]
    subprocess.run(["git", "init", "-q"], cwd=alice, check=True)
    subprocess.run([*git, "add", "-A"], cwd=alice, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "done"], cwd=alice, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=alice, capture_output=True,
                          text=True, check=True).stdout.strip()
    # alice started from an older export: a grading file differs from the pristine copy, and her
    # own manifest agrees with it (kit drift, not tampering)
    init = alice / "shared" / "msda_labs" / "__init__.py"
    init.write_text(init.read_text() + "# an older export\n")
    integrity.write_manifest(alice)
    bob = _copy(exports[CHEAP], folder / f"{MANIFEST.lab(CHEAP).folder}-bob")
    changed = _tamper(bob)
    # mallory hides a loop from the rule in a nested def (tests/attacks/reading/): under the
    # instructor's regrade, as under `grade`, the rule reads the def that Python binds
    attack = READING_ATTACKS / f"{CHEAP}_nested_loop.py"
    mallory = _copy(exports[CHEAP], folder / f"{MANIFEST.lab(CHEAP).folder}-mallory")
    (mallory / f"{CHEAP}.py").write_text(chip_path(CHEAP).read_text() + "\n" + attack.read_text())
    (folder / "notes").mkdir()  # not a checkout: a row that says so
    gradebook = tmp_path / "gradebook.csv"
    proc = subprocess.run([sys.executable, "-m", "msda_labs", "regrade", str(folder),
                           "--gradebook", str(gradebook), "--seed", "90210",
                           "--prefix", MANIFEST.lab(CHEAP).folder,
                           "--pristine", str(exports[CHEAP])],
                          capture_output=True, text=True, timeout=600, env=clean_env())
    # a row not graded (notes/) makes the exit status 1, once the gradebook is written
    assert proc.returncode == 1 and "NOT GRADED: 1 of 4 student(s): notes" in proc.stderr, \
        proc.stdout + proc.stderr
    import csv

    rows = {r["student"]: r for r in csv.DictReader(gradebook.open())}
    assert list(next(csv.reader(gradebook.open()))[:6]) == ["student", "lab", "score", "max",
                                                            "integrity", "commit"]
    assert set(rows) == {"alice", "bob", "mallory", "notes"}
    # the export records lab 00's truth for the public cases only: under the secret seed alice is
    # graded in the kit's judge copy, and still compared with the export she started from
    assert rows["alice"]["score"] == rows["alice"]["max"] != "0"
    assert rows["alice"]["integrity"] == "clean" and rows["alice"]["commit"] == head
    assert "1 grading file(s) from an older export" in rows["alice"]["note"]
    assert rows["bob"]["score"] == "0" and rows["bob"]["max"] == rows["alice"]["max"]
    assert changed in rows["bob"]["integrity"]
    assert rows["notes"]["score"] == "" and "labNN.py" in rows["notes"]["note"]
    assert rows["mallory"]["integrity"] == "clean"
    assert 0 < int(rows["mallory"]["score"]) < int(rows["mallory"]["max"]), rows["mallory"]
    rule = re.search(r"^# rule-tests:\s*(\S+)", attack.read_text(), re.M).group(1)
    journal = [json.loads(line) for line in gradebook.with_suffix(".rows.jsonl").open()]
    result = next(e["result"] for e in journal if e["checkout"].endswith("-mallory"))
    assert result["separation"]["separated"] == (not separation_unavailable()), \
        result["separation"]
    lost = [(t["name"], t["score"]) for _, t in all_tests(result) if t["score"] < t["max_score"]]
    assert lost and all(name.startswith(rule) for name, _ in lost), lost
    assert all(score == 0 for _, score in lost), lost


@pytest.mark.parametrize("lab_id", ["lab00", "lab03", "lab08"])
def test_a_template_that_records_its_truth_needs_the_kit_for_a_secret_seed(exports, tmp_path,
                                                                            monkeypatch, lab_id):
    """Labs 00, 03 and 08 carry their truth as a recording of the public cases: regraded against
    such a template with a secret seed, far from the kit, the regrade stops with what to do
    instead of failing every case of every student."""
    from msda_labs.classroom import regrade

    assert regrade.records_its_truth(exports[lab_id], lab_id)
    assert not regrade.records_its_truth(exports[REPRESENTATIVE], REPRESENTATIVE)

    def no_kit(lab, scratch):
        raise regrade.RegradeError("no kit here")

    monkeypatch.setattr(regrade, "_kit_pristine", no_kit)
    with pytest.raises(regrade.RegradeError, match="records the expected values of the public "
                                                   "cases only.*run regrade from the course kit"):
        regrade.regrade_checkout(exports[lab_id], pristine=exports[lab_id], seed=7)
    # with the published cases the template grades itself: nothing is refused
    assert regrade.judge_copy_for(exports[lab_id], lab_id, None, tmp_path) is None


# ---------------------------------------------------------------------------- platforms

def test_gradescope_autograder_end_to_end(tmp_path):
    zip_path = tmp_path / "gs.zip"
    assert main(["export", CHEAP, "--gradescope", str(zip_path)]) == 0
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as zf:
        names = set(zf.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
        zf.extractall(root / "source")
    assert {"setup.sh", "run_autograder", "gradescope_grade.py", "lab/tests"} <= \
        {n if not n.startswith("lab/tests/") else "lab/tests" for n in names}
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111
    chips = [int(m.group(1)) for n in names
             if (m := re.fullmatch(r"lab/shared/msda_labs/chips/lab(\d\d)\.py", n))]
    assert all(number < MANIFEST.lab(CHEAP).number for number in chips), chips
    run = root / "source" / "run_autograder"
    run.chmod(0o755)
    env = clean_env(AUTOGRADER_ROOT=str(root), MSDA_PYTHON=sys.executable,
                    PYTHONPATH=str(root / "source" / "lab" / "shared"))
    results = root / "results" / "results.json"

    (root / "submission").mkdir()
    proc = subprocess.run([str(run)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    empty = json.loads(results.read_text())
    validate(empty, "gradescope-results")
    assert empty["score"] == 0 and f"No {CHEAP}.py" in empty["output"]

    shutil.copy2(chip_path(CHEAP), root / "submission" / f"{CHEAP}.py")
    proc = subprocess.run([str(run)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(results.read_text())
    validate(data, "gradescope-results")
    assert data["tests"] and all(t["status"] == "passed" for t in data["tests"])
    assert data["score"] == sum(t["max_score"] for t in data["tests"]) > 0


def test_classroom50_autograder_restores_and_reports(exports, tmp_path):
    assert main(["export", CHEAP, "--classroom50", str(tmp_path / "c50"), "--classroom", "msda",
                 "--assignment", "spec"]) == 0
    # where Classroom 50 bundles it from: <classroom>/autograders/<assignment>/
    autograder = tmp_path / "c50" / "msda" / "autograders" / "spec" / "autograder.py"
    assert autograder.is_file()
    checkout = _copy(exports[CHEAP], tmp_path / "student")
    shutil.copy2(chip_path(CHEAP), checkout / f"{CHEAP}.py")
    changed = _tamper(checkout)
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@invalid"]
    subprocess.run(["git", "init", "-q"], cwd=checkout, check=True)
    subprocess.run([*git, "add", "-A"], cwd=checkout, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "submit"], cwd=checkout, check=True,
                   env=clean_env(GIT_COMMITTER_DATE="2027-01-02T03:04:05Z"))
    env = clean_env(MSDA_SKIP_INSTALL="1", CLASSROOM="msda", ASSIGNMENT="spec",
                    USERNAME="ada", SUBMISSION_TAG="submit/20270101T000000Z-abc1234")
    proc = subprocess.run([sys.executable, str(autograder)], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((checkout / "result.json").read_text())
    validate(data, "classroom50-result")
    assert data["datetime"] == "2027-01-02T03:04:05Z"  # the graded commit's date
    assert data["graded_at"] != data["datetime"] and data["assignment_type"] == "individual"
    assert (data["classroom"], data["assignment"], data["owner"]) == ("msda", "spec", "ada")
    graded = [t for t in data["tests"] if not t["test-name"].startswith("integrity")]
    assert data["score"] == data["max-score"] == sum(t["max-score"] for t in graded) > 0
    assert not any("free_points" in t["test-name"] for t in graded)  # the pristine tests ran
    flag = [t for t in data["tests"] if t["test-name"].startswith("integrity")]
    assert len(flag) == 1 and not flag[0]["passed"] and changed in flag[0]["test-name"]
