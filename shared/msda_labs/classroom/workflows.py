"""Files generated for an exported lab repository from ``templates/``: the grading workflow, the
noxfile, the devcontainer and the small dotfiles.

Templates use ``@@NAME@@`` placeholders (``${{ }}`` belongs to GitHub expressions); every
placeholder must be filled, so a renamed one fails loudly instead of reaching a student.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from importlib import resources

from msda_labs.course.manifest import Lab, Manifest

__all__ = ["ACTIONS", "REPORTER_ACTION", "template", "fill", "reporter_env", "render_workflow",
           "render_noxfile", "render_devcontainer", "write_step_outputs", "WORKFLOW_PATH"]

WORKFLOW_PATH = ".github/workflows/classroom.yml"

# Third-party actions, pinned by full commit SHA (the release in the trailing comment). One place
# to update them; `zizmor --offline` checks the pinning, not the mapping of SHA to release. These
# are node24 releases (GitHub's hosted runners dropped Node 20 in 2026); the commits were read from
# the actions' own repositories (tag -> commit), as listed in ../shared/actions/README.md.
ACTIONS = {
    "CHECKOUT": "actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1",
    "SETUP_PYTHON": "actions/setup-python@5fda3b95a4ea91299a34e894583c3862153e4b97 # v7.0.0",
    "UPLOAD_ARTIFACT": "actions/upload-artifact@bbbca2ddaa5d8feaa63e36b76fdaad77386f024f # v7.0.0",
    # Keep the built grading environment between runs (node24; cache service v2 on GitHub): the
    # restore and save halves of actions/cache, so a job whose grade fails still saves it.
    "CACHE_RESTORE":
        "actions/cache/restore@27d5ce7f107fe9357f9df03efb73ab90386fccae # v5.0.5",
    "CACHE_SAVE": "actions/cache/save@27d5ce7f107fe9357f9df03efb73ab90386fccae # v5.0.5",
    # Used by the kit's own .github/workflows/regrade.yml (the gradebook job), not by exports.
    "DOWNLOAD_ARTIFACT":
        "actions/download-artifact@3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c # v8.0.1",
}
# GitHub Classroom's reporter, for `export --reporter-action`. Its v1 release is its only commit
# that runs (the branch head has no dist/ to execute). v1 declares node20 and has no newer
# release; since 2 June 2026 hosted runners run node20 actions on Node 24 (Node 20 itself was
# removed on 16 September 2026), which is how the act harness runs it too.
REPORTER_ACTION = ("classroom-resources/autograding-grading-reporter@"
                   "d13b5912daf5042ac1b71bc38bdb4a6bcd61d8ca")
_PINNED = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}$")
_PLACEHOLDER = re.compile(r"@@[A-Z0-9_]+@@")


def template(name: str) -> str:
    return resources.files("msda_labs.classroom").joinpath("templates", name).read_text()


def fill(text: str, **values) -> str:
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", str(value))
    left = sorted(set(_PLACEHOLDER.findall(text)))
    if left:
        raise ValueError(f"template placeholders left unfilled: {', '.join(left)}")
    return text


def reporter_env(runner_id: str) -> str:
    """The variable autograding-grading-reporter reads for a runner: ``<ID-UPPER>_RESULTS``."""
    return f"{runner_id.upper()}_RESULTS"


def write_step_outputs(values: Mapping[str, str], *, blocks: bool = False) -> bool:
    """Append step outputs to ``$GITHUB_OUTPUT``: ``key=value`` for a one-line value, else (and
    always with ``blocks``, for values built from workflow inputs) a ``key<<DELIMITER`` block with
    a random delimiter, so a value cannot end the block early or add an output.

    Returns False, writing nothing, when ``$GITHUB_OUTPUT`` is not set (outside GitHub Actions).
    """
    target = os.environ.get("GITHUB_OUTPUT")
    if not target:
        return False
    with open(target, "a") as fh:
        for key, value in values.items():
            if blocks or "\n" in value:
                delimiter = f"msda_{uuid.uuid4().hex}"
                fh.write(f"{key}<<{delimiter}\n{value}\n{delimiter}\n")
            else:
                fh.write(f"{key}={value}\n")
    return True


def _minutes(seconds: int) -> int:
    return max(5, -(-seconds // 60))


# The triggers of each ``course.grade_on`` (YAML lines under ``on:``). A submission is a pushed
# tag ``submit*``, a published release or a manual run; repository_dispatch is how GitHub
# Classroom asks for a grade, and stays in every choice.
SUBMISSION_TAGS = "submit*"
TRIGGERS = {
    "push": ["  push:", "  workflow_dispatch:", "  repository_dispatch:"],
    "submission": ["  push:", f'    tags: ["{SUBMISSION_TAGS}"]', "  release:",
                   "    types: [published]", "  workflow_dispatch:", "  repository_dispatch:"],
    "throttled": ["  push:", "  release:", "    types: [published]", "  workflow_dispatch:",
                  "  repository_dispatch:"],
}
_GATE_STEP = ("""
      - name: Grade this push? (at most once every @@EVERY@@ minutes)
        id: gate
        env:
          GITHUB_TOKEN: ${{ github.token }}
        run: python3 shared/msda_labs/classroom/gate.py --every @@EVERY@@ """
              """--step "Grade @@LAB@@" --lab @@LAB@@
""")


def when_graded(manifest: Manifest, lab: Lab) -> str:
    """The exported README's step that says when GitHub grades (``course.grade_on``), wrapped
    to follow ``4. `` in the list of readme-start.md."""
    import textwrap

    return textwrap.fill("4. " + _when_graded(manifest, lab), width=99, subsequent_indent="   ",
                         break_on_hyphens=False, break_long_words=False)[3:]


def _when_graded(manifest: Manifest, lab: Lab) -> str:
    where = ("the points appear in the run's summary and its `grade.json` artifact")
    grading = manifest.grading
    if grading.on == "submission":
        return (f"Grade as often as you like on your machine (`nox -s {lab.id}`): it is free "
                f"and the same grader. GitHub Actions grades a *submission* only: push a tag "
                f"whose name starts with `submit` (`git tag submit-1 && git push origin "
                f"submit-1`), publish a release, or run the *Autograding Tests* workflow by "
                f"hand (Actions, Run workflow); {where}. Plain pushes are not graded there.")
    if grading.on == "throttled":
        return (f"Commit and push: GitHub Actions runs the same grader (the *Autograding Tests* "
                f"workflow), at most once every {grading.every_minutes} minutes per branch (a "
                f"push sooner than that says so in its summary; running the workflow by hand "
                f"always grades); {where}. In between, grade on your machine: `nox -s "
                f"{lab.id}`.")
    return (f"Commit and push: GitHub Actions runs the same grader (the *Autograding Tests* "
            f"workflow); {where}.")


def grading_step(lab: Lab) -> str:
    """The name of the job's grading step (the throttle gate looks for it in earlier runs)."""
    return f"Grade {lab.id}"


def render_workflow(manifest: Manifest, lab: Lab, reporter_action: str | None = None) -> str:
    """``.github/workflows/classroom.yml`` of one lab.

    ``reporter_action`` (``OWNER/REPO@<40-hex SHA>``) uses that reporter action instead of the
    kit's own reporter step, which reads the same payload the same way.
    """
    grading = manifest.grading
    throttled = grading.on == "throttled"
    gated = "steps.gate.outputs.grade == 'true'"
    common = dict(LAB=lab.id, TITLE=lab.title, PYTHON=manifest.python, ENV=reporter_env(lab.id),
                  AND_GRADE=f" && {gated}" if throttled else "", **ACTIONS)
    if reporter_action:
        if not _PINNED.match(reporter_action):
            raise ValueError(f"--reporter-action {reporter_action!r}: give OWNER/REPO@SHA with the "
                             f"full 40-character commit SHA (a tag can be moved)")
        action = reporter_action + (" # v1 (node20)" if reporter_action == REPORTER_ACTION
                                    else "")
        reporter = fill(template("workflow-reporter-action.yml"), ACTION=action, **common)
    else:
        reporter = fill(template("workflow-reporter-builtin.yml"), **common)
    gpu = lab.stage("gpu")
    gpu_job = ""
    if gpu is not None:
        gpu_job = fill(template("workflow-gpu-job.yml"),
                       GPU_JOB_MINUTES=_minutes(gpu.job_timeout_s), **common)
    cpu_seconds = max(s.job_timeout_s for s in lab.cpu_stages) if lab.cpu_stages else 1800
    # grade_on: submission says so in the job's condition too (a branch push skips the job
    # before it starts, at no cost), besides the trigger's tag filter
    job_if = "github.actor != 'github-classroom[bot]'" + (
        " && (github.event_name != 'push' || startsWith(github.ref, 'refs/tags/submit'))"
        if grading.on == "submission" else "")
    text = fill(template("workflow-classroom.yml"), REPORTER=reporter.rstrip("\n"), JOB_IF=job_if,
                GPU_JOB=gpu_job.rstrip("\n"), JOB_MINUTES=_minutes(cpu_seconds),
                TRIGGERS="\n".join(TRIGGERS[grading.on]), WHEN=grading.describe(),
                PERMISSIONS="      actions: read  # the gate reads this branch's runs\n"
                if throttled else "",
                GATE=fill(_GATE_STEP, EVERY=grading.every_minutes, LAB=lab.id) if throttled
                else "",
                IF_GRADE=f"        if: {gated}\n" if throttled else "",
                GRADE_AND=f"{gated} && " if throttled else "", **common)
    return text.rstrip("\n") + "\n"


def render_noxfile(manifest: Manifest, lab: Lab, first_task: str = "1.1") -> str:
    stages = ", ".join(s.name for s in lab.cpu_stages) or "cpu"
    usage = [(f"nox -s {lab.id}", f"grade your {lab.id}.py ({stages})"),
             (f"nox -s {lab.id} -- --task {first_task}", "one task (grader options go after --)")]
    if lab.has_gpu:
        usage.append((f"nox -s {lab.id}-gpu", "the GPU stage (local CUDA, else your Modal)"))
    width = max(len(cmd) for cmd, _ in usage) + 4
    gpu_session = (fill(template("noxfile-gpu-session.py.tmpl"), LAB=lab.id)
                   if lab.has_gpu else "")
    return fill(template("noxfile.py.tmpl"), LAB=lab.id, TITLE=lab.title,
                USAGE="\n".join(f"    {cmd:<{width}}{what}" for cmd, what in usage),
                GPU_SESSION=gpu_session.rstrip("\n"))


def render_devcontainer(manifest: Manifest, lab: Lab) -> str:
    return fill(template("devcontainer.json"), LAB=lab.id, TITLE=lab.title,
                PYTHON=manifest.python)
