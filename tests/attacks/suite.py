"""The attack suite: files a determined student could submit to score without the work.

Each attack is one file ``labNN_<attack>.py`` in this folder, a complete student module whose
first comment lines say what it attacks::

    # attack: truth-from-disk
    # lab: lab01
    # targets: 1.1 1.2
    # where: both
    # (how it attacks, in words)

``where`` says where the attack is graded: ``export`` (the default: as a student repository made
from the lab's export, through ``regrade``), ``kit`` (``grade --submission`` in the kit, where
every chip and every lab's tests lie; for attacks on files an export does not carry) or ``both``.
Every attack must score 0 on its target tasks under separation (tests/classroom/test_attacks.py).

``python tests/attacks/suite.py [--separate 1]`` grades the whole suite on this checkout of the
kit (each attack through ``grade --submission`` in the kit, and every lab's export attacks as one
class of exported repositories through ``regrade --seed``) and prints the score table.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LOOKUP = "lookup-table"
SECRET_SEED = 424242  # the instructor's secret of the regrade runs here


@dataclass(frozen=True)
class Attack:
    name: str
    lab: str
    targets: tuple[str, ...]
    path: Path
    summary: str
    where: str = "export"

    @property
    def key(self) -> str:
        return f"{self.lab}/{self.name}"


def _header(path: Path) -> dict[str, str]:
    found, lines = {}, []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        match = re.match(r"#\s*(attack|lab|targets|where):\s*(.+)$", line)
        if match:
            found[match.group(1)] = match.group(2).strip()
        else:
            lines.append(line.lstrip("# "))
    found["summary"] = " ".join(lines)
    return found


def attacks(lab: str | None = None, where: str | None = None) -> list[Attack]:
    """Every attack of the suite, in file order; of ``lab`` only and graded ``where`` (kit or
    export) only, when given."""
    out = []
    for path in sorted(HERE.glob("lab[0-9][0-9]_*.py")):
        head = _header(path)
        if not {"attack", "lab", "targets"} <= set(head):
            raise ValueError(f"{path.name}: the first comment lines must say attack, lab, targets")
        place = head.get("where", "export").split()[0]
        if place not in ("export", "kit", "both"):
            raise ValueError(f"{path.name}: where must be export, kit or both, not {place!r}")
        if (lab is None or head["lab"] == lab) and (where is None or place in (where, "both")):
            out.append(Attack(head["attack"], head["lab"], tuple(head["targets"].split()), path,
                              head["summary"], place))
    return out


def target_points(result: dict | None, targets) -> tuple[int, int]:
    """(score, max) of a grade.json's exercises among ``targets``."""
    if not result:
        return 0, 0
    chosen = [ex for ex in result["exercises"] if ex["id"] in targets]
    return sum(ex["score"] for ex in chosen), sum(ex["max_score"] for ex in chosen)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MSDA_", "GITHUB_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(ROOT / "shared")
    env.update(extra)
    return env


def grade_in_kit(attack_file: Path, lab: str, *, env=None, seed: int | None = None,
                 timeout: float = 600) -> tuple[dict | None, str]:
    """``grade LAB --submission FILE`` in this kit: (grade.json or None, stdout + stderr)."""
    out = attack_file.parent / f"{attack_file.stem}.grade.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "msda_labs", "grade", lab, "--submission", str(attack_file),
           "--json", str(out)] + (["--seed", str(seed)] if seed is not None else [])
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=_env(**(env or {})))
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 or not out.is_file():
        return None, text
    return json.loads(out.read_text()), text


def build_lookup_table(folder: Path) -> Path:
    """The lookup-table attack with its table filled: the public grading of lab 01 is run once,
    unseparated, with a recorder that keeps every input it is given; the answers are computed
    offline with the chip, keyed as the attack keys them."""
    import importlib.util

    folder.mkdir(parents=True, exist_ok=True)
    template = HERE / "lab01_lookup_table.py"
    shutil.copy2(template, folder / template.name)
    records = folder / "records"
    records.mkdir(exist_ok=True)
    recorder = folder / "record_lab01.py"
    recorder.write_text((HERE / "record_lab01.py").read_text().replace(
        'RECORDS = ""', f"RECORDS = {str(records)!r}", 1))
    result, text = grade_in_kit(recorder, "lab01", env={"MSDA_SEPARATE": "0"})
    found = sorted(records.glob("*.pt"))
    if not result or not found:
        raise RuntimeError(f"recording the public cases of lab01 failed:\n{text[-2000:]}")
    import torch

    def load(name: str, path: Path):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    lookup = load("lookup_keys", template)
    chip = load("lab01_chip", ROOT / "shared" / "msda_labs" / "chips" / "lab01.py")
    table = {}
    for path in found:
        name, args = torch.load(path)
        table[lookup._key(name, *args)] = getattr(chip, name)(*args)
    buf = io.BytesIO()
    torch.save(table, buf)
    blob = base64.b64encode(zlib.compress(buf.getvalue(), 9)).decode()
    lines = "\n".join(f"    {blob[i:i + 90]!r}" for i in range(0, len(blob), 90))
    text = template.read_text().replace('TABLE = ""', f"TABLE = (\n{lines}\n)", 1)
    (folder / template.name).write_text(text)
    return folder / template.name


def make_class(folder: Path, export: Path, chosen: list[Attack],
               files: dict[str, Path] | None = None) -> dict[str, Attack]:
    """One student repository per attack (a copy of the lab's export with the attack as its
    labNN.py), named after the attack; returns {student: attack}."""
    class_ = {}
    for attack in chosen:
        repo = folder / attack.name
        shutil.copytree(export, repo)
        shutil.copy2((files or {}).get(attack.key, attack.path), repo / f"{attack.lab}.py")
        class_[attack.name] = attack
    return class_


def regrade_class(folder: Path, lab: str, pristine: Path, *, seed: int | None, env=None,
                  timeout: float = 1200) -> tuple[dict[str, dict | None], dict[str, str], str]:
    """``regrade FOLDER --lab LAB`` as the workflow runs it: ({student: grade.json or None},
    {student: note}, output)."""
    out = folder.parent / f"{folder.name}-out"
    out.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "msda_labs", "regrade", str(folder), "--batch", "--lab", lab,
           "--pristine", str(pristine), "--gradebook", str(out / "gradebook.csv"),
           "--json", str(out / "regrade.json"), "--no-insight"]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=_env(**(env or {})))
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"regrade of {folder} failed (exit {proc.returncode}):\n{text[-3000:]}")
    rows = json.loads((out / "regrade.json").read_text())
    return ({r["student"]: r["result"] for r in rows}, {r["student"]: r["note"] for r in rows},
            text)


LITTER = ("/tmp/.cache-fill", "/dev/shm/.cache-fill", "/tmp/.fix-gradebook.js", "/tmp/patch-*",
          "/tmp/patched-*", "/tmp/.outlive-*")


@contextlib.contextmanager
def _tidy(lab_folder: Path):
    """Remove what an unseparated attack left in the kit's lab folder, beside it and in /tmp."""
    before = {p for p in (*lab_folder.iterdir(), *ROOT.iterdir())}
    try:
        yield
    finally:
        for path in {*lab_folder.iterdir(), *ROOT.iterdir()} - before:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        for pattern in LITTER:
            for path in Path("/").glob(pattern.lstrip("/")):
                path.unlink(missing_ok=True)


def _cell(points: tuple[int, int], result, note: str = "") -> str:
    if note == "kit only":
        return "(kit only)"
    if result is None:
        return f"not graded ({note[:60]})" if note else "not graded"
    return f"{points[0]}/{points[1]}"


def main(argv=None) -> int:
    """Grade every attack here, in the kit and as a class of exported repositories; print the
    Markdown table (``--labs lab01 lab10`` for some labs only)."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--labs", nargs="*", help="only these labs")
    parser.add_argument("--separate", default=None, help="MSDA_SEPARATE for every run")
    ns = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "shared"))
    from msda_labs.classroom.export import export_lab
    from msda_labs.course.manifest import load_manifest

    manifest = load_manifest(ROOT / "classroom.yml")
    extra = {"MSDA_SEPARATE": ns.separate} if ns.separate is not None else {}
    rows = ["| attack | lab | targets | kit, public cases | regrade, secret seed | platform "
            "files |",
            "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="msda-attacks-") as tmp:
        tmp = Path(tmp)
        files = {f"lab01/{LOOKUP}": build_lookup_table(tmp / "lookup")}
        labs = sorted({a.lab for a in attacks()} & set(ns.labs or [a.lab for a in attacks()]))
        for lab in labs:
            chosen = attacks(lab)
            export = export_lab(manifest, manifest.lab(lab), tmp / "exports")
            kit = {}
            for attack in chosen:
                copy = tmp / "kit" / attack.lab / attack.path.name
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(files.get(attack.key, attack.path), copy)
                with _tidy(ROOT / manifest.lab(lab).folder):
                    kit[attack.name] = grade_in_kit(copy, lab, env=extra)[0]
            folder = tmp / f"class-{lab}"
            folder.mkdir()
            make_class(folder, export, attacks(lab, "export"), files)
            gh = {name: tmp / f"{lab}-{name}" for name in ("GITHUB_OUTPUT", "GITHUB_ENV",
                                                            "GITHUB_STEP_SUMMARY")}
            for path in gh.values():
                path.write_text("")
            results, notes = {}, {}
            if attacks(lab, "export"):
                results, notes, _ = regrade_class(
                    folder, lab, export, seed=SECRET_SEED,
                    env={**extra, **{k: str(v) for k, v in gh.items()}})
            written = [k for k, p in gh.items() if p.read_text()]
            for attack in chosen:
                touched = written if attack.name == "forged-report" else []
                mine, graded = kit[attack.name], results.get(attack.name)
                note = notes.get(attack.name, "") if attack.where != "kit" else "kit only"
                rows.append(
                    f"| {attack.name} | {lab} | {' '.join(attack.targets)} | "
                    f"{_cell(target_points(mine, attack.targets), mine)} | "
                    f"{_cell(target_points(graded, attack.targets), graded, note)}"
                    f" | {', '.join(touched) + ' written' if touched else ''} |")
            print("\n".join(rows[-len(chosen):]), flush=True)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
