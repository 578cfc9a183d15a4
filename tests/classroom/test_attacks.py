"""The attack suite (tests/attacks/) under the separated regrade: every attack scores 0 on the
tasks it targets.

Each lab's attacks are graded as one class of student repositories made from the lab's export
(the session's ``exports``), in one ``regrade --batch --seed`` run with ``MSDA_SEPARATE=1`` (the
grader runs as root, so each child drops to a uid of its own), as the regrade workflow does; the
gradebook, the regrade's JSON and the step's GitHub files are checked again after a pause, for a
process left behind. The attacks marked ``where: kit`` or ``both`` are graded in the kit itself
(``grade --submission``), where every lab's chips and tests lie. The lookup table must score
full on the public cases (so it is a real table) and 0 under the secret seed. Separation needs
root; elsewhere these tests skip.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from classroom_kit import clean_env
from kit import MANIFEST, separation_unavailable

from msda_labs.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attacks.suite import (  # noqa: E402
    LOOKUP,
    SECRET_SEED,
    attacks,
    build_lookup_table,
    grade_in_kit,
    make_class,
    regrade_class,
    target_points,
)

pytestmark = [
    pytest.mark.skipif(bool(separation_unavailable()),
                       reason=f"the attack suite runs where the graded run does, separated: "
                              f"{separation_unavailable()}"),
]
LABS = sorted({a.lab for a in attacks(where="export")})
SEPARATE = {"MSDA_SEPARATE": "1"}
GITHUB_FILES = ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_STEP_SUMMARY")


@pytest.fixture(scope="module")
def lookup_table(tmp_path_factory) -> Path:
    return build_lookup_table(tmp_path_factory.mktemp("lookup"))


def _verdict(attack, result, note="") -> str | None:
    """Why ``attack`` did not score 0 under separation, or None."""
    if result is None:
        return f"{attack.key}: not graded ({note or 'the grading run failed'})"
    if not (result.get("separation") or {}).get("separated"):
        return f"{attack.key}: graded without separation: {result.get('separation')}"
    score, top = target_points(result, attack.targets)
    if top == 0:
        return f"{attack.key}: no target task {attack.targets} in the result"
    if score:
        lost = [f"{t['name']} {t['score']}/{t['max_score']}" for ex in result["exercises"]
                if ex["id"] in attack.targets for t in ex["tests"] if t["score"]]
        return (f"{attack.key}: {score}/{top} on tasks {' '.join(attack.targets)} "
                f"({attack.summary[:90]}...): {', '.join(lost[:4])}")
    return None


@pytest.mark.parametrize("lab", LABS)
def test_attacks_score_zero_under_the_separated_regrade(exports, tmp_path, lab, request):
    chosen = attacks(lab, "export")
    files = {}
    if any(a.name == LOOKUP for a in chosen):
        files[f"{lab}/{LOOKUP}"] = request.getfixturevalue("lookup_table")
    folder = tmp_path / "class"
    folder.mkdir()
    make_class(folder, exports[lab], chosen, files)
    github = {name: tmp_path / name.lower() for name in GITHUB_FILES}
    for path in github.values():
        path.write_text("")
    results, notes, output = regrade_class(
        folder, lab, exports[lab], seed=SECRET_SEED,
        env={**SEPARATE, **{k: str(p) for k, p in github.items()}})
    problems = [v for a in chosen if (v := _verdict(a, results.get(a.name), notes.get(a.name)))]
    if any(a.name == "outlive" for a in chosen):
        time.sleep(1.0)  # a process the attack left behind would rewrite the reports by now
    out = folder.parent / "class-out"
    rows = {r["student"]: r for r in csv.DictReader((out / "gradebook.csv").open())}
    again = {r["student"]: r["result"] for r in json.loads((out / "regrade.json").read_text())}
    for attack in chosen:
        row = rows.get(attack.name, {})
        if results.get(attack.name) and (row.get("score") != str(results[attack.name]["score"])
                                         or again.get(attack.name) != results[attack.name]):
            problems.append(f"{attack.key}: the gradebook or regrade.json changed after the "
                            f"regrade ended (score now {row.get('score')})")
    written = [name for name, path in github.items() if path.read_text()]
    if written:
        problems.append(f"{lab}: the attacks wrote the step's {', '.join(written)}")
    faked = [line for line in output.splitlines()
             if line.startswith(("::", "Points ", "  Total ")) or "PASSED" in line]
    if faked:
        problems.append(f"{lab}/fake-lines: the regrade's output carries {faked[:3]}")
    assert not problems, "attacks that scored or left a mark under the separated regrade:\n" \
        + "\n".join(problems)


@pytest.mark.parametrize("attack", attacks(where="kit"), ids=lambda a: a.key)
def test_attacks_on_the_kits_files_score_zero_in_the_kit(attack, tmp_path):
    """The attacks on files that only the kit has (the lab's own chip, every lab's tests)."""
    copy = tmp_path / attack.path.name
    copy.write_bytes(attack.path.read_bytes())
    result, text = grade_in_kit(copy, attack.lab, env=SEPARATE)
    verdict = _verdict(attack, result, text[-1500:])
    assert verdict is None, verdict


READ_CHIP = attacks("lab04", "kit")[0] if attacks("lab04", "kit") else None
CHIP_LABS = [lab.id for lab in MANIFEST.labs if lab.built
             and not any(a.name == "read-chip" for a in attacks(lab.id))]


@pytest.mark.parametrize("lab", CHIP_LABS)
def test_every_labs_own_chip_is_out_of_reach(lab, tmp_path):
    """The read-chip attack (tests/attacks/lab04_read_chip.py) aimed at each other lab: its file
    loads that lab's chip off disk and takes its functions. Under separation the chip folder is
    closed to the child, so every task scores 0 (the import fails), in every lab."""
    assert READ_CHIP is not None and READ_CHIP.name == "read-chip"
    text = READ_CHIP.path.read_text().replace('"lab" + "04"', f'"lab" + "{lab[3:]}"')
    text = text.replace("lab04_helpers", f"{lab}_helpers")
    copy = tmp_path / f"{lab}.py"
    copy.write_text(text)
    result, output = grade_in_kit(copy, lab, env=SEPARATE)
    assert result is not None, output[-1500:]
    assert (result.get("separation") or {}).get("separated"), result.get("separation")
    assert result["max_score"] > 0 and result["score"] == 0, \
        f"{lab}/read-chip scored {result['score']}/{result['max_score']}"


def test_a_daemon_cannot_rewrite_gradescopes_results(tmp_path):
    """The Gradescope autograder (root, so separated): the outlive attack's daemon would rewrite
    results/results.json after the autograder wrote it."""
    attack = next(a for a in attacks("lab01") if a.name == "outlive")
    zip_path = tmp_path / "gs.zip"
    assert main(["export", attack.lab, "--gradescope", str(zip_path)]) == 0
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
    (root / "source" / "run_autograder").chmod(0o755)
    for folder in ("submission", "results"):
        (root / folder).mkdir()
    shutil.copy2(attack.path, root / "submission" / f"{attack.lab}.py")
    env = clean_env(AUTOGRADER_ROOT=str(root), MSDA_PYTHON=sys.executable,
                    PYTHONPATH=str(root / "source" / "lab" / "shared"), **SEPARATE)
    proc = subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    time.sleep(1.0)
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["score"] == 0 and data["tests"], \
        f"{attack.key} on Gradescope: {data['score']} points ({data.get('output', '')[:300]})"


def test_lookup_table_is_real_on_the_public_cases(lookup_table):
    """The table scores full where its answers were recorded: a 0 under the secret seed is the
    seed's doing, not a broken table."""
    attack = next(a for a in attacks("lab01") if a.name == LOOKUP)
    result, text = grade_in_kit(lookup_table, "lab01", env=SEPARATE)
    assert result is not None, text[-2000:]
    assert (result.get("separation") or {}).get("separated"), result.get("separation")
    score, top = target_points(result, attack.targets)
    assert score == top > 0, f"the lookup table scored {score}/{top} on the public cases"
