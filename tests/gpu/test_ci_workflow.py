"""The kit's own CI workflow: GitHub's workflow schema, zizmor (offline) without findings, the
self-test job, and a GPU job that runs on Modal only when the secrets exist."""

import json
import subprocess
import sys
from pathlib import Path

import yaml
from kit import assert_no_zizmor_finding, assert_valid_github_workflow

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / ".github" / "workflows" / "ci.yml"


def test_ci_validates_against_the_github_workflow_schema():
    assert_valid_github_workflow(CI)


def test_ci_has_no_zizmor_finding_even_for_an_auditor():
    assert_no_zizmor_finding(CI)


def test_jobs_selftest_then_gpu_stages_on_modal_only_with_secrets():
    data = yaml.safe_load(CI.read_text())
    triggers = data[True] if True in data else data["on"]  # YAML 1.1 reads `on` as true
    assert {"push", "pull_request"} <= set(triggers)
    assert data["permissions"] == {}
    selftest, gpu = data["jobs"]["selftest"], data["jobs"]["gpu-stages"]
    assert any(s.get("run") == "bash .ci/run" for s in selftest["steps"])
    assert gpu["needs"] == "selftest" and gpu["permissions"] == {"contents": "read"}
    check = gpu["steps"][0]
    assert check["id"] == "modal" and "::notice" in check["run"]
    assert "secrets.MODAL_TOKEN_ID" in check["env"]["HAS_TOKEN"]
    for step in gpu["steps"][1:]:
        assert "steps.modal.outputs.enabled == 'true'" in step["if"], step["name"]
    with_secrets = [s for s in gpu["steps"] if "MODAL_TOKEN_SECRET" in (s.get("env") or {})]
    assert len(with_secrets) == 1  # the token reaches the one step that calls Modal
    run = with_secrets[0]["run"]
    assert "python -m msda_labs.gpu labs" in run and "--solution" in run
    assert "expect-full" in run and "${{" not in run
    for job in data["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                assert len(step["uses"].split("@")[1]) == 40, step["uses"]  # pinned by SHA


def test_the_commands_the_gpu_job_runs(tmp_path):
    from msda_labs.course.manifest import load_manifest

    manifest = load_manifest(ROOT / "classroom.yml")
    proc = subprocess.run([sys.executable, "-m", "msda_labs.gpu", "labs"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [lab.id for lab in manifest.labs if lab.built and lab.has_gpu]
    full, partial = tmp_path / "a.json", tmp_path / "b.json"
    full.write_text(json.dumps({"lab": "lab06", "score": 5, "max_score": 5, "exercises": []}))
    partial.write_text(json.dumps({"lab": "lab06", "score": 3, "max_score": 5, "exercises": [
        {"id": "6.1", "tests": [{"name": "t", "status": "failed", "message": "why"}]}]}))
    expect = [sys.executable, "-m", "msda_labs.gpu", "expect-full"]
    assert subprocess.run([*expect, str(full)], capture_output=True, timeout=120).returncode == 0
    proc = subprocess.run([*expect, str(full), str(partial)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and "NOT FULL" in proc.stdout
    assert "6.1 t: failed: why" in proc.stdout
    assert subprocess.run(expect, capture_output=True, timeout=120).returncode == 1  # no files
