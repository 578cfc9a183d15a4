"""The whole-class regrade (``.github/workflows/regrade-class.yml``) under act, GPU leg off.

GitHub's API is replaced by a folder of recorded responses (``MSDA_GITHUB_REPLAY``, read by
msda_labs.classroom.github.replay_transport): act has no network, and a folder needs no server,
port or thread, and replays byte for byte what the recording gave. The responses are recorded
from the stand-in of tests/classroom/github_fake.py (GitHub's documented examples) and checked
against the documented shapes first (tests/classroom/github_replay.py).

* The plan job alone, for 1,000 recorded repositories of lab05: every one planned exactly once,
  at the commit the recorded server times say, in at most 256 matrix jobs; the one that pushed
  only after the late window is listed as unresolved.
* A class of three real git repositories of lab01 with forged commit dates, served from local
  bare repositories (git's ``url.<base>.insteadOf``), all the way through: the plan, one batch
  (``max_jobs=1``) fetched at the commits of record and regraded, and the gradebook job with the
  late policy applied (final-grades.csv).

Both run in the act subset of the self-test (every MSDA_ACT_LABS but ``none``).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from harness import GIT, commit_all, copy_working_tree, run_act
from kit import MANIFEST, ROOT, chip_path
from selection import mode

sys.path.insert(0, str(ROOT / "tests" / "classroom"))
from github_fake import FakeGitHub  # noqa: E402
from github_replay import check_shapes, record_class, thousand_students  # noqa: E402

from msda_labs.classroom.export import export_lab  # noqa: E402

pytestmark = pytest.mark.skipif(mode() == "none", reason="MSDA_ACT_LABS=none: no act run")
KIT = "msda-kit"
DUE = "2026-11-20T23:59:00+01:00"  # 22:59Z; late window of 3 days: until 23 Nov 22:59Z
WORKFLOW = ".github/workflows/regrade-class.yml"


def _kit_copy(dest: Path, remotes: Path) -> Path:
    """The kit as its working tree holds it, with lab01 and lab05 due on DUE and a penalty of
    10% a late day, committed to a fresh repository (CI's fresh clone), and served as
    https://github.com/course/msda-kit from ``remotes`` (see :func:`_served`)."""
    copy_working_tree(ROOT, dest)
    data = yaml.safe_load((dest / "classroom.yml").read_text())
    data["course"]["late_policy"] = {"kind": "penalty", "penalty_per_day": 10}
    for entry in data["labs"]:
        if entry["id"] in ("lab01", "lab05"):
            entry.update(due=DUE, late_days=3)
    (dest / "classroom.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    commit_all(dest, "the kit")
    subprocess.run([*GIT, "remote", "add", "origin", f"https://github.com/course/{KIT}.git"],
                   cwd=dest, check=True)
    subprocess.run([*GIT, "clone", "-q", "--bare", str(dest),
                    str(remotes / "course" / f"{KIT}.git")], check=True)
    (remotes / "course" / KIT).symlink_to(f"{KIT}.git")
    return dest


def _served(remotes: Path, replay: Path) -> dict:
    """act's environment: https://github.com/ served from the bare repositories in ``remotes``
    (git's url.<base>.insteadOf), GitHub's API from the recorded responses in ``replay``."""
    return {"MSDA_GITHUB_REPLAY": str(replay), "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": f"url.file://{remotes}/.insteadOf",
            "GIT_CONFIG_VALUE_0": "https://github.com/"}


def _dispatch(act_setup, kit: Path, work: Path, inputs: dict, env: dict, job: str | None = None):
    payload = {"ref": "refs/heads/main", "inputs": inputs,
               "repository": {"full_name": f"course/{KIT}", "name": KIT,
                              "owner": {"login": "course"}}}
    return run_act(act_setup, kit, work, event="workflow_dispatch", payload=payload,
                   inputs=inputs, job=job, env=env,
                   secrets={"STUDENT_REPOS_TOKEN": "recorded-responses-need-no-token",
                            "GITHUB_TOKEN": "not-needed-for-local-repositories"},
                   extra_args=["--no-skip-checkout", "-W", WORKFLOW], timeout=900)


def test_the_plan_of_1000_recorded_repositories(act_setup, tmp_path):
    fake, expected = thousand_students()
    replay = tmp_path / "replay"
    record_class(fake, replay, "course", "lab-05-")
    assert check_shapes(replay)["org-repo"] == 1031
    kit = _kit_copy(tmp_path / KIT, tmp_path / "github")
    run = _dispatch(act_setup, kit, tmp_path / "act",
                    {"org": "course", "prefix": "lab-05-", "lab": "lab05", "gpu": "false",
                     "at_deadline": "true"}, _served(tmp_path / "github", replay), job="plan")
    assert run.jobs.get("plan") == "succeeded", run.tail()
    plan = run.artifacts / "class-plan"
    include = json.loads((plan / "matrix.json").read_text())["include"]
    assert 1 <= len(include) <= 256
    planned = [line for item in include for line in item["submissions"].split("\n")]
    assert len(planned) == len(set(planned)) == 999 == len(expected)
    assert {p.split("@")[0]: p.split("@")[1] for p in planned} == expected
    with open(plan / "unresolved.csv", newline="") as fh:
        assert [r[0] for r in list(csv.reader(fh))[1:]] == ["course/lab-05-s0999"]
    assert any("999 planned" in line for line in run.job_lines("plan")), run.tail()


def _student(remotes: Path, name: str, commits: list[tuple[str, str]]) -> list[str]:
    """A student's repository of lab01 at https://github.com/course/NAME (a local bare
    repository), one commit per (module, forged date): the module is 'chip', 'starter' or
    'broken'. Returns the commits' SHAs."""
    lab = MANIFEST.lab("lab01")
    work = remotes / "work" / name
    export_lab(MANIFEST, lab, work.parent, force=True).rename(work)
    starter = (work / lab.module).read_text()
    shas = []
    for module, date in commits:
        text = {"chip": chip_path("lab01").read_text(), "starter": starter,
                "broken": starter + "\nraise RuntimeError('broken')\n"}[module]
        (work / lab.module).write_text(text)
        commit_all(work, f"{module}", date=date)
        shas.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True,
                                   capture_output=True, text=True).stdout.strip())
    bare = remotes / "course" / f"{name}.git"
    subprocess.run([*GIT, "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return shas


def test_a_small_class_is_regraded_at_the_deadline_all_the_way_through(act_setup, tmp_path):
    remotes = tmp_path / "github"
    fake = FakeGitHub("course")
    # ada: the chip on time; then a broken commit dated before the due date (forged), which
    # GitHub received only after the late window: her commit of record stays the chip
    ada = _student(remotes, "lab-01-ada", [("chip", "2026-11-01T10:00:00Z"),
                                           ("broken", "2026-11-15T10:00:00Z")])
    fake.add_repo("lab-01-ada")
    fake.add_run("course/lab-01-ada", ada[0], "2026-11-19T10:00:00Z")
    fake.add_push("course/lab-01-ada", ada[1], "2026-11-25T10:00:00Z", before=ada[0])
    # grace: the starter, on time
    grace = _student(remotes, "lab-01-grace", [("starter", "2026-11-18T09:00:00Z")])
    fake.add_repo("lab-01-grace")
    fake.add_run("course/lab-01-grace", grace[0], "2026-11-18T09:05:00Z")
    # linus: the starter on time, then the chip received 11 hours late (its commit date forged
    # to look on time): one late day at 10%
    linus = _student(remotes, "lab-01-linus", [("starter", "2026-11-18T09:00:00Z"),
                                               ("chip", "2026-11-19T09:00:00Z")])
    fake.add_repo("lab-01-linus")
    fake.add_run("course/lab-01-linus", linus[0], "2026-11-18T09:10:00Z")
    fake.add_push("course/lab-01-linus", linus[1], "2026-11-21T10:00:00Z", before=linus[0])
    replay = tmp_path / "replay"
    record_class(fake, replay, "course", "lab-01-")
    check_shapes(replay)

    kit = _kit_copy(tmp_path / KIT, remotes)
    run = _dispatch(act_setup, kit, tmp_path / "act",
                    {"org": "course", "prefix": "lab-01-", "lab": "lab01", "gpu": "false",
                     "at_deadline": "true", "max_jobs": "1"}, _served(remotes, replay))
    assert run.jobs.get("plan") == "succeeded", run.tail()
    assert "gpu" not in run.jobs  # the GPU leg is off
    assert run.jobs.get("gradebook") == "succeeded", run.tail()
    assert run.returncode == 0, run.tail()

    include = json.loads((run.artifacts / "class-plan" / "matrix.json").read_text())["include"]
    assert len(include) == 1  # max_jobs=1: one batch of three
    assert include[0]["submissions"].split("\n") == [
        f"course/lab-01-ada@{ada[0]}", f"course/lab-01-grace@{grace[0]}",
        f"course/lab-01-linus@{linus[1]}"]
    book = run.artifacts / "gradebook-lab01" / "gradebook"
    with open(book / "gradebook.csv", newline="") as fh:
        rows = {r["student"].split("-")[-1]: r for r in csv.DictReader(fh)}
    assert rows["ada"]["commit"] == ada[0] and rows["linus"]["commit"] == linus[1]
    top = rows["ada"]["max"]
    assert rows["ada"]["score"] == top != "0" and rows["ada"]["integrity"] == "clean"
    assert rows["grace"]["score"] == "0" and rows["linus"]["score"] == top
    with open(book / "final-grades.csv", newline="") as fh:
        final = {r["student"].split("-")[-1]: r for r in csv.DictReader(fh)}
    assert (final["ada"]["late_days"], final["ada"]["score"]) == ("0", top)
    linus_row = final["linus"]
    assert (linus_row["late_days"], linus_row["penalty_percent"]) == ("1", "10")
    assert float(linus_row["score"]) == pytest.approx(0.9 * float(top))
    assert "1 late day(s), 1 charged x 10% = 10% off" in linus_row["calculation"]
    assert linus_row["received_at"].startswith("2026-11-21T10:00:00")
    summary = "\n".join(run.summaries)
    assert "3 planned" in summary and "final-grades.csv" in summary
    print(f"act: {run.seconds:.1f} s; jobs {run.jobs}")
