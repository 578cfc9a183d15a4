"""Regrade a student's checkout with the pristine grading files, untouched by the student.

    python -m msda_labs regrade PATH [--lab LAB] [--seed-file F] [--json OUT] [--gpu]
    python -m msda_labs regrade FOLDER_OF_CHECKOUTS --gradebook gradebook.csv

The checkout is copied to a temporary folder (without .git, virtualenvs and caches); there every
grading file (tests/, shared/, noxfile.py, requirements.txt, classroom.yml, .github/workflows/,
root conftest.py and modules that would shadow the grader's imports) is deleted and replaced with
the pristine copy: a fresh export of the kit, or ``--pristine DIR`` (an export). The student's
module (and anything else of theirs) stays; their checkout is never written to. A secret seed
(``--seed``, ``--seed-file``, ``$MSDA_GRADE_SEED`` or ``$MSDA_GRADE_SEED_FILE``) draws every random
case from a salt of the secret and the submission's bytes (:mod:`msda_labs.grading.secret`), so
hard-coded answers to the published cases fail; the grading process gets the secret in its
environment, never on its command line. The result says which grading files the checkout had
changed.

Run as root, a regrade requires separation (``MSDA_SEPARATE=1`` for the grading process, unless
set to ``0``): the student's code runs as a uid of its own that cannot read the pristine copy, the
grading files or this regrade's output (:mod:`msda_labs.grading.sandbox`).
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from msda_labs.errors import KitError
from msda_labs.grading import integrity, judgeonly, sandbox
from msda_labs.grading.executor import relay_safe
from msda_labs.grading.results import GradeResult
from msda_labs.grading.secret import SEED_ENV, SEED_FILE_ENV, read_secret

__all__ = ["RegradeError", "GradebookRow", "detect_lab", "restore", "regrade_checkout",
           "regrade_batch", "write_gradebook", "is_checkout", "commit_of", "GRADEBOOK_COLUMNS"]

GRADEBOOK_COLUMNS = ("student", "lab", "score", "max", "integrity", "commit", "note")
_NOT_COPIED = {".git", ".venv", "venv", ".nox", "__pycache__", ".pytest_cache", ".ruff_cache",
               ".mypy_cache", "node_modules"}


class RegradeError(KitError, RuntimeError):
    """The checkout cannot be regraded (no lab module, grading could not run...)."""


def _lab_id(key: str) -> str:
    key = key.strip()
    if key.isdigit():
        return f"lab{int(key):02d}"
    if key.startswith("lab-") and key[4:6].isdigit():
        return f"lab{key[4:6]}"
    return key


def is_checkout(path: Path) -> bool:
    return Path(path).is_dir() and any(Path(path).glob("lab[0-9][0-9].py"))


def detect_lab(checkout: Path, lab: str | None = None) -> str:
    """The lab of a checkout: ``lab`` if given, else its only ``labNN.py`` at the root."""
    if lab:
        return _lab_id(lab)
    modules = sorted(p.stem for p in Path(checkout).glob("lab[0-9][0-9].py"))
    if len(modules) == 1:
        return modules[0]
    if not modules:
        raise RegradeError(f"{checkout} has no labNN.py at its root; pass --lab LAB")
    raise RegradeError(f"{checkout} has several lab modules ({', '.join(modules)}); pass --lab")


def commit_of(checkout: Path) -> str:
    if not (Path(checkout) / ".git").exists():
        return ""
    proc = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _copy_student(checkout: Path, work: Path) -> None:
    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names
                if n in _NOT_COPIED or os.path.islink(os.path.join(folder, n))}

    shutil.copytree(checkout, work, ignore=ignore)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def restore(work: Path, pristine: Path, lab_id: str) -> list[str]:
    """Replace every grading file in ``work`` with the pristine one; returns notes."""
    notes = []
    for entry in integrity._shadowing_entries(work):
        _remove(work / entry.rstrip("/"))
    for name in (*integrity.GRADING_FILES, *integrity.ROOT_HOOKS,
                 *integrity.GRADING_DIRS, ".msda"):
        _remove(work / name)
    for rel in [*integrity.grading_files(pristine), integrity.MANIFEST_PATH]:
        source = pristine / rel
        if source.is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, work / rel)
    module = f"{lab_id}.py"
    if not (work / module).is_file():
        if not (pristine / module).is_file():
            raise RegradeError(f"the checkout has no {module} and the pristine copy no starter")
        shutil.copy2(pristine / module, work / module)
        notes.append(f"the checkout has no {module}: graded the untouched starter")
    return notes


def _kit_pristine(lab_id: str, scratch: Path) -> Path:
    from msda_labs.classroom.export import export_lab
    from msda_labs.course.manifest import find_manifest, load_manifest

    manifest = load_manifest(find_manifest())
    lab = manifest.lab(lab_id)
    if not (manifest.root / lab.folder).is_dir():
        raise RegradeError(f"no pristine source for {lab_id}: run regrade from the course kit "
                           f"or pass --pristine DIR (an export of {lab_id})")
    return export_lab(manifest, lab, scratch, force=True)


def _separating() -> bool:
    """Whether this regrade's grading process must run children as a uid of their own."""
    return sandbox.is_root() and os.environ.get(sandbox.SEPARATE_ENV, "").strip() != "0"


def _lock_down(scratch: Path, work: Path) -> None:
    """Children may pass through the scratch and work folders to the package they import, and no
    further: the student's files and everything else of this regrade are closed to other users
    (the grading process then opens the student's files to its child's group alone:
    ``$MSDA_PRIVATE_FOLDER``, :func:`msda_labs.grading.sandbox.share_with`)."""
    scratch.chmod(0o711)
    work.chmod(0o711)
    for entry in work.iterdir():
        if entry.name != "shared" and not entry.is_symlink():
            entry.chmod(entry.stat().st_mode & ~0o007)


def _grade_subprocess(work: Path, lab_id: str, *, secret: str | None, timeout: float | None,
                      python: str, judge_only: list[Path] = ()) -> GradeResult:
    out_dir = work.parent / "out"
    out_dir.mkdir(mode=0o700, exist_ok=True)
    out = out_dir / f"{work.name}.grade.json"
    cmd = [python, "-m", "msda_labs", "grade", str(work), "--json", str(out)]
    if timeout is not None:
        cmd += ["--timeout", str(timeout)]
    env = {k: v for k, v in os.environ.items()
           if k not in (SEED_ENV, SEED_FILE_ENV, "MSDA_STAGE", sandbox.JUDGE_ONLY_ENV)}
    if secret:  # in the environment: a command line is readable by every user in /proc
        env[SEED_ENV] = secret
    if _separating():
        env[sandbox.SEPARATE_ENV] = "1"
        env[sandbox.PRIVATE_FOLDER_ENV] = str(work)  # the student's files: for their uid only
        env[sandbox.JUDGE_ONLY_ENV] = os.pathsep.join(
            [str(p) for p in judge_only] + [str(out_dir)]
            + [p for p in os.environ.get(sandbox.JUDGE_ONLY_ENV, "").split(os.pathsep) if p])
    env["PYTHONPATH"] = os.pathsep.join(
        [str(work / "shared")] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                                  else []))
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not out.is_file():
        raise RegradeError(f"grading {lab_id} failed (exit {proc.returncode}): "
                           f"{relay_safe((proc.stderr or proc.stdout).strip()[-1500:])}")
    return GradeResult.read_json(out)


def regrade_checkout(checkout: Path, *, pristine: Path | None = None, lab_id: str | None = None,
                     seed: int | str | None = None, gpu: bool = False,
                     timeout: float | None = None, python: str | None = None,
                     seed_file: str | Path | None = None) -> GradeResult:
    """Grade ``checkout`` in a copy with pristine grading files; the checkout is not written.

    The secret seed is ``seed``, else the file ``seed_file``, else ``$MSDA_GRADE_SEED`` or the
    file ``$MSDA_GRADE_SEED_FILE`` (none: the published cases)."""
    checkout = Path(checkout).resolve()
    if not checkout.is_dir():
        raise RegradeError(f"{checkout} is not a folder")
    lab_id = detect_lab(checkout, lab_id)
    secret = read_secret(seed, seed_file)
    with tempfile.TemporaryDirectory(prefix="msda-regrade-") as tmp:
        scratch = Path(tmp)
        if pristine is None:
            source, label = _kit_pristine(lab_id, scratch / "pristine"), "the kit"
        else:
            source, label = Path(pristine).resolve(), str(pristine)
        found = integrity.compare_trees(checkout, source)
        own = integrity.check_folder(checkout)
        work = scratch / "work"
        _copy_student(checkout, work)
        notes = restore(work, source, lab_id)
        judge_only = [source, *judgeonly.judge_only_paths(None, None)]
        if _separating():
            _lock_down(scratch, work)
            judgeonly.hide([p for p in judge_only if p.exists()])
        result = _grade_subprocess(work, lab_id, secret=secret, timeout=timeout,
                                   python=python or sys.executable, judge_only=judge_only)
        if gpu:
            result.merge(_gpu_stage(lab_id, work, secret, timeout))
    result.submission = f"{checkout.name}/{lab_id}.py"
    restored = found["modified"]
    # What the checkout changed against its own manifest (the export it started from): student
    # edits, unless the manifest was edited too. The rest of `restored` is the kit's own drift
    # since that export (use --pristine with the published export to see none). A checkout
    # without a manifest (a Gradescope upload of labNN.py alone) is compared with the pristine
    # copy instead: files it lacks were supplied, not changed, so only files that differ (or
    # were added) count.
    if own.get("checked"):
        tampered = own["modified"]
    else:
        tampered = sorted(set(found["changed"]) | set(found["added"]))
    result.integrity = {"checked": True, "modified": [], "restored": restored,
                        "tampered": tampered, "changed": found["changed"],
                        "missing": found["missing"], "added": found["added"], "source": label}
    head = [f"regraded with pristine grading files from {label}"]
    if tampered:
        head.append(f"the checkout had changed grading files, restored before grading: "
                    f"{', '.join(tampered)}")
    absent = set(found["missing"]) if not own.get("checked") else set()
    drift = [p for p in restored if p not in tampered and p not in absent]
    if drift:
        head.append(f"{len(drift)} grading file(s) of the checkout's export differ from {label} "
                    f"and were replaced too: {', '.join(drift[:5])}"
                    + (" ..." if len(drift) > 5 else ""))
    if secret:
        head.append("graded with a secret seed: the random cases differ from the published ones")
    result.notes = head + notes + [n for n in result.notes if n not in head]
    return result


def _gpu_stage(lab_id: str, work: Path, seed: str | None, timeout: float | None) -> GradeResult:
    """The GPU stage through the GPU runner (local CUDA, else Modal), on the restored copy; on
    local CUDA as root, separation is required as for the CPU stages."""
    from msda_labs.gpu import runner

    saved = os.environ.get(sandbox.SEPARATE_ENV)
    if _separating():
        os.environ[sandbox.SEPARATE_ENV] = "1"
    try:
        return runner.run_gpu_stage(lab_id, work, work / f"{lab_id}.py", timeout=timeout,
                                    seed=seed)
    except (KitError, runner.GpuUnavailable) as exc:
        raise RegradeError(f"the GPU stage of {lab_id} could not run: {exc}") from None
    finally:
        if saved is None:
            os.environ.pop(sandbox.SEPARATE_ENV, None)
        else:
            os.environ[sandbox.SEPARATE_ENV] = saved


@dataclass
class GradebookRow:
    student: str
    lab: str
    score: int | str
    max: int | str
    integrity: str
    commit: str
    note: str = ""
    result: GradeResult | None = None

    def as_csv(self) -> list:
        return [self.student, self.lab, self.score, self.max, self.integrity, self.commit,
                self.note]


def _student(name: str, prefix: str | None) -> str:
    if prefix and name.startswith(prefix):
        return name[len(prefix):].lstrip("-_") or name
    return name


def regrade_batch(folder: Path, *, lab: str | None = None, prefix: str | None = None,
                  pristine: Path | None = None, progress=None, **options) -> list[GradebookRow]:
    """Regrade every checkout (a sub-folder holding a labNN.py) of ``folder``, one row each.

    A checkout that cannot be graded gets a row with an empty score and the reason in ``note``.
    Pristine copies from the kit are exported once per lab.
    """
    folder = Path(folder)
    rows = []
    with tempfile.TemporaryDirectory(prefix="msda-batch-") as tmp:
        cache: dict[str, Path] = {}
        for checkout in sorted(p for p in folder.iterdir()
                               if p.is_dir() and not p.name.startswith(".")):
            student = _student(checkout.name, prefix)
            commit = commit_of(checkout)
            try:
                lab_id = detect_lab(checkout, lab)
                source = pristine
                if source is None:
                    if lab_id not in cache:
                        cache[lab_id] = _kit_pristine(lab_id, Path(tmp) / lab_id)
                    source = cache[lab_id]
                result = regrade_checkout(checkout, pristine=source, lab_id=lab_id, **options)
            except (RegradeError, ValueError, OSError) as exc:
                rows.append(GradebookRow(student, lab or "", "", "", "not graded", commit,
                                         str(exc)))
            else:
                tampered = result.integrity.get("tampered") or []
                drift = len(result.integrity.get("restored") or []) - len(tampered)
                rows.append(GradebookRow(
                    student, lab_id, result.score, result.max_score,
                    "modified: " + "; ".join(tampered) if tampered else "clean", commit,
                    f"{drift} grading file(s) from an older export replaced" if drift > 0
                    else "", result=result))
            if progress is not None:
                progress(rows[-1])
    return rows


def write_gradebook(rows: list[GradebookRow], path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(GRADEBOOK_COLUMNS)
        for row in rows:
            writer.writerow(row.as_csv())
    return path
