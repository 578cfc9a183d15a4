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
import os
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
from attacks.checkouts import (  # noqa: E402
    CHECKOUT_ATTACKS,
    GRANDCHILD_WAIT,
    canaries_alive,
    canary_messages,
    make_canary_folder,
    plant_canary,
    records,
)
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

CHIP_DIR = Path(__file__).resolve().parents[2] / "shared" / "msda_labs" / "chips"
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


CHECKOUT_LAB = "lab01"  # the whole-checkout attacks, the canary and the honest students
HONEST = ("aaa-honest", "zzz-honest")  # graded first and last in the batch


@pytest.fixture
def canary_folder():
    folder = make_canary_folder(Path(f"/run/msda-canary-{os.getpid()}-{time.monotonic_ns()}"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _whole_checkouts(folder: Path, export: Path, canary: Path,
                     secret: Path) -> dict[str, list[str]]:
    """The honest students (the chip), the canary and one checkout per whole-checkout attack,
    added to the class; returns {attack: the planted files the regrade must list}."""
    for name in HONEST:
        shutil.copytree(export, folder / name)
        shutil.copy2(CHIP_DIR / f"{CHECKOUT_LAB}.py", folder / name / f"{CHECKOUT_LAB}.py")
    shutil.copytree(export, folder / "canary")
    plant_canary(folder / "canary", CHECKOUT_LAB, canary, secret)
    planted = {}
    for attack in CHECKOUT_ATTACKS:
        shutil.copytree(export, folder / attack.name)
        planted[attack.name] = attack.plant(folder / attack.name, CHECKOUT_LAB)
    return planted


def _checkout_problems(results: dict, planted: dict[str, list[str]]) -> list[str]:
    """Every whole-checkout attack scores 0 and is marked (each planted file listed as added or
    modified); every honest student keeps full marks; all graded separated."""
    problems = []
    for name, files in planted.items():
        result = results.get(name)
        if result is None:
            problems.append(f"{name}: not graded")
            continue
        info = result.get("integrity") or {}
        listed = set(info.get("added") or []) | set(info.get("tampered") or [])
        unlisted = [f for f in files if f not in listed]
        if result["score"] or unlisted:
            problems.append(f"{name}: {result['score']}/{result['max_score']}, planted files not "
                            f"listed: {unlisted} (added {sorted(listed)[:8]})")
        if not (result.get("separation") or {}).get("separated"):
            problems.append(f"{name}: graded without separation: {result.get('separation')}")
    for name in HONEST:
        result = results.get(name)
        if result is None or result["score"] != result["max_score"] or result["max_score"] == 0:
            problems.append(f"honest student {name}: "
                            + (f"{result['score']}/{result['max_score']}" if result
                               else "not graded"))
        elif (result.get("integrity") or {}).get("added"):
            problems.append(f"honest student {name}: files listed as added: "
                            f"{result['integrity']['added']}")
    return problems


def _canary_problems(result: dict | None, canary: Path) -> list[str]:
    """No code of the canary ran as root (a root process writes its record anywhere), its
    module did run as a sandbox uid (its errors say so), nothing but the module ran, and its
    grandchild is gone."""
    found = records(canary) + [(place, uid, 0) for place, uid in canary_messages(result)]
    problems = [f"canary: {place} ran as root" for place, uid, _ in found if uid == 0]
    if not any(place == "import" and uid for place, uid, _ in found):
        problems.append(f"canary: its module never ran as a sandbox uid (records: {found[:6]})")
    problems += [f"canary: {place} ran (uid {uid}): only the module may run"
                 for place, uid, _ in found if place not in ("import", "grandchild")]
    alive = canaries_alive()
    if alive:
        problems.append(f"canary: its grandchild outlived its request (pids {alive})")
    return problems


@pytest.mark.parametrize("lab", LABS)
def test_attacks_score_zero_under_the_separated_regrade(exports, tmp_path, lab, request):
    """Each lab's single-file attacks as one class; for lab 01 the class also holds the
    whole-checkout attacks (tests/attacks/checkouts.py), the canary and two honest students,
    graded first and last: one batch, checked for everything at once."""
    chosen = attacks(lab, "export")
    files = {}
    if any(a.name == LOOKUP for a in chosen):
        files[f"{lab}/{LOOKUP}"] = request.getfixturevalue("lookup_table")
    folder = tmp_path / "class"
    folder.mkdir()
    make_class(folder, exports[lab], chosen, files)
    planted, canary, seed, secret = {}, None, SECRET_SEED, {}
    if lab == CHECKOUT_LAB:  # the same secret from a private seed file, which the canary seeks
        canary = request.getfixturevalue("canary_folder")
        seed_file = tmp_path / "seed"
        seed_file.write_text(f"{SECRET_SEED}\n")
        seed_file.chmod(0o600)
        seed, secret = None, {"MSDA_GRADE_SEED_FILE": str(seed_file)}
        planted = _whole_checkouts(folder, exports[lab], canary, seed_file)
    github = {name: tmp_path / name.lower() for name in GITHUB_FILES}
    for path in github.values():
        path.write_text("")
    results, notes, output = regrade_class(
        folder, lab, exports[lab], seed=seed,
        env={**SEPARATE, **secret, **{k: str(p) for k, p in github.items()}})
    problems = [v for a in chosen if (v := _verdict(a, results.get(a.name), notes.get(a.name)))]
    if planted:
        problems += _checkout_problems(results, planted)
        problems += [f"{name}: the seed file is not among the files proved closed to the child"
                     for name, result in results.items() if result and secret[
                         "MSDA_GRADE_SEED_FILE"] not in result["separation"].get("hidden", [])]
        time.sleep(GRANDCHILD_WAIT + 1)  # a grandchild that lived on would have recorded by now
        problems += _canary_problems(results.get("canary"), canary)
    if any(a.name == "outlive" for a in chosen) or planted:
        time.sleep(1.0)  # a process the attack left behind would rewrite the reports by now
    out = folder.parent / "class-out"
    rows = {r["student"]: r for r in csv.DictReader((out / "gradebook.csv").open())}
    again = {r["student"]: r["result"] for r in json.loads((out / "regrade.json").read_text())}
    for name in [a.name for a in chosen] + list(planted) + (list(HONEST) if planted else []):
        row = rows.get(name, {})
        if results.get(name) and (row.get("score") != str(results[name]["score"])
                                  or again.get(name) != results[name]):
            problems.append(f"{lab}/{name}: the gradebook or regrade.json changed after the "
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


@pytest.fixture(scope="module")
def gradescope_zip(tmp_path_factory) -> Path:
    zip_path = tmp_path_factory.mktemp("gradescope") / "gs.zip"
    assert main(["export", CHECKOUT_LAB, "--gradescope", str(zip_path)]) == 0
    return zip_path


def _run_autograder(zip_path: Path, root: Path, submission: Path) -> dict:
    """Gradescope's run_autograder in a folder laid out like /autograder, separated (root)."""
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
    (root / "source" / "run_autograder").chmod(0o755)
    (root / "results").mkdir()
    shutil.copytree(submission, root / "submission", symlinks=True)
    env = clean_env(AUTOGRADER_ROOT=str(root), MSDA_PYTHON=sys.executable, **SEPARATE)
    proc = subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text())


def test_whole_checkout_attacks_score_zero_on_gradescope(exports, gradescope_zip, tmp_path,
                                                          canary_folder):
    """A submission uploaded as a whole repository, with a pytest plugin declared in a planted
    metadata folder, modules named like optional imports and the canary: only its labNN.py is
    graded, in the pristine lab; the planted files are named in the output, and only the
    module runs, as a sandbox uid (one grading)."""
    repo = shutil.copytree(exports[CHECKOUT_LAB], tmp_path / "repo")
    planted = []
    for attack in CHECKOUT_ATTACKS:
        if attack.name in ("pytest-entry-point", "optional-imports"):
            planted += attack.plant(repo, CHECKOUT_LAB)
    plant_canary(repo, CHECKOUT_LAB, canary_folder)
    data = _run_autograder(gradescope_zip, tmp_path / "autograder", repo)
    assert data["score"] == 0 and data["tests"], f"on Gradescope: {data['score']} points"
    listed = json.dumps(data)
    assert all(f in listed for f in planted), f"planted files not named: {planted}"
    messages = {"exercises": [{"tests": [{"message": t.get("output", "")}
                                         for t in data["tests"]]}]}
    problems = _canary_problems(messages, canary_folder)
    assert not problems, "\n".join(problems)


def test_canary_and_every_planted_file_in_the_local_grade_as_root(exports, tmp_path, request,
                                                                  canary_folder):
    """The push workflow's command (``python -m msda_labs grade .`` at the root of the
    repository) run as root, separated, on a repository holding every whole-checkout attack at
    once and the canary: it scores 0, lists what the template does not hold, and no code of the
    student's runs as root (only the module runs, as a sandbox uid)."""
    # A workspace other users may pass through, as a runner's is (pytest's tmp_path is not).
    repo = canary_folder.parent / f"{canary_folder.name}-repo"
    shutil.copytree(exports[CHECKOUT_LAB], repo)
    request.addfinalizer(lambda: shutil.rmtree(repo, ignore_errors=True))
    planted = []
    for attack in CHECKOUT_ATTACKS:
        if attack.name not in ("linked-chip", "left-behind", "fake-reports"):
            planted += attack.plant(repo, CHECKOUT_LAB)
    plant_canary(repo, CHECKOUT_LAB, canary_folder)
    out = tmp_path / "grade.json"
    proc = subprocess.run([sys.executable, "-m", "msda_labs", "grade", ".", "--json", str(out)],
                          cwd=repo, capture_output=True, text=True, timeout=600,
                          env=clean_env(PYTHONPATH=str(repo / "shared"), **SEPARATE))
    assert proc.returncode == 0 and out.is_file(), proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert (result.get("separation") or {}).get("separated"), result.get("separation")
    assert result["score"] == 0 and result["max_score"] > 0
    extra = (result.get("integrity") or {}).get("extra") or []
    missing = [f for f in planted if f not in extra and not f.startswith(".github/")
               and f not in ("noxfile.py", "requirements.txt", "tests/conftest.py")]
    assert not missing, f"not listed as beyond the template: {missing}"
    time.sleep(GRANDCHILD_WAIT + 1)
    problems = _canary_problems(result, canary_folder)
    assert not problems, "\n".join(problems)
