"""When the exported workflow grades (classroom.yml's ``course.grade_on``) and what a warm push
costs: each choice rendered and checked, the throttle gate against a stand-in of the REST API,
and each choice run by act with the event that triggers it.

Under act (``MSDA_ACT_LABS``, see selection.py), on the first selected lab:

* every choice: the job restores the grading environment from act's cache server (seeded once
  per machine by a cold run, conftest.py) and runs no pip;
* ``submission``: a branch push starts no job; a pushed tag ``submit-1`` grades;
* ``throttled``: a push less than N minutes after a graded run is not graded, and the job
  summary says when the next one will be; a push with no graded run in the window grades
  (``all`` only);
* the GPU job, switched on, does not start on a branch push (a GPU lab; ``all`` only).

act 0.2.89 does not apply ``on.push.tags`` filters (a branch push runs a tag-filtered workflow),
so the submission workflow's job condition says it too; the filter itself is checked here on the
rendered file.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml
from kit import MANIFEST, built_labs
from runs_fake import RunsApi, minutes_ago
from selection import runs_kit_workflows, selected_labs

from msda_labs.classroom import gate, workflows
from msda_labs.classroom.export import export_lab
from msda_labs.course.manifest import GradeTrigger, Lab, Stage

JOB = "run-autograding-tests"
LABS = selected_labs()
GPU_LAB = Lab("lab05", "lab-05-forward-correct", "The forward kernel, correct", "ready",
              (Stage("interpret", 120), Stage("gpu", 300, "H100")))
CHOICES = {"push": GradeTrigger("push"), "submission": GradeTrigger("submission"),
           "throttled": GradeTrigger("throttled", 30)}
BUILD = "Build the grading environment (only when the cache has none)"
SAVE = "Save the grading environment"
RESTORE = "Restore the grading environment"


def _manifest(choice: str):
    return dataclasses.replace(MANIFEST, grading=CHOICES[choice])


def _triggers(data: dict) -> dict:
    return data[True] if True in data else data["on"]  # YAML 1.1 reads `on` as true


def _job(text: str) -> dict:
    return yaml.safe_load(text)["jobs"][JOB]


# ----------------------------------------------------------------------- the rendered files

@pytest.mark.parametrize("choice", CHOICES)
def test_each_choice_renders_its_triggers_and_a_cached_environment(choice):
    for lab in [*built_labs(), GPU_LAB]:
        text = workflows.render_workflow(_manifest(choice), lab)
        data = yaml.safe_load(text)
        on = _triggers(data)
        assert data["concurrency"]["cancel-in-progress"] is False
        job = data["jobs"][JOB]
        steps = {s["name"]: s for s in job["steps"]}
        names = [s["name"] for s in job["steps"]]
        # the environment: restored by key, built and saved only on a miss, never pip otherwise
        restore, build, save = steps[RESTORE], steps[BUILD], steps[SAVE]
        assert restore["uses"].startswith("actions/cache/restore@27d5ce7f107fe9357f9df03efb73")
        assert save["uses"].startswith("actions/cache/save@27d5ce7f107fe9357f9df03efb73")
        key = restore["with"]["key"]
        for part in ("runner.os", "steps.python.outputs.python-version",
                     "hashFiles('requirements.txt', 'shared/pyproject.toml')"):
            assert part in key, key
        assert restore["with"]["path"] == save["with"]["path"] == ".msda-env"
        assert save["with"]["key"] == "${{ steps.environment.outputs.cache-primary-key }}"
        for step in (build, save):
            assert step["if"].endswith("steps.environment.outputs.cache-hit != 'true'")
        assert "--target .msda-env" in build["run"]
        pip_steps = [s["name"] for s in job["steps"] if "pip" in s.get("run", "")]
        assert pip_steps == [BUILD]
        assert names.index(RESTORE) < names.index(BUILD) < names.index(SAVE) \
            < names.index(f"Grade {lab.id}")
        assert "cache" not in steps["Set up Python"].get("with", {})
        assert job["env"]["PYTHONPATH"].endswith("/shared:${{ github.workspace }}/.msda-env")
        if choice == "push":
            assert set(on) == {"push", "workflow_dispatch", "repository_dispatch"}
            assert on["push"] is None and "gate" not in [s.get("id") for s in job["steps"]]
        elif choice == "submission":
            assert on["push"] == {"tags": [workflows.SUBMISSION_TAGS]}
            assert on["release"] == {"types": ["published"]}
            assert {"workflow_dispatch", "repository_dispatch"} <= set(on)
            assert "startsWith(github.ref, 'refs/tags/submit')" in job["if"]
        else:
            assert on["push"] is None and on["release"] == {"types": ["published"]}
            assert job["permissions"] == {"contents": "read", "actions": "read"}
            gate_step = job["steps"][1]
            assert gate_step["id"] == "gate" and "--every 30" in gate_step["run"]
            assert f'--step "{workflows.grading_step(lab)}"' in gate_step["run"]
            for step in job["steps"][2:]:
                assert "steps.gate.outputs.grade == 'true'" in step["if"], step["name"]
        if lab is GPU_LAB:
            gpu_if = data["jobs"]["gpu-stage"]["if"]
            assert "vars.MSDA_GPU_GRADING == 'true'" in gpu_if
            assert ("startsWith(github.ref, 'refs/tags/submit') || github.event_name == "
                    "'release' || github.event_name == 'workflow_dispatch'") in gpu_if


# ---------------------------------------------------------------------- the gate, unit-tested

def _env(api: RunsApi, **extra) -> dict:
    return {"GITHUB_EVENT_NAME": "push", "GITHUB_REF": "refs/heads/main",
            "GITHUB_REF_NAME": "main", "GITHUB_REPOSITORY": api.repo,
            "GITHUB_RUN_ID": str(api.this_run), "GITHUB_API_URL": api.url,
            "GITHUB_TOKEN": "t0ken", **extra}


def test_gate_holds_back_a_push_soon_after_a_graded_run():
    step = "Grade lab01"
    # newest first: a run the gate skipped 2 minutes ago, a graded one 10 minutes ago
    with RunsApi("course/lab-01", 90, step, [(89, minutes_ago(2), False),
                                             (88, minutes_ago(10), True)]) as api:
        grade, why = gate.decide(_env(api), 30, step)
        assert not grade
        assert "/actions/runs/88 graded this branch" in why and "30 minutes" in why
        assert "by hand" in why and "nox -s LAB" in why
        assert set(api.tokens) == {"Bearer t0ken"}
        assert any("branch=main" in r for r in api.requests)
        # the same history, a shorter window: the graded run is too old to hold it back
        assert gate.decide(_env(api), 5, step)[0]


def test_gate_grades_submissions_and_fails_open():
    step = "Grade lab01"
    with RunsApi("course/lab-01", 90, step, [(88, minutes_ago(1), True)]) as api:
        for extra in ({"GITHUB_REF": "refs/tags/submit-1", "GITHUB_REF_NAME": "submit-1"},
                      {"GITHUB_EVENT_NAME": "workflow_dispatch"},
                      {"GITHUB_EVENT_NAME": "release"}):
            assert gate.decide(_env(api, **extra), 30, step)[0], extra
        assert api.requests == []  # a submission is graded without asking
        # a skipped (not graded) run in the window does not hold a push back
        with RunsApi("course/lab-01", 91, step, [(90, minutes_ago(1), False)]) as quiet:
            assert gate.decide(_env(quiet), 30, step)[0]
    grade, why = gate.decide(_env(api), 30, step)  # the server is gone: graded
    assert grade and "could not be read" in why


# --------------------------------------------------------------------------- under act

def _repo(tmp_path_factory, choice: str, lab) -> tuple:
    work = tmp_path_factory.mktemp(f"act-{choice}-{lab.id}")
    repo = export_lab(_manifest(choice), lab, work / "repos", git=True)
    return work, repo


def _tag_event(repo) -> dict:
    name = repo.name
    return {"ref": "refs/tags/submit-1",
            "repository": {"full_name": f"course/{name}", "name": name,
                           "owner": {"login": "course"}}}


def _warm(run) -> dict:
    """The job restored the environment from the cache and installed nothing."""
    steps = run.steps(JOB)
    assert steps.get(RESTORE, ("",))[0] == "Success", run.tail()
    assert "Cache restored from key: msda-env-" in run.log, run.tail()
    assert BUILD not in steps and SAVE not in steps, run.tail()
    assert "pip install" not in "\n".join(run.job_lines(JOB)).replace(BUILD, ""), run.tail()
    return steps


@pytest.mark.skipif(not LABS, reason="MSDA_ACT_LABS=none: no act workflow run")
def test_submission_grades_a_tag_and_skips_a_branch_push(act_setup, tmp_path_factory):
    from harness import run_act

    lab = MANIFEST.lab(LABS[0])
    work, repo = _repo(tmp_path_factory, "submission", lab)
    branch = run_act(act_setup, repo, work / "branch", bare="nothing")
    assert run_act_job_skipped(branch), branch.tail()
    tagged = run_act(act_setup, repo, work / "tag", payload=_tag_event(repo), bare="nothing")
    assert tagged.jobs.get(JOB) == "failed", tagged.tail()  # the starter: 0 points
    assert len(tagged.notices("Autograding complete")) == 1
    assert tagged.notices("Autograding complete")[0].message.startswith("Points 0/")
    _warm(tagged)


def run_act_job_skipped(run) -> bool:
    """act started the workflow and skipped the grading job (its condition was false)."""
    return run.returncode == 0 and JOB not in run.jobs and not run.steps(JOB)


@pytest.mark.skipif(not LABS, reason="MSDA_ACT_LABS=none: no act workflow run")
def test_throttled_push_soon_after_a_graded_run_is_not_graded(act_setup, tmp_path_factory):
    from harness import run_act

    lab = MANIFEST.lab(LABS[0])
    work, repo = _repo(tmp_path_factory, "throttled", lab)
    step = workflows.grading_step(lab)
    with RunsApi(f"course/{repo.name}", 4242, step, [(4241, minutes_ago(3), True)]) as api:
        run = run_act(act_setup, repo, work / "act", bare="nothing",
                      env={"GITHUB_API_URL": api.url, "GITHUB_RUN_ID": "4242"},
                      secrets={"GITHUB_TOKEN": "act-token"})
    assert run.jobs.get(JOB) == "succeeded", run.tail()
    steps = run.steps(JOB)
    assert list(steps) == ["Check out the submission",
                           "Grade this push? (at most once every 30 minutes)"], steps
    assert "Bearer act-token" in api.tokens
    held = run.notices("Not graded")
    assert len(held) == 1 and "/actions/runs/4241 graded this branch" in held[0].message
    assert f"nox -s {lab.id}" in held[0].message
    # the gate runs on the runner's own python3, which act's summary tap does not see: act
    # logs what a step wrote to the job summary
    assert "Summary - ## Not graded" in run.log, run.tail()
    assert not run.notices("Autograding complete")


@pytest.mark.skipif(not runs_kit_workflows(), reason="MSDA_ACT_LABS=all only (nox -s workflows)")
def test_throttled_push_with_no_recent_grade_is_graded_warm(act_setup, tmp_path_factory):
    from harness import run_act

    lab = MANIFEST.lab(LABS[0])
    work, repo = _repo(tmp_path_factory, "throttled", lab)
    step = workflows.grading_step(lab)
    with RunsApi(f"course/{repo.name}", 4242, step, [(4240, minutes_ago(45), True)]) as api:
        run = run_act(act_setup, repo, work / "act", bare="nothing",
                      env={"GITHUB_API_URL": api.url, "GITHUB_RUN_ID": "4242"},
                      secrets={"GITHUB_TOKEN": "act-token"})
    assert run.notices("Autograding complete")[0].message.startswith("Points 0/"), run.tail()
    _warm(run)


@pytest.mark.skipif(not runs_kit_workflows(), reason="MSDA_ACT_LABS=all only (nox -s workflows)")
def test_gpu_job_starts_on_a_submission_only(act_setup, tmp_path_factory):
    """Switched on (MSDA_GPU_GRADING=true), the GPU job of a GPU lab does not start on a branch
    push; on a pushed tag submit-1 it starts (its install then fails here: no network for the
    CUDA torch and Modal, which is where the test stops looking)."""
    from harness import run_act

    lab = next(lab for lab in built_labs() if lab.has_gpu)
    work, repo = _repo(tmp_path_factory, "push", lab)
    switched_on = ["--var", "MSDA_GPU_GRADING=true"]
    branch = run_act(act_setup, repo, work / "branch", job="gpu-stage", extra_args=switched_on,
                     timeout=300)
    assert "gpu-stage" not in branch.jobs and not branch.steps("gpu-stage"), branch.tail()
    tagged = run_act(act_setup, repo, work / "tag", job="gpu-stage", extra_args=switched_on,
                     payload=_tag_event(repo), timeout=600)
    assert "Check out the submission" in tagged.steps("gpu-stage"), tagged.tail()


def test_cold_run_of_the_seed_built_and_saved_the_environment(act_setup):
    """The seed every act run restores from was built by a cold run of an exported workflow that
    installed the pins (its build and save steps ran) and saved them."""
    import act_env

    record = json.loads((act_env.env_cache_seed() / "cold-run.json").read_text())
    assert BUILD in record["steps"] and SAVE in record["steps"], record


def test_manifest_reads_and_checks_grade_on(tmp_path):
    from msda_labs.course.manifest import ManifestError, load_manifest

    base = yaml.safe_load((MANIFEST.path).read_text())

    def load(**course):
        data = json.loads(json.dumps(base))
        data["course"].update(course)
        path = tmp_path / "classroom.yml"
        path.write_text(yaml.safe_dump(data))
        return load_manifest(path).grading

    assert load() == GradeTrigger("push", 0)
    assert load(grade_on="submission") == GradeTrigger("submission", 0)
    assert load(grade_on="throttled", grade_every_minutes=15) == GradeTrigger("throttled", 15)
    for bad, says in (({"grade_on": "throttled"}, "needs grade_every_minutes"),
                      ({"grade_every_minutes": 5}, "only with grade_on: throttled"),
                      ({"grade_on": "throttled", "grade_every_minutes": 0}, "grade_every"),
                      ({"grade_on": "nightly"}, "grade_on")):
        with pytest.raises(ManifestError, match=says):
            load(**bad)


def test_exported_readme_says_when_github_grades(tmp_path):
    lab = MANIFEST.lab(LABS[0] if LABS else "lab01")
    said = {}
    for choice in CHOICES:
        repo = export_lab(_manifest(choice), lab, tmp_path / choice)
        said[choice] = (repo / "README.md").read_text()
    assert "Commit and push: GitHub Actions runs the same grader" in said["push"]
    assert "git tag" in said["submission"] and f"`nox -s {lab.id}`" in said["submission"]
    assert "Plain pushes are not graded" in said["submission"]
    assert "once every 30 minutes" in said["throttled"].replace("\n   ", " ")
