"""The integrity manifest: which files grade, and every kind of change to them is reported."""

import shutil
import subprocess

import pytest

from msda_labs.grading.judge import integrity


@pytest.fixture
def repo(tmp_path):
    """A miniature export: grading files, the student module, a manifest."""
    root = tmp_path / "lab-05-x"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_lab05_x.py").write_text("def test_a():\n    pass\n")
    (root / "shared" / "msda_labs" / "chips").mkdir(parents=True)
    (root / "shared" / "msda_labs" / "__init__.py").write_text("")
    (root / "shared" / "msda_labs" / "chips" / "lab04.py").write_text("X = 4\n")
    (root / ".github" / "workflows").mkdir(parents=True)
    (root / ".github" / "workflows" / "classroom.yml").write_text("name: x\n")
    for name in ("noxfile.py", "requirements.txt", "classroom.yml", "README.md", "lab05.py"):
        (root / name).write_text(f"# {name}\n")
    integrity.write_manifest(root)
    return root


def test_fresh_export_is_clean_and_lists_only_grading_files(repo):
    report = integrity.check_folder(repo)
    assert report["checked"] and report["modified"] == []
    listed = set(integrity.read_manifest(repo / integrity.MANIFEST_PATH))
    assert listed == {"tests/test_lab05_x.py", "shared/msda_labs/__init__.py",
                      "shared/msda_labs/chips/lab04.py", ".github/workflows/classroom.yml",
                      "noxfile.py", "requirements.txt", "classroom.yml"}


def test_student_work_and_litter_are_not_grading_files(repo):
    (repo / "lab05.py").write_text("def msda(): return 1\n")
    (repo / "README.md").write_text("notes\n")
    (repo / "my").mkdir()
    (repo / "my" / "lab04.py").write_text("mine\n")
    (repo / "tests" / "__pycache__").mkdir()
    (repo / "tests" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (repo / "shared" / "msda_labs.egg-info").mkdir()
    (repo / "shared" / "msda_labs.egg-info" / "PKG-INFO").write_text("x")
    (repo / "grade.json").write_text("{}")
    (repo / "scratch.py").write_text("print(1)\n")  # shadows nothing
    # Classroom 50's accept shim; grading runs the published workflow, not added ones
    (repo / ".github" / "workflows" / "autograde.yaml").write_text("name: shim\n")
    assert integrity.check_folder(repo)["modified"] == []


@pytest.mark.parametrize("change,expected,kind", [
    (lambda r: (r / "tests" / "test_lab05_x.py").write_text("def test_a(): assert True\n"),
     "tests/test_lab05_x.py", "changed"),
    (lambda r: (r / "noxfile.py").unlink(), "noxfile.py", "missing"),
    (lambda r: (r / ".github" / "workflows" / "classroom.yml").write_text("name: y\n"),
     ".github/workflows/classroom.yml", "changed"),
    (lambda r: (r / "tests" / "conftest.py").write_text("x = 1\n"), "tests/conftest.py", "added"),
    (lambda r: (r / "conftest.py").write_text("x = 1\n"), "conftest.py", "added"),
    (lambda r: (r / "torch.py").write_text("x = 1\n"), "torch.py", "added"),
    (lambda r: ((r / "pytest").mkdir(), (r / "pytest" / "__init__.py").write_text("")),
     "pytest/", "added"),
    (lambda r: (r / "shared" / "msda_labs" / "chips" / "lab05.py").write_text("ANSWER = 1\n"),
     "shared/msda_labs/chips/lab05.py", "added"),
])
def test_every_kind_of_tampering_is_reported(repo, change, expected, kind):
    change(repo)
    report = integrity.check_folder(repo)
    assert expected in report["modified"], report
    assert expected in report[kind], report


def test_a_deleted_manifest_is_itself_reported(repo):
    (repo / integrity.MANIFEST_PATH).unlink()
    report = integrity.check_folder(repo)
    assert report["checked"] and report["modified"] == [integrity.MANIFEST_PATH]
    (repo / integrity.MANIFEST_PATH).parent.mkdir(exist_ok=True)
    (repo / integrity.MANIFEST_PATH).write_text("garbage\n")
    assert integrity.check_folder(repo)["modified"] == [integrity.MANIFEST_PATH]


def test_kit_lab_folders_are_not_checked(kit_root):
    report = integrity.check_folder(kit_root / "lab-01-the-spec")
    assert report == {"checked": False, "modified": [], "reason": report["reason"]}


def test_compare_trees_against_a_pristine_copy(repo, tmp_path):
    pristine = tmp_path / "pristine"
    shutil.copytree(repo, pristine)
    (repo / "tests" / "test_lab05_x.py").write_text("tampered\n")
    (repo / integrity.MANIFEST_PATH).write_text("")  # the student's own manifest is not trusted
    report = integrity.compare_trees(repo, pristine)
    assert report["modified"] == ["tests/test_lab05_x.py"]


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils sha256sum")
def test_manifest_is_sha256sum_compatible(repo):
    ok = subprocess.run(["sha256sum", "-c", "--strict", "--quiet", integrity.MANIFEST_PATH],
                        cwd=repo, capture_output=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (repo / "classroom.yml").write_text("changed\n")
    bad = subprocess.run(["sha256sum", "-c", "--quiet", integrity.MANIFEST_PATH], cwd=repo,
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "classroom.yml" in bad.stdout
