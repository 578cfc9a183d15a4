"""Generated workflows: GitHub's workflow schema, zizmor (offline) with no high finding, and the
shape GitHub Classroom generated. Every ready lab, plus a GPU lab and the reporter-action variant
(so the parts no ready lab uses yet are checked too), and a GPU lab under each other
``course.grade_on`` (submission, throttled)."""

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kit import MANIFEST, built_labs

from msda_labs.classroom import workflows
from msda_labs.course.manifest import GradeTrigger, Lab, Stage, load_manifest

BIN = Path(sys.executable).parent
REPORTER = "classroom-resources/autograding-grading-reporter@" + "0" * 40
GPU_LAB = Lab("lab05", "lab-05-forward-correct", "The forward kernel, correct", "ready",
              (Stage("interpret", 120), Stage("gpu", 300, "H100")))


def _tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: pip install -r requirements-dev.txt")
    return str(path)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("workflows")
    files = {}
    for lab in [*built_labs(), GPU_LAB]:
        name = f"{lab.id}{'-gpu' if lab is GPU_LAB else ''}"
        files[name] = out / f"{name}.yml"
        files[name].write_text(workflows.render_workflow(MANIFEST, lab))
    files["reporter-action"] = out / "reporter-action.yml"
    files["reporter-action"].write_text(workflows.render_workflow(MANIFEST, GPU_LAB, REPORTER))
    for choice in (GradeTrigger("submission"), GradeTrigger("throttled", 20)):
        files[f"grade-on-{choice.on}"] = out / f"grade-on-{choice.on}.yml"
        files[f"grade-on-{choice.on}"].write_text(workflows.render_workflow(
            dataclasses.replace(MANIFEST, grading=choice), GPU_LAB))
    return files


def test_workflows_validate_against_the_github_workflow_schema(rendered):
    proc = subprocess.run([_tool("check-jsonschema"), "--builtin-schema",
                           "vendor.github-workflows", *map(str, rendered.values())],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_workflows_pass_zizmor_without_high_findings(rendered):
    proc = subprocess.run([_tool("zizmor"), "--offline", "--format", "json",
                           *map(str, rendered.values())], capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.strip(), proc.stderr
    findings = json.loads(proc.stdout)
    high = [(f["ident"], f["determinations"]["severity"]) for f in findings
            if f["determinations"]["severity"].lower() == "high"]
    assert not high, high
    # we hold ourselves to none at all at zizmor's default persona
    assert not findings, [(f["ident"], f["determinations"]["severity"]) for f in findings]


def test_workflow_has_github_classroom_shape(rendered):
    for name, path in rendered.items():
        data = yaml.safe_load(path.read_text())
        triggers = data[True] if True in data else data["on"]  # YAML 1.1 reads `on` as true
        # every choice of course.grade_on keeps these (tests/workflows/test_grading_triggers.py)
        assert {"push", "workflow_dispatch", "repository_dispatch"} <= set(triggers), name
        assert data["permissions"] == {}
        job = data["jobs"]["run-autograding-tests"]
        assert job["if"].startswith("github.actor != 'github-classroom[bot]'")
        assert job["permissions"]["contents"] == "read"
        assert set(job["permissions"]) <= {"contents", "actions"}
        assert job["permissions"].get("actions", "read") == "read"
        steps = {s.get("id"): s for s in job["steps"] if s.get("id")}
        lab_id = next(key for key in steps if re.fullmatch(r"lab\d\d", key))
        assert "--summary" in steps[lab_id]["run"] and "--json grade.json" in steps[lab_id]["run"]
        reporter = job["steps"][-1]
        env = workflows.reporter_env(lab_id)
        assert reporter["env"] == {env: f"${{{{ steps.{lab_id}.outputs.result }}}}"}
        uploads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-art")]
        assert uploads and uploads[0]["with"]["path"] == "grade.json"


def test_actions_pinned_and_no_expressions_in_shell(rendered):
    for name, path in rendered.items():
        data = yaml.safe_load(path.read_text())
        for job in data["jobs"].values():
            for step in job["steps"]:
                if "uses" in step:
                    assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), step
                assert "${{" not in step.get("run", ""), (name, step["run"])


def test_gpu_job_is_off_unless_switched_on(rendered):
    data = yaml.safe_load(rendered["lab05-gpu"].read_text())
    job = data["jobs"]["gpu-stage"]
    assert "vars.MSDA_GPU_GRADING == 'true'" in job["if"]
    assert job["environment"] == "msda-gpu"
    assert "secret" in rendered["lab05-gpu"].read_text().lower()  # the risk is explained
    for name in rendered:
        if name != "lab05-gpu" and name != "reporter-action" and not name.startswith("grade-on"):
            lab = MANIFEST.lab(name)
            jobs = yaml.safe_load(rendered[name].read_text())["jobs"]
            assert ("gpu-stage" in jobs) == lab.has_gpu


def test_reporter_action_variant_requires_a_full_sha():
    with pytest.raises(ValueError, match="40-character"):
        workflows.render_workflow(MANIFEST, GPU_LAB,
                                  "classroom-resources/autograding-grading-reporter@v1")


def test_unfilled_placeholders_fail_loudly():
    with pytest.raises(ValueError, match="@@LAB@@"):
        workflows.fill("name: @@LAB@@ @@X@@", X="1")


def test_noxfile_and_devcontainer_render(tmp_path):
    for lab in [*built_labs(), GPU_LAB]:
        source = workflows.render_noxfile(MANIFEST, lab)
        compile(source, "noxfile.py", "exec")
        assert f'LAB = "{lab.id}"' in source
        assert ('name=f"{LAB}-gpu"' in source) == lab.has_gpu
        json.loads(workflows.render_devcontainer(MANIFEST, lab))


def test_kit_manifest_passes_its_schema(kit_root):
    load_manifest(kit_root / "classroom.yml")
