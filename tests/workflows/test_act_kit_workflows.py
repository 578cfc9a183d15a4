"""The kit's own workflows under act (``MSDA_ACT_LABS=all``, the ``nox -s workflows`` session).

* ``ci.yml`` on push: the self-test job runs ``bash .ci/run`` (with ``MSDA_SELFTEST_ARGS`` keeping
  it to one test, so the self-test does not start itself again), then the GPU job finds no Modal
  secrets and skips with its notice; both jobs succeed.
* ``regrade.yml`` through ``workflow_dispatch`` inputs: four students' repositories (served from
  local bare repositories: git's ``url.<base>.insteadOf`` maps https://github.com/ to them) are
  regraded with the kit's pristine files, the GPU leg is skipped (gpu=false), and the gradebook
  job merges the reports into gradebook.csv and the job summary. Two of the students submit
  attacks of tests/attacks (the ground truth read off disk; a daemon that rewrites the reports):
  both score 0.

The kit is copied as it is in the working tree (tracked and untracked, not ignored files) and
committed to a fresh repository, like CI's fresh clone.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest
from attacks.suite import attacks
from harness import GIT, commit_all, copy_working_tree, run_act
from kit import MANIFEST, ROOT, chip_path
from selection import runs_kit_workflows

from msda_labs.classroom.export import export_lab

pytestmark = pytest.mark.skipif(not runs_kit_workflows(),
                                reason="the kit's workflows run with MSDA_ACT_LABS=all "
                                       "(nox -s workflows)")
KIT = "msda-kit"


def _kit_copy(dest: Path) -> Path:
    copy_working_tree(ROOT, dest)
    commit_all(dest, "the kit")
    # act takes github.repository from the origin remote
    subprocess.run([*GIT, "remote", "add", "origin", f"https://github.com/course/{KIT}.git"],
                   cwd=dest, check=True)
    return dest


def test_ci_workflow_runs_and_skips_the_gpu_job_without_secrets(act_setup, tmp_path):
    repo = _kit_copy(tmp_path / KIT)
    run = run_act(act_setup, repo, tmp_path / "act", env={
        "MSDA_SELFTEST_ARGS": "tests/classroom/test_workflow_files.py "
                              "-k test_kit_manifest_passes_its_schema",
        "MSDA_ACT_LABS": "none"}, timeout=1800)
    assert run.jobs.get("selftest") == "succeeded", run.tail()
    assert run.jobs.get("gpu-stages") == "succeeded", run.tail()
    assert run.returncode == 0
    skipped = run.notices("GPU stages skipped")
    assert len(skipped) == 1 and "MODAL_TOKEN_ID" in skipped[0].message
    lines = run.job_lines("selftest")
    assert any("1 passed" in line for line in lines), run.tail()


def _student_repo(remotes: Path, name: str, lab_id: str, solved: bool,
                  module: str | None = None) -> None:
    """A student's repository at https://github.com/course/NAME, as a local bare repository;
    its lab module is the chip (``solved``), the starter, or the text ``module``."""
    work = remotes / "work" / name
    export_lab(MANIFEST, MANIFEST.lab(lab_id), work.parent, force=True).rename(work)
    if solved:
        shutil.copy2(chip_path(lab_id), work / MANIFEST.lab(lab_id).module)
    if module is not None:
        (work / MANIFEST.lab(lab_id).module).write_text(module)
    commit_all(work, "submission")
    bare = remotes / "course" / f"{name}.git"
    subprocess.run([*GIT, "clone", "-q", "--bare", str(work), str(bare)], check=True)
    (remotes / "course" / name).symlink_to(bare.name)  # with and without .git


# Two students of the attack suite (tests/attacks): mallory's module reads the ground truth off
# the disk and answers with it; trudy's leaves a daemon that rewrites the regrade's reports with
# full marks once the regrade has written them (her handle is the folder the workflow gives her).
ATTACKERS = {"mallory": ("truth-from-disk", ""), "trudy": ("outlive", "course--lab-01-trudy")}


def _attack_module(name: str, handle: str) -> str:
    path = next(a.path for a in attacks("lab01") if a.name == name)
    text = path.read_text()
    return text.replace('ME = "outlive"', f'ME = "{handle}"') if handle else text


def test_regrade_workflow_dispatch_grades_two_students(act_setup, tmp_path):
    lab_id = "lab01"
    remotes = tmp_path / "github"
    _student_repo(remotes, "lab-01-ada", lab_id, solved=True)
    _student_repo(remotes, "lab-01-grace", lab_id, solved=False)
    for who, (attack, handle) in ATTACKERS.items():
        _student_repo(remotes, f"lab-01-{who}", lab_id, solved=False,
                      module=_attack_module(attack, handle))
    repo = _kit_copy(tmp_path / KIT)
    subprocess.run([*GIT, "clone", "-q", "--bare", str(repo),
                    str(remotes / "course" / f"{KIT}.git")], check=True)
    (remotes / "course" / KIT).symlink_to(f"{KIT}.git")
    inputs = {"lab": lab_id, "gpu": "false",
              "submissions": " ".join(f"course/lab-01-{who}@main"
                                      for who in ("ada", "grace", *ATTACKERS))}
    payload = {"ref": "refs/heads/main", "inputs": inputs,
               "repository": {"full_name": f"course/{KIT}", "name": KIT,
                              "owner": {"login": "course"}}}
    rewrite = {"GIT_CONFIG_COUNT": "1",
               "GIT_CONFIG_KEY_0": f"url.file://{remotes}/.insteadOf",
               "GIT_CONFIG_VALUE_0": "https://github.com/"}
    run = run_act(act_setup, repo, tmp_path / "act", event="workflow_dispatch", payload=payload,
                  inputs=inputs,
                  secrets={"STUDENT_REPOS_TOKEN": "not-needed-for-local-repositories",
                           "GITHUB_TOKEN": "not-needed-for-local-repositories"},
                  env=rewrite, extra_args=["--no-skip-checkout", "-W",
                                           ".github/workflows/regrade.yml"], timeout=1800)
    assert run.jobs.get("plan") == "succeeded", run.tail()
    assert "gpu" not in run.jobs  # the GPU leg is skipped with gpu=false
    assert run.jobs.get("gradebook") == "succeeded", run.tail()
    assert run.returncode == 0, run.tail()
    gradebook = run.artifacts / f"gradebook-{lab_id}" / "gradebook" / "gradebook.csv"
    assert gradebook.is_file(), sorted(p.name for p in run.artifacts.rglob("*"))[:40]
    rows = {r["student"]: r for r in csv.DictReader(gradebook.open())}
    ada = next(r for k, r in rows.items() if "ada" in k)
    grace = next(r for k, r in rows.items() if "grace" in k)
    assert ada["score"] == ada["max"] != "0" and ada["integrity"] == "clean"
    assert grace["score"] == "0" and grace["max"] == ada["max"]
    for who, (attack, _) in ATTACKERS.items():  # under the separated regrade, an attack gets 0
        row = next(r for k, r in rows.items() if who in k)
        assert row["score"] == "0" and row["max"] == ada["max"], f"{who} ({attack}): {row}"
    summary = "\n".join(run.summaries)
    assert f"Regrade of {lab_id}" in summary
    # the class insight page beside the gradebook, with both students on it, and its summary line
    page = gradebook.parent / "insight.html"
    assert page.is_file(), sorted(p.name for p in gradebook.parent.iterdir())
    html = page.read_text()
    assert "ada" in html and "grace" in html and "<svg" in html
    assert "insight.html" in summary
