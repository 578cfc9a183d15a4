"""The instructor's regrade workflow (.github/workflows/regrade.yml): GitHub's workflow schema,
zizmor (offline) without findings, inputs only through env, secrets only where no student code
runs beside them; and its input checker and gradebook (msda_labs.classroom.dispatch)."""

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kit import assert_no_zizmor_finding, assert_valid_github_workflow

from msda_labs.classroom import dispatch
from msda_labs.classroom.workflows import ACTIONS
from msda_labs.grading.judge import results
from msda_labs.grading.judge.results import ExerciseResult, GradeResult

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "regrade.yml"
SHA = "0123456789abcdef0123456789abcdef01234567"


# ---------------------------------------------------------------------------------- the workflow

def test_regrade_validates_against_the_github_workflow_schema():
    assert_valid_github_workflow(WORKFLOW)


def test_regrade_has_no_zizmor_finding_even_for_an_auditor():
    assert_no_zizmor_finding(WORKFLOW)


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _steps():
    for name, job in _workflow()["jobs"].items():
        for step in job["steps"]:
            yield name, step


def test_dispatch_only_with_its_inputs_and_least_permissions():
    data = _workflow()
    triggers = data[True] if True in data else data["on"]  # YAML 1.1 reads `on` as true
    assert set(triggers) == {"workflow_dispatch"}
    inputs = triggers["workflow_dispatch"]["inputs"]
    assert set(inputs) == {"lab", "submissions", "gpu", "leaderboard", "hide_names"}
    for name in ("gpu", "leaderboard", "hide_names"):
        assert inputs[name]["type"] == "boolean" and inputs[name]["default"] is False
    assert data["permissions"] == {"contents": "read"}
    for job in data["jobs"].values():
        assert job.get("permissions", {"contents": "read"}) == {"contents": "read"}


def test_no_expression_inside_a_shell_command_and_every_action_pinned():
    pinned = {value.split(" #")[0] for value in ACTIONS.values()}
    for job, step in _steps():
        if "run" in step:
            assert "${{" not in step["run"], (job, step["name"])
        if "uses" in step:
            assert step["uses"] in pinned, (job, step["uses"])  # the pins of workflows.ACTIONS
            assert re.fullmatch(r"[^@]+@[0-9a-f]{40}", step["uses"])
            assert step.get("with", {}).get("persist-credentials", False) is False \
                or "checkout" not in step["uses"]
        if "actions/checkout" in step.get("uses", ""):
            assert step["with"]["persist-credentials"] is False, (job, step["name"])
    for input_name in ("inputs.lab", "inputs.submissions"):
        users = [(job, s["name"]) for job, s in _steps() if input_name in json.dumps(s)]
        # the raw inputs reach only the validator and the gradebook, through env
        assert {s for _, s in users} <= {"Validate the lab and the submissions",
                                         "Write the gradebook and the job summary"}, users


def _secret_steps(secret: str):
    return [(job, step) for job, step in _steps() if f"secrets.{secret}" in json.dumps(step)]


def test_each_secret_reaches_only_the_steps_that_need_it():
    modal = _secret_steps("MODAL_TOKEN_SECRET")
    assert [(job, s["name"]) for job, s in modal] == [("gpu", "Grade the GPU stage on Modal")]
    step = modal[0][1]
    assert step["env"]["MSDA_GPU_RUNNER"] == "modal"  # never local: no student code on the runner
    assert "--stage gpu" in step["run"] and "regrade" not in step["run"]
    assert _secret_steps("MODAL_TOKEN_ID") == modal
    token = _secret_steps("STUDENT_REPOS_TOKEN")
    assert {job for job, _ in token} == {"regrade", "gpu"}
    for _, step in token:
        assert step["uses"].startswith("actions/checkout@")
        assert step["with"]["repository"] == "${{ matrix.repository }}"
        assert step["with"]["ref"] == "${{ matrix.ref }}"
    seed = _secret_steps("MSDA_GRADE_SEED")
    assert [job for job, _ in seed] == ["regrade", "gpu"]
    for _, step in seed:  # in the environment only: a command line is readable by every user
        assert step["env"]["MSDA_GRADE_SEED"] == \
            "${{ secrets.MSDA_GRADE_SEED || secrets.REGRADE_SEED }}"
        assert "--seed" not in step["run"] and "SEED" not in step["run"]
    regrade = seed[0][1]  # student code runs there: as another uid, under a root grader
    assert regrade["env"]["MSDA_SEPARATE"] == "1" and "sudo --preserve-env" in regrade["run"]
    assert "mkdir -p -m 0700 ../out" in regrade["run"]
    jobs = _workflow()["jobs"]
    for name in ("regrade", "gpu"):
        assert jobs[name]["environment"] == "msda-regrade"
        assert jobs[name]["strategy"]["fail-fast"] is False
        assert jobs[name]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert jobs["gpu"]["if"] == "needs.plan.outputs.gpu == 'true'"


def test_the_regrade_leg_and_the_gradebook_commands():
    jobs = _workflow()["jobs"]
    regrade = next(s for s in jobs["regrade"]["steps"] if "msda_labs regrade" in s.get("run", ""))
    assert "--batch" in regrade["run"] and "--gradebook" in regrade["run"]
    assert "--json ../out/regrade.json" in regrade["run"]
    assert not any("MODAL" in key for key in regrade["env"])
    install = [s["run"] for s in jobs["gpu"]["steps"] if "pip install" in s.get("run", "")]
    assert "modal==1.6.4" in install[0]
    assert not any("modal" in s.get("run", "") for s in jobs["regrade"]["steps"])
    book = jobs["gradebook"]
    assert book["needs"] == ["plan", "regrade", "gpu"] and "!cancelled()" in book["if"]
    assert any("dispatch gradebook" in s.get("run", "") for s in book["steps"])
    upload = book["steps"][-1]
    assert "gradebook/" in upload["with"]["path"] and "reports/" in upload["with"]["path"]


# --------------------------------------------------------------------------- the input checker

@pytest.mark.parametrize("lab", ["lab05", "lab10"])
def test_lab_ids_are_accepted(lab):
    assert dispatch.parse_lab(f" {lab}\n") == lab


@pytest.mark.parametrize("lab", ["", "5", "lab5", "lab-05", "lab05; rm -rf /", "LAB05", "lab055"])
def test_other_lab_inputs_are_refused(lab):
    with pytest.raises(dispatch.DispatchError, match="lab05"):
        dispatch.parse_lab(lab)


def test_submissions_separated_by_spaces_commas_and_newlines():
    text = f"course/lab-05-ada@{SHA.upper()}, course/lab-05-grace@main\n# a comment\n" \
           f"  octo-cat/lab.05_x@release/v1.2  "
    subs = dispatch.parse_submissions(text)
    assert [s.label for s in subs] == [f"course/lab-05-ada@{SHA}", "course/lab-05-grace@main",
                                       "octo-cat/lab.05_x@release/v1.2"]
    assert [s.folder for s in subs] == ["course--lab-05-ada", "course--lab-05-grace",
                                        "octo-cat--lab.05_x"]
    assert subs[0].matrix_entry() == {"repository": "course/lab-05-ada", "ref": SHA,
                                      "folder": "course--lab-05-ada",
                                      "label": f"course/lab-05-ada@{SHA}"}


def test_two_commits_of_one_repository_get_two_folders():
    subs = dispatch.parse_submissions(f"c/ada@{SHA} c/ada@main")
    assert [s.folder for s in subs] == [f"c--ada--{SHA[:12]}", "c--ada--main"]


@pytest.mark.parametrize("entry, why", [
    ("course/lab-05-ada", "owner/repo@commit"),
    ("lab-05-ada@" + SHA, "owner/repo@commit"),
    ("a/b@c@d", "owner/repo@commit"),
    ("course/lab-05-ada@", "missing"),
    ("-course/ada@main", "owner name"),
    ("cour--se/ada@main", "owner name"),
    ("course/a$b@main", "repository name"),
    ("course/..@main", "repository name"),
    ("course/ada@abc1234", "shortened commit SHA"),
    ("course/ada@--upload-pack=touch", "neither a 40-hex"),
    ("course/ada@$(id)", "neither a 40-hex"),
    ("course/ada@`id`", "neither a 40-hex"),
    ("course/ada@a..b", "neither a 40-hex"),
    ("course/ada@main.lock", "neither a 40-hex"),
    ("course/ada@refs/", "neither a 40-hex"),
    ("course/ada@x;y", "neither a 40-hex"),
])
def test_bad_entries_are_refused_with_a_message_naming_them(entry, why):
    with pytest.raises(dispatch.DispatchError) as info:
        dispatch.parse_submissions(f"course/fine@main {entry}")
    assert why in str(info.value) and repr(entry) in str(info.value)


def test_empty_duplicate_and_too_long_lists_are_refused():
    with pytest.raises(dispatch.DispatchError, match="no submissions"):
        dispatch.parse_submissions(" \n# only a comment\n")
    with pytest.raises(dispatch.DispatchError, match="listed twice"):
        dispatch.parse_submissions(f"c/ada@{SHA} C/Ada@{SHA.upper()}")
    many = " ".join(f"c/s{i}@main" for i in range(dispatch.MAX_SUBMISSIONS + 1))
    with pytest.raises(dispatch.DispatchError, match="at most 256"):
        dispatch.parse_submissions(many)


def test_plan_checks_the_manifest():
    from msda_labs.course.manifest import find_manifest, load_manifest

    labs = load_manifest(find_manifest(ROOT)).labs
    gpu_lab = next(lab.id for lab in labs if lab.built and lab.has_gpu)
    cpu_lab = next(lab.id for lab in labs if lab.built and not lab.has_gpu)
    planned = dispatch.plan(gpu_lab, f"c/ada@{SHA}", gpu=True)
    assert planned["gpu"] is True and len(planned["include"]) == 1
    with pytest.raises(dispatch.DispatchError, match="no GPU stage"):
        dispatch.plan(cpu_lab, f"c/ada@{SHA}", gpu=True)
    with pytest.raises(dispatch.DispatchError, match="no lab 'lab99'"):
        dispatch.plan("lab99", f"c/ada@{SHA}")


def _run(args, env, tmp_path):
    import os

    full = {k: v for k, v in os.environ.items() if k not in ("LAB", "SUBMISSIONS", "GPU")}
    full.update(env, GITHUB_OUTPUT=str(tmp_path / "output"))
    return subprocess.run([sys.executable, "-m", "msda_labs.classroom.dispatch", *args],
                          cwd=ROOT, env=full, capture_output=True, text=True, timeout=120)


def test_plan_command_writes_the_matrix_and_stops_on_a_bad_entry(tmp_path):
    proc = _run(["plan"], {"LAB": "lab01", "SUBMISSIONS": f"c/ada@{SHA}\nc/bob@main"}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = (tmp_path / "output").read_text()
    matrix = json.loads(re.search(r"matrix<<(\S+)\n(.*)\n\1", out, re.S).group(2))
    assert [e["folder"] for e in matrix["include"]] == ["c--ada", "c--bob"]
    assert re.search(r"gpu<<(\S+)\nfalse\n\1", out)
    (tmp_path / "output").unlink()
    proc = _run(["plan"], {"LAB": "lab01", "SUBMISSIONS": "c/ada@$(curl-evil)",
                           "GITHUB_ACTIONS": "true"}, tmp_path)
    assert proc.returncode == 2 and "::error title=Regrade inputs::" in proc.stdout
    assert "'c/ada@$(curl-evil)'" in proc.stderr
    assert not (tmp_path / "output").exists()


# ------------------------------------------------------------------------------------- gradebook

def _result(stage: str, scores: list[tuple[int, int]], integrity=None) -> GradeResult:
    ex = ExerciseResult("5.1" if stage == "cpu" else "5.4", "task", [
        results.TestResult(f"test_{stage}_{i}", "passed" if s == m else "failed", s, m, stage=stage)
        for i, (s, m) in enumerate(scores)])
    return GradeResult("lab05", exercises=[ex], stages=[stage],
                       integrity=integrity or {"checked": True, "tampered": []})


def _artifact(reports: Path, name: str, file: str, data) -> None:
    (reports / name).mkdir(parents=True)
    (reports / name / file).write_text(json.dumps(data))


def test_gradebook_merges_the_stages_and_never_totals_a_part(tmp_path):
    subs = dispatch.parse_submissions("c/ada@main c/bob@main c/cy@main c/dee@main")
    reports = tmp_path / "reports"
    tampered = {"checked": True, "tampered": ["tests/test_lab05.py"]}
    _artifact(reports, "regrade-c--ada", "regrade.json", [
        {"student": "c--ada", "lab": "lab05", "commit": SHA, "note": "",
         "result": _result("cpu", [(3, 3), (0, 2)], tampered).to_dict()}])
    _artifact(reports, "gpu-c--ada", "gpu.json", _result("gpu", [(4, 4)]).to_dict())
    _artifact(reports, "regrade-c--bob", "regrade.json", [
        {"student": "c--bob", "lab": "lab05", "commit": SHA, "note": "",
         "result": _result("cpu", [(2, 2)]).to_dict()}])  # its GPU job died: no gpu.json
    _artifact(reports, "regrade-c--cy", "regrade.json", [
        {"student": "c--cy", "lab": "lab05", "commit": "", "note": "has no lab05.py",
         "result": None}])
    rows = dispatch.gradebook_rows("lab05", subs, reports, gpu=True, merged=tmp_path / "m")
    ada, bob, cy, dee = rows
    assert (ada.score, ada.max, ada.integrity) == (7, 9, "modified: tests/test_lab05.py")
    assert GradeResult.read_json(tmp_path / "m" / "c--ada.json").stages == ["cpu", "gpu"]
    assert bob.score == "" and "CPU stages 2/2; GPU stage not graded (no GPU report" in bob.note
    assert cy.score == "" and cy.note == "has no lab05.py"
    assert dee.score == "" and "no CPU report for c/dee@main" in dee.note
    cpu_only = dispatch.gradebook_rows("lab05", subs[:2], reports, gpu=False)
    assert [(r.score, r.max) for r in cpu_only] == [(3, 5), (2, 2)]
    summary = dispatch.render_summary("lab05", rows, gpu=True)
    assert "1 of 4 submission(s) graded" in summary and "| c--ada | 0123456789ab | 7/9 |" in summary
    assert summary.count("**not graded**") == 3


def test_gradebook_command_writes_the_csv_and_the_summary(tmp_path):
    reports = tmp_path / "reports"
    _artifact(reports, "regrade-c--ada", "regrade.json", [
        {"student": "c--ada", "lab": "lab05", "commit": SHA, "note": "",
         "result": _result("cpu", [(1, 1)]).to_dict()}])
    summary = tmp_path / "summary.md"
    proc = _run(["gradebook", "--reports", str(reports), "--out", str(tmp_path / "g.csv")],
                {"LAB": "lab05", "SUBMISSIONS": "c/ada@main c/bob@main", "GPU": "false",
                 "GITHUB_STEP_SUMMARY": str(summary)}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.reader((tmp_path / "g.csv").open()))
    assert rows[0] == ["student", "lab", "score", "max", "integrity", "commit", "note"]
    assert rows[1][:6] == ["c--ada", "lab05", "1", "1", "clean", SHA]
    assert rows[2][2] == "" and "no CPU report" in rows[2][6]
    assert "## Regrade of lab05 (CPU stages)" in summary.read_text()
