"""Every shipped workflow, run end to end by act (a real Actions runner) on this host.

For each selected lab (``MSDA_ACT_LABS``, see selection.py) the export is committed to a fresh git
repository and its ``classroom.yml`` run three times:

* the untouched starter: 0 points, the job fails, one ``::notice`` per exercise on the def line
  of the function it grades, a summary table of not-attempted exercises;
* the chip: full points, the job succeeds, no annotation;
* an edited copy, the chip with a planted mistake (tests/mutants) and a grading test file edited:
  the integrity note names the file, and every exercise that lost points is a ``::error`` on its
  function's def line, the most points lost first.

Each run checks the ``Points X/Y`` notice against the stored grade.json, the job's result, the
job summary's table and the annotations. The reporter-action variant runs the real
``autograding-grading-reporter`` and must print what the builtin step printed.

The pinned actions come from ../shared/actions (or MSDA_ACTIONS_DIR); without them and without a
network the tests skip and say why. Tool set-up: act_env.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from kit import MANIFEST, chip_path, mutants
from selection import selected_labs

from msda_labs.classroom import workflows
from msda_labs.classroom.export import export_lab
from msda_labs.grading.judge.annotations import ANNOTATIONS_PER_STEP, definitions
from msda_labs.grading.judge.diagnosis import diagnose, task_key
from msda_labs.grading.judge.render import start_here
from msda_labs.grading.judge.render import test_lines as feedback_lines
from msda_labs.grading.judge.results import GradeResult

JOB = "run-autograding-tests"
LABS = selected_labs()
_RUNS: dict = {}

pytestmark = pytest.mark.skipif(not LABS, reason="MSDA_ACT_LABS=none: no act workflow run")


def _export(lab_id: str, out, reporter: str | None = None):
    return export_lab(MANIFEST, MANIFEST.lab(lab_id), out, reporter_action=reporter, git=True)


def _edit(repo, lab_id: str) -> str:
    """The chip with its first planted mistake, and a grading test file edited; returns the
    edited file's path."""
    from harness import commit_all

    lab = MANIFEST.lab(lab_id)
    source = chip_path(lab_id).read_text()
    planted = mutants(lab_id)
    if planted:
        source = planted[0].apply(source)
    (repo / lab.module).write_text(source)
    test_file = sorted((repo / "tests").glob("test_*.py"))[0]
    test_file.write_text(test_file.read_text() + "\n# an edit by the student\n")
    commit_all(repo, "my work")
    return test_file.relative_to(repo).as_posix()


# The whole-checkout attacks git can commit (no FIFO, socket or unreadable file), planted at once
# with the canary into one student repository (tests/attacks/checkouts.py).
PLANTED = ("optional-imports", "pytest-entry-point", "torch-backend-entry-point", "site-hooks",
           "conftests", "pytest-configs", "planted-caches")


def _plant(repo, lab_id: str) -> dict:
    """Every committable whole-checkout attack and the canary, committed; returns the planted
    files git tracks and the canary's folder."""
    import subprocess
    import time
    from pathlib import Path

    from attacks.checkouts import CHECKOUT_ATTACKS, make_canary_folder, plant_canary
    from harness import commit_all

    planted = []
    for attack in CHECKOUT_ATTACKS:
        if attack.name in PLANTED:
            planted += attack.plant(repo, lab_id)
    canary = make_canary_folder(Path(f"/run/msda-canary-act-{time.monotonic_ns()}"))
    plant_canary(repo, lab_id, canary)
    commit_all(repo, "my work")
    tracked = set(subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True,
                                 check=True).stdout.split())
    return {"planted": [f for f in planted if f in tracked], "canary": canary}


def _run(act_setup, tmp_path_factory, lab_id: str, variant: str):
    """One act run of a lab's workflow (cached for the session: parity reuses it)."""
    from harness import commit_all, run_act

    key = (lab_id, variant)
    if key not in _RUNS:
        work = tmp_path_factory.mktemp(f"act-{lab_id}-{variant}")
        reporter = workflows.REPORTER_ACTION if variant == "reporter-action" else None
        repo = _export(lab_id, work / "repos", reporter)
        info = {}
        if variant == "chip":
            shutil.copy2(chip_path(lab_id), repo / MANIFEST.lab(lab_id).module)
            commit_all(repo, "done")
        elif variant == "edited":
            info["edited"] = _edit(repo, lab_id)
        elif variant == "planted":
            info.update(_plant(repo, lab_id))
        run = run_act(act_setup, repo, work / "act")
        _RUNS[key] = (run, repo, info)
    return _RUNS[key]


def _grade_json(run, lab_id: str) -> dict:
    path = run.artifact(f"grade-{lab_id}", "grade.json")
    assert path.is_file(), f"no grade.json artifact at {path}\n{run.tail()}"
    return json.loads(path.read_text())


def _points(run) -> str:
    notices = run.notices("Autograding complete")
    assert len(notices) == 1, f"expected one Points notice\n{run.tail()}"
    return notices[0].message


def _summary(run, lab_id: str) -> str:
    mine = [s for s in run.summaries if s.startswith(f"## {lab_id} ")]
    assert len(mine) == 1, f"expected one job summary of {lab_id}, got {run.summaries}"
    return mine[0]


def _check_table(summary: str, grade: dict) -> None:
    """The summary holds a row per exercise with its points, and under it the terminal's own
    feedback lines (cause first: a failure explained upstream points back to its cause)."""
    result = GradeResult.from_dict(grade)
    diagnosis = diagnose(result)
    assert "| Task | Exercise | Points | Status | What went wrong |" in summary
    for line in start_here(diagnosis):  # where to start reading, before the table
        assert line.strip().replace("|", "\\|") in summary.split("| Task |")[0], line
    for ex in result.exercises:
        row = re.search(rf"^\| {re.escape(ex.id)} \| .* \| {ex.score}/{ex.max_score}\b.*$",
                        summary, re.M)
        assert row, (ex.id, summary)
        lines = feedback_lines(ex, diagnosis)
        for line in lines:
            cell = "`" + line.replace("|", "\\|").replace("\n", " ") + "`"
            assert cell in row.group(0), (line, row.group(0))
        if ex.status not in ("passed", "not_attempted"):
            assert lines, (ex.id, "an exercise that lost points says why")


def _check_points(run, grade: dict) -> None:
    score = sum(t["score"] for ex in grade["exercises"] for t in ex["tests"])
    maximum = sum(t["max_score"] for ex in grade["exercises"] for t in ex["tests"])
    assert maximum > 0
    assert _points(run) == f"Points {score}/{maximum}"
    report = run.notices("Autograding report")
    assert [json.loads(n.message) for n in report] == [{"totalPoints": score,
                                                        "maxPoints": maximum}]


def _graded(run, lab_id: str) -> tuple[dict, str]:
    """The run's grade.json and job summary, checked against each other and the points step."""
    grade = _grade_json(run, lab_id)
    _check_points(run, grade)
    summary = _summary(run, lab_id)
    _check_table(summary, grade)
    return grade, summary


def _check_annotation_places(run, repo, lab_id: str) -> list:
    module = MANIFEST.lab(lab_id).module
    lines = (repo / module).read_text().splitlines()
    defs = definitions(repo / module)
    placed = run.file_annotations()
    for note in placed:
        assert note.props["file"] == module, note.line
        line = int(note.props["line"])
        assert lines[line - 1].lstrip().startswith(("def ", "class ")), (note.line,
                                                                         lines[line - 1])
        assert line in defs.values()
        assert note.props["title"].startswith("Task "), note.line
    return placed


@pytest.mark.parametrize("lab_id", LABS)
def test_starter_scores_zero_with_a_notice_per_exercise(act_setup, tmp_path_factory, lab_id):
    run, repo, _ = _run(act_setup, tmp_path_factory, lab_id, "starter")
    assert run.jobs.get(JOB) == "failed" and run.returncode != 0, run.tail()
    grade, summary = _graded(run, lab_id)
    assert _points(run) .startswith("Points 0/")
    assert "Grading files were modified" not in summary
    placed = _check_annotation_places(run, repo, lab_id)
    assert all(n.kind == "notice" for n in placed)
    attempted = [ex for ex in grade["exercises"]
                 if {t["status"] for t in ex["tests"]} != {"not_attempted"}]
    expected = min(len(grade["exercises"]) - len(attempted), ANNOTATIONS_PER_STEP)
    assert len([n for n in placed if "not attempted" in n.message]) == expected


@pytest.mark.parametrize("lab_id", LABS)
def test_chip_scores_full_marks_without_annotations(act_setup, tmp_path_factory, lab_id):
    run, _, _ = _run(act_setup, tmp_path_factory, lab_id, "chip")
    assert run.jobs.get(JOB) == "succeeded" and run.returncode == 0, run.tail()
    grade, summary = _graded(run, lab_id)
    maximum = sum(t["max_score"] for ex in grade["exercises"] for t in ex["tests"])
    assert _points(run) == f"Points {maximum}/{maximum}"
    assert f"**{maximum}/{maximum}**" in summary
    assert run.file_annotations() == []


@pytest.mark.parametrize("lab_id", LABS)
def test_edited_copy_is_flagged_and_its_mistakes_annotated(act_setup, tmp_path_factory, lab_id):
    run, repo, info = _run(act_setup, tmp_path_factory, lab_id, "edited")
    assert run.jobs.get(JOB) == "failed" and run.returncode != 0, run.tail()
    grade, summary = _graded(run, lab_id)
    assert info["edited"] in grade["integrity"]["modified"]
    assert "Grading files were modified" in summary and info["edited"] in summary
    errors = [n for n in _check_annotation_places(run, repo, lab_id) if n.kind == "error"]
    lost = {ex["id"]: sum(t["max_score"] - t["score"] for t in ex["tests"])
            for ex in grade["exercises"]
            if {t["status"] for t in ex["tests"]} not in ({"passed"}, {"not_attempted"})}
    assert lost, "the planted mistake lost no points"
    titled = [re.match(r"Task (\S+) ", n.props["title"]).group(1) for n in errors]
    # The order of reading: the exercises where a named mistake starts, then the other failures,
    # then those that only follow from a cause upstream; each group in task order.
    result = GradeResult.from_dict(grade)
    diagnosis = diagnose(result)
    group = {"cause": 0, "own": 1, "follows": 2}
    expected = sorted(lost, key=lambda t: (group.get(diagnosis.kind(result.exercise(t)), 1),
                                           task_key(t)))
    assert titled == expected[:ANNOTATIONS_PER_STEP], (titled, expected)
    planted = mutants(lab_id)
    if planted and planted[0].expect:
        assert planted[0].expect in summary  # the named mistake reaches the job summary


def test_whole_checkout_attacks_score_zero_in_the_push_workflow(act_setup, tmp_path_factory):
    """Lab 01's repository with every committable whole-checkout attack and the canary, pushed:
    the workflow's grade is 0, every planted file is reported (a grading file as modified, the
    rest as beyond the template, in grade.json and the job summary), and no code of the
    student's ran as root in the runner (act runs as root here, so the grade is separated)."""
    import shutil as _shutil

    from attacks.checkouts import canaries_alive, canary_messages, records

    if "lab01" not in LABS:
        pytest.skip("lab01 is not among MSDA_ACT_LABS")
    run, repo, info = _run(act_setup, tmp_path_factory, "lab01", "planted")
    try:
        grade, summary = _graded(run, "lab01")
        assert _points(run).startswith("Points 0/"), _points(run)
        integrity = grade["integrity"]
        listed = set(integrity.get("extra") or []) | set(integrity.get("modified") or [])
        assert info["planted"] and not [f for f in info["planted"] if f not in listed], \
            (info["planted"], sorted(listed))
        assert "files beyond the template" in summary
        found = records(info["canary"]) + [(p, u, 0) for p, u in canary_messages(grade)]
        assert not [f for f in found if f[1] == 0], f"canary records as root: {found}"
        if os.geteuid() == 0:  # act runs the job as this user: root separates
            assert (grade.get("separation") or {}).get("separated"), grade.get("separation")
            assert any(p == "import" and u for p, u, _ in found), found
            assert not [f for f in found if f[0] not in ("import", "grandchild")], found
        assert not canaries_alive()
    finally:
        _shutil.rmtree(info["canary"], ignore_errors=True)


def test_reporter_action_prints_what_the_builtin_step_prints(act_setup, tmp_path_factory):
    """The real reporter (v1, node20, run on Node 24 as hosted runners now do), on a starter:
    it prints, line for line, what the kit's builtin reporter step prints for the same payload
    (rebuilt from the run's grade.json), notices and failure included."""
    from msda_labs.classroom.platforms import github_classroom_result, reporter_output
    from msda_labs.grading.judge.results import GradeResult

    lab_id = LABS[0]
    run, repo, _ = _run(act_setup, tmp_path_factory, lab_id, "reporter-action")
    workflow = (repo / workflows.WORKFLOW_PATH).read_text()
    assert f"uses: {workflows.REPORTER_ACTION} # v1 (node20)" in workflow
    assert "python -m msda_labs report --runners" not in workflow  # no builtin step here
    assert "autograding-grading-reporter" in run.log and run.jobs.get(JOB) == "failed"
    printed = run.step_output(JOB, "Autograding Reporter")
    grade = GradeResult.read_json(run.artifact(f"grade-{lab_id}", "grade.json"))
    payload = github_classroom_result(grade)
    expected, failed = reporter_output({lab_id: payload}, env={"CI": "true"})
    assert failed and any(line.startswith("Total points for ") for line in printed), run.tail()
    assert printed == expected
