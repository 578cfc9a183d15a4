"""Regrade a student's checkout: the pristine lab with the student's ``labNN.py``, and only it.

    python -m msda_labs regrade PATH [--lab LAB] [--seed-file F] [--json OUT] [--gpu]
    python -m msda_labs regrade FOLDER_OF_CHECKOUTS --gradebook gradebook.csv [--jobs N]

The work tree is a copy of the pristine lab (a fresh export of the kit, or ``--pristine DIR``, an
export) with the student's ``labNN.py`` written into it: nothing else of the checkout is copied,
imported or run. What the checkout holds beyond the template is listed in the result (integrity
``added``), and the grading files it changed are named (``tampered``); the student's checkout is
never written to. A secret seed (``--seed``, ``--seed-file``, ``$MSDA_GRADE_SEED`` or
``$MSDA_GRADE_SEED_FILE``) draws every random case from a salt of the secret and the submission's
bytes (:mod:`msda_labs.grading.isolation.secret`), so hard-coded answers to the published cases
fail; the grading process gets the secret in its environment, never on a command line, and a seed
file that other users can read is refused.

The grading process starts in isolated mode with a fixed search path, in the work tree, with an
environment built from an allowlist (:func:`msda_labs.grading.isolation.executor.python_command`,
:func:`~msda_labs.grading.isolation.executor.grading_env`). Run as root, a regrade requires
separation (``MSDA_SEPARATE=1`` for the grading process, unless set to ``0``): the student's code
runs as a uid of its own that cannot read the pristine copy, the grading files, the seed file or
this regrade's output (:mod:`msda_labs.grading.isolation.sandbox`). docs/security.md says what each
run trusts.

Everything the judge reads of a checkout goes through
:class:`msda_labs.grading.isolation.studentfiles.Reader` (no link followed, regular files only,
sizes and walks capped): odd entries are listed (integrity ``odd``) and the checkout is graded on
its ``labNN.py`` alone. A batch grades each student in a worker process of its own, within a
per-student limit, ``jobs`` at a time, and keeps each row as soon as it is done
(:mod:`msda_labs.classroom.batch`); a seed that would be refused stops the batch before any student
is graded or any file written.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from msda_labs.errors import KitError
from msda_labs.grading.isolation import judgeonly, sandbox, stem
from msda_labs.grading.isolation.executor import grading_env, python_command, relay_safe
from msda_labs.grading.isolation.secret import SEED_ENV, SEED_FILE_ENV, read_secret
from msda_labs.grading.isolation.studentfiles import Reader
from msda_labs.grading.judge import integrity
from msda_labs.grading.judge.results import GradeResult

__all__ = ["RegradeError", "GradebookRow", "detect_lab", "regrade_checkout",
           "regrade_batch", "write_gradebook", "verify_outputs", "is_checkout", "commit_of",
           "student_module", "check_seed_file", "check_secret", "survey_checkout",
           "GRADEBOOK_COLUMNS", "journal_path"]

GRADEBOOK_COLUMNS = ("student", "lab", "score", "max", "integrity", "commit", "note")
_NOT_COPIED = {".git", ".venv", "venv", ".nox", "__pycache__", ".pytest_cache", ".ruff_cache",
               ".mypy_cache", "node_modules"}
_MODULE_LIMIT = 8 << 20  # bytes: a lab module larger than this is not a plausible submission


class RegradeError(KitError, RuntimeError):
    """The checkout cannot be regraded (no lab module, grading could not run...)."""


def _lab_id(key: str) -> str:
    key = key.strip()
    if key.isdigit():
        return f"lab{int(key):02d}"
    if key.startswith("lab-") and key[4:6].isdigit():
        return f"lab{key[4:6]}"
    return key


def _lab_modules(checkout: Path) -> list[str]:
    """The ``labNN.py`` names at the checkout's root (links and other odd entries included, so
    that they get a clear result), listed without following links."""
    return sorted(name[:-3] for name, _ in Reader(Path(checkout)).listing()
                  if len(name) == 8 and name.startswith("lab") and name[3:5].isdigit()
                  and name.endswith(".py"))


def is_checkout(path: Path) -> bool:
    return Path(path).is_dir() and bool(_lab_modules(path))


def detect_lab(checkout: Path, lab: str | None = None) -> str:
    """The lab of a checkout: ``lab`` if given, else its only ``labNN.py`` at the root."""
    if lab:
        return _lab_id(lab)
    modules = _lab_modules(checkout)
    if len(modules) == 1:
        return modules[0]
    if not modules:
        raise RegradeError(f"{checkout} has no labNN.py at its root; pass --lab LAB")
    raise RegradeError(f"{checkout} has several lab modules ({', '.join(modules)}); pass --lab")


_OBJECT_NAME = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256 repositories
_REF_LIMIT = 4096  # .git/HEAD and a loose ref hold one line


def commit_of(checkout: Path) -> str:
    """The commit at the HEAD of the checkout's repository, "" when it has none that can be told.

    Read as data through :class:`Reader` (no link followed, regular files only, bounded): the
    judge runs no git in a student's folder, where a FIFO for ``.git/HEAD`` would block it and
    the repository's configuration could run programs. HEAD holds a commit (detached) or names
    a ref, found as a loose file or in ``packed-refs``. A ``.git`` that is a file (a worktree's
    pointer to a repository elsewhere) is not followed."""
    reader = Reader(Path(checkout))
    if reader.kind(".git") != "folder":
        return ""
    head = (reader.read(".git/HEAD", limit=_REF_LIMIT) or b"").strip()
    if _OBJECT_NAME.fullmatch(head):
        return head.decode()
    if not head.startswith(b"ref:"):
        return ""
    ref = head[4:].strip()
    parts = ref.split(b"/")
    if parts[0] != b"refs" or len(parts) < 2 or any(p in (b"", b".", b"..") for p in parts) \
            or not ref.isascii():
        return ""
    loose = (reader.read(f".git/{ref.decode()}", limit=_REF_LIMIT) or b"").strip()
    if _OBJECT_NAME.fullmatch(loose):
        return loose.decode()
    for line in (reader.read(".git/packed-refs") or b"").splitlines():
        name, _, named = line.partition(b" ")
        if named.strip() == ref and _OBJECT_NAME.fullmatch(name):
            return name.decode()
    return ""


def student_module(checkout: Path, lab_id: str,
                   reader: Reader | None = None) -> tuple[bytes | None, str]:
    """(the bytes of the checkout's ``labNN.py``, ""), or (None, why) when it has none that can
    be graded: missing, a link, not a regular file (a FIFO would block a reader), or too large.
    Read through :class:`Reader`: no link followed, without blocking, capped."""
    reader = reader or Reader(Path(checkout))
    name = f"{lab_id}.py"
    saved, reader.file_limit = reader.file_limit, min(reader.file_limit, _MODULE_LIMIT)
    try:
        data = reader.read(name)
    finally:
        reader.file_limit = saved
    if data is not None:
        return data, ""
    why = reader.odd.get(name)
    if why is None:
        return None, f"the checkout has no {name}"
    if why == "symbolic link":
        return None, f"{name} is a symbolic link, not a file"
    if why.startswith("too large"):
        return None, f"{name} is larger than {_MODULE_LIMIT >> 20} MiB"
    if why.startswith(("unreadable", "changed")):
        return None, f"{name} cannot be read ({why})"
    return None, f"{name} is not a regular file ({why})"


def _work_tree(pristine: Path, work: Path, lab_id: str, module: bytes | None) -> None:
    """``work``: a copy of the pristine lab with ``module`` as its ``labNN.py`` (the untouched
    starter when None)."""
    shutil.copytree(pristine, work, symlinks=True,
                    ignore=lambda folder, names: {n for n in names if n in _NOT_COPIED})
    target = work / f"{lab_id}.py"
    if module is not None:
        target.unlink(missing_ok=True)
        target.write_bytes(module)
    elif not target.is_file():
        raise RegradeError(f"the checkout has no gradable {lab_id}.py and the pristine copy no "
                           f"starter")


def _kit_pristine(lab_id: str, scratch: Path) -> Path:
    from msda_labs.classroom.export import export_lab
    from msda_labs.course.manifest import find_manifest, load_manifest

    manifest = load_manifest(find_manifest())
    lab = manifest.lab(lab_id)
    if not (manifest.root / lab.folder).is_dir():
        raise RegradeError(f"no pristine source for {lab_id}: run regrade from the course kit "
                           f"or pass --pristine DIR (an export of {lab_id})")
    return export_lab(manifest, lab, scratch, force=True, judge=True)


def records_its_truth(source: Path, lab_id: str) -> bool:
    """Whether the lab copy ``source`` is a template whose truth is a recording of the public
    cases (labs 00, 03 and 08: :mod:`msda_labs.grading.judge.owntruth`), not the judge's copy (which
    keeps the template's manifest beside its own)."""
    reader = Reader(Path(source))
    return (reader.kind(f"tests/truth_{lab_id}.py") == "regular file"
            and reader.kind(integrity.TEMPLATE_DIGESTS_PATH) != "regular file")


def judge_copy_for(source: Path, lab_id: str, secret: str | None, scratch: Path) -> Path | None:
    """The copy of the lab a module is graded in when ``source`` cannot grade it: a template that
    records its truth for the public cases only, graded with a secret seed, is graded in the kit's
    judge copy of the lab (None: ``source`` itself serves). Without the kit, a RegradeError says
    what to do: a grade against the template's recording would fail every secret case."""
    if not secret or not records_its_truth(source, lab_id):
        return None
    try:
        return _kit_pristine(lab_id, scratch)
    except RegradeError:
        raise RegradeError(f"{source} is {lab_id}'s template, which records the expected values "
                           f"of the public cases only; a grade with a secret seed needs the "
                           f"judge's copy of the lab: run regrade from the course kit") from None


def _separating() -> bool:
    """Whether this regrade's grading process must run children as a uid of their own."""
    return sandbox.is_root() and os.environ.get(sandbox.SEPARATE_ENV, "").strip() != "0"


@contextlib.contextmanager
def _stems_for_the_batch():
    """Zygotes forked from warm stems (:mod:`msda_labs.grading.isolation.stem`) for every student
    of a batch: each grading process then skips the 2.4 s a zygote spends importing torch. Only
    where children run as a uid of their own, which cannot enter the stems' folder (0700, the
    judge's); elsewhere a child runs as the judge's uid, could reach the stems of the next
    students, and every zygote starts cold. A folder already named in the environment is kept."""
    if os.environ.get(stem.STEMS_ENV) or not _separating():
        yield
        return
    folder = tempfile.mkdtemp(prefix="msda-stems-")
    os.environ[stem.STEMS_ENV] = folder
    try:
        with stem.held(folder):  # a batch killed outright takes its stems with it
            yield
    finally:
        os.environ.pop(stem.STEMS_ENV, None)
        stem.stop_all(folder)
        shutil.rmtree(folder, ignore_errors=True)


def _lock_down(scratch: Path, work: Path) -> None:
    """Children may pass through the scratch and work folders to the package they import, and no
    further: the student's files and everything else of this regrade are closed to other users
    (the grading process then opens the student's files to its child's group alone:
    ``$MSDA_PRIVATE_FOLDER``, :func:`msda_labs.grading.isolation.sandbox.share_with`)."""
    scratch.chmod(0o711)
    work.chmod(0o711)
    for entry in work.iterdir():
        if entry.name != "shared" and not entry.is_symlink():
            entry.chmod(entry.stat().st_mode & ~0o007)


def _seed_path(seed, seed_file) -> Path | None:
    """The file the secret comes from (the same order as :func:`read_secret`), or None."""
    if seed is not None and str(seed).strip():
        return None
    if seed_file:
        return Path(seed_file)
    if os.environ.get(SEED_ENV, "").strip():
        return None
    named = os.environ.get(SEED_FILE_ENV, "").strip()
    return Path(named) if named else None


def check_secret(seed=None, seed_file=None) -> tuple[Path | None, str | None]:
    """The seed file (checked: :func:`check_seed_file`) and the secret, as a regrade would take
    them; RegradeError when the regrade must be refused. A batch calls this once, before any
    student is graded or any file written."""
    seed_path = _seed_path(seed, seed_file)
    if seed_path is not None:
        seed_path = check_seed_file(seed_path)
    try:
        return seed_path, read_secret(seed, seed_path)
    except KitError as exc:
        raise RegradeError(str(exc)) from None


def check_seed_file(path: Path) -> Path:
    """Refuse a seed file that anyone but its owner could read (or that a sandbox uid owns): the
    student's code must not be able to read the secret, whatever it learns of its path. Returns
    the file's absolute path."""
    path = Path(path).absolute()
    try:
        info = os.stat(path)
    except OSError as exc:
        raise RegradeError(f"cannot read the seed file {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise RegradeError(f"the seed file {path} is not a regular file")
    if info.st_mode & 0o077:
        raise RegradeError(
            f"the seed file {path} can be read by other users (mode "
            f"{stat.S_IMODE(info.st_mode):04o}): the students' code could read the secret. Make "
            f"it private first: chmod 600 {path}")
    if sandbox.UID_BASE <= info.st_uid < sandbox.UID_BASE + 1000:
        raise RegradeError(f"the seed file {path} belongs to uid {info.st_uid}, a uid that "
                           f"students' code runs as: keep it in a file of yours (chmod 600)")
    return path


def _grade_subprocess(work: Path, lab_id: str, *, secret: str | None, timeout: float | None,
                      python: str, judge_only: list[Path] = ()) -> GradeResult:
    """``grade WORK`` in a process of its own: isolated mode with a fixed search path (the work
    tree's package first), the work tree as its folder, an environment built from an allowlist,
    the secret in that environment (a command line is readable by every user in /proc)."""
    out_dir = work.parent / "out"
    out_dir.mkdir(mode=0o700, exist_ok=True)
    out = out_dir / f"{work.name}.grade.json"
    args = ["grade", str(work), "--json", str(out)]
    if timeout is not None:
        args += ["--timeout", str(timeout)]
    cmd = python_command("msda_labs", *args, path=[str(work / "shared")], python=python)
    env = {k: v for k, v in grading_env().items()
           if k not in (SEED_ENV, SEED_FILE_ENV, "MSDA_STAGE", sandbox.JUDGE_ONLY_ENV,
                        sandbox.PRIVATE_FOLDER_ENV)}
    if secret:
        env[SEED_ENV] = secret
    if _separating():
        env[sandbox.SEPARATE_ENV] = "1"
        env[sandbox.PRIVATE_FOLDER_ENV] = str(work)  # the submission's folder: its uid only
        env[sandbox.JUDGE_ONLY_ENV] = os.pathsep.join(
            [str(p) for p in judge_only] + [str(out_dir)]
            + [p for p in os.environ.get(sandbox.JUDGE_ONLY_ENV, "").split(os.pathsep) if p])
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0 or not out.is_file():
        raise RegradeError(f"grading {lab_id} failed (exit {proc.returncode}): "
                           f"{relay_safe((proc.stderr or proc.stdout).strip()[-1500:])}")
    return GradeResult.read_json(out)


def survey_checkout(checkout: Path, source: Path, lab_id: str) -> dict:
    """Everything the judge reads of a checkout, read through one :class:`Reader` (bounded, no
    link followed): ``module`` (the bytes of ``labNN.py``, or None) and ``why`` not, ``found``
    (its grading files against the pristine ``source``), ``own`` (against its own manifest),
    ``added`` (beyond the template) and ``odd`` (what the reader refused)."""
    checkout = Path(checkout)
    reader = Reader(checkout)
    module, why = student_module(checkout, lab_id, reader)
    found = integrity.compare_trees(checkout, source, reader)
    own = integrity.check_folder(checkout, reader)
    template = integrity.template_of(source)
    if template is None:
        template = set(integrity.walk(source, skip=integrity.NOT_SCANNED)[0])
    added = integrity.extra_files(checkout, template, f"{lab_id}.py", reader)
    return {"module": module, "why": why, "found": found, "own": own, "added": added,
            "odd": reader.odd_list()}


@contextlib.contextmanager
def _scratch(room: str | Path | None):
    """A regrade's scratch folder: a new temporary one, or ``room``, a batch slot's folder (in
    the same temporary folder, as private: made anew for each student, mode 0700, and removed
    after), so that the zygote stems of the batch, keyed by the grading process's folder and
    search path, serve each student of the slot in turn instead of one stem a student."""
    if room is None:
        with tempfile.TemporaryDirectory(prefix="msda-regrade-") as tmp:
            yield tmp
        return
    room = Path(room)
    if room.is_symlink() or (room.exists() and not room.is_dir()):
        raise RegradeError(f"the batch's work folder {room} is not a folder of its own")
    shutil.rmtree(room, ignore_errors=True)  # what a worker killed at its limit left
    room.mkdir(mode=0o700)
    try:
        yield str(room)
    finally:
        shutil.rmtree(room, ignore_errors=True)


def regrade_checkout(checkout: Path, *, pristine: Path | None = None, lab_id: str | None = None,
                     seed: int | str | None = None, gpu: bool = False,
                     timeout: float | None = None, python: str | None = None,
                     seed_file: str | Path | None = None,
                     judge_copy: str | Path | None = None,
                     room: str | Path | None = None) -> GradeResult:
    """Grade the checkout's ``labNN.py`` in a copy of the pristine lab; the checkout is not
    written, and nothing else of it is copied or run (it is listed: integrity ``added``).

    Where the pristine lab cannot grade a secret seed (:func:`judge_copy_for`), the module is
    graded in the kit's judge copy (``judge_copy``, or one exported here) and the checkout is
    still compared with the pristine lab.

    The secret seed is ``seed``, else the file ``seed_file``, else ``$MSDA_GRADE_SEED`` or the
    file ``$MSDA_GRADE_SEED_FILE`` (none: the published cases); a seed file that other users
    can read is refused (:func:`check_seed_file`)."""
    checkout = Path(checkout).resolve()
    if not checkout.is_dir():
        raise RegradeError(f"{checkout} is not a folder")
    lab_id = detect_lab(checkout, lab_id)
    seed_path, secret = check_secret(seed, seed_file)
    with _scratch(room) as tmp:
        scratch = Path(tmp)
        if pristine is None:
            source, label = _kit_pristine(lab_id, scratch / "pristine"), "the kit"
        else:
            source, label = Path(pristine).resolve(), str(pristine)
        survey = survey_checkout(checkout, source, lab_id)
        module, why, found, own, added = (survey[k] for k in ("module", "why", "found", "own",
                                                              "added"))
        grade_in = Path(judge_copy).resolve() if judge_copy else \
            judge_copy_for(source, lab_id, secret, scratch / "judge")
        work = scratch / "work"
        _work_tree(grade_in or source, work, lab_id, module)
        notes = [f"{why}: graded the untouched starter"] if module is None else []
        if grade_in is not None:
            notes.append(f"graded in the kit's judge copy of {lab_id}: {label} records the "
                         f"expected values of the public cases only (the checkout is compared "
                         f"with it all the same)")
        judge_only = [source, *([grade_in] if grade_in else []),
                      *judgeonly.judge_only_paths(None, None)]
        if seed_path is not None:
            judge_only.append(seed_path)  # hidden, and the preflight must fail to open it
        if _separating():
            _lock_down(scratch, work)
            # the checkout too: its labNN.py was copied into the work tree, and a child that
            # could read it could read a classmate's the same way (see regrade_batch)
            judgeonly.hide([p for p in [*judge_only, checkout] if p.exists()])
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
    # copy instead: files it lacks were supplied, not changed, so only files that differ count.
    if own.get("checked"):
        tampered = [p for p in own["modified"] if p not in added]
    else:
        tampered = sorted(found["changed"])
    result.integrity = {"checked": True, "modified": [], "restored": restored,
                        "tampered": tampered, "changed": found["changed"],
                        "missing": found["missing"], "added": added, "odd": survey["odd"],
                    "source": label}
    head = [f"regraded {lab_id}.py alone in the pristine lab from {label}"]
    if tampered:
        head.append(f"the checkout had changed grading files, restored before grading: "
                    f"{', '.join(tampered)}")
    odd = result.integrity["odd"]
    if odd:
        head.append(f"entries the judge did not open (links are never followed; only regular "
                    f"files of bounded size are read): {', '.join(odd[:8])}"
                    + (f" ... ({len(odd)} in all)" if len(odd) > 8 else ""))
    if added:
        head.append(f"files beyond the template, not copied, imported or run: "
                    f"{', '.join(added[:8])}" + (f" ... ({len(added)} in all)"
                                                 if len(added) > 8 else ""))
    absent = set(found["missing"]) if not own.get("checked") else set()
    drift = [p for p in restored if p not in tampered and p not in absent and p not in added]
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
    from msda_labs.course.resolve import resolve_lab
    from msda_labs.gpu import runner
    from msda_labs.grading.judge.job import GradingJob

    saved = os.environ.get(sandbox.SEPARATE_ENV)
    if _separating():
        os.environ[sandbox.SEPARATE_ENV] = "1"
    try:
        job = GradingJob.build(resolve_lab(str(work)), work / f"{lab_id}.py", stage="gpu",
                               timeout=timeout, secret=seed)
        return runner.run_gpu_stage(job)
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
    digest: str = ""  # of the row and its result, taken when the judge wrote it

    def as_csv(self) -> list:
        return [self.student, self.lab, self.score, self.max, self.integrity, self.commit,
                self.note]

    def seal(self) -> GradebookRow:
        self.digest = _row_digest(self.as_csv(), self.result)
        return self


def _row_digest(cells: list, result: GradeResult | dict | None) -> str:
    data = result.to_dict() if isinstance(result, GradeResult) else result
    text = json.dumps([[str(c) for c in cells], data], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _student(name: str, prefix: str | None) -> str:
    if prefix and name.startswith(prefix):
        return name[len(prefix):].lstrip("-_") or name
    return name


def journal_path(gradebook: Path) -> Path:
    """The journal of a batch that writes ``gradebook``: ``NAME.rows.jsonl`` beside it."""
    gradebook = Path(gradebook)
    return gradebook.with_name(gradebook.stem + ".rows.jsonl")


def _graded_row(student: str, lab_id: str, commit: str, result: GradeResult) -> GradebookRow:
    info = result.integrity
    known = set(info.get("tampered") or []) | set(info.get("added") or [])
    drift = len([p for p in info.get("restored") or [] if p not in known])
    return GradebookRow(student, lab_id, result.score, result.max_score,
                        integrity.summary(result.integrity), commit,
                        f"{drift} grading file(s) from an older export replaced" if drift > 0
                        else "", result=result).seal()


def _pristine_digest(source: Path) -> str:
    """What identifies the pristine grading files: the digest of their manifest."""
    data = Reader(Path(source)).read(integrity.MANIFEST_PATH)
    return hashlib.sha256(data or b"").hexdigest()


def regrade_batch(folder: Path, *, lab: str | None = None, prefix: str | None = None,
                  pristine: Path | None = None, progress=None, jobs: int = 1,
                  student_limit: float | None = None, journal: Path | None = None,
                  **options) -> list[GradebookRow]:
    """Regrade every checkout (a sub-folder holding a labNN.py) of ``folder``, one row each.

    A checkout that cannot be graded gets a row with an empty score and the reason in ``note``;
    whatever one checkout does, the next ones are graded. Each student is graded in a worker
    process of its own within ``student_limit`` seconds (everything done for them, integrity
    included), ``jobs`` at a time (:mod:`msda_labs.classroom.batch`). With ``journal``, each
    row is appended to it as soon as the student is done, and a student whose journal row has
    the same inputs (lab, commit, ``labNN.py``, pristine files, secret, options) is not graded
    again: an interrupted batch resumes. A seed that would be refused raises RegradeError
    before anything is graded or written. Pristine copies from the kit are exported once per
    lab. Each row is sealed with a digest when the judge writes it (:func:`verify_outputs`
    checks the written files against them).
    """
    from msda_labs.classroom import batch

    folder = Path(folder)
    _, secret = check_secret(options.get("seed"), options.get("seed_file"))
    checkouts = sorted(p for p in folder.iterdir()
                       if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
    if _separating():
        # Every checkout of the class is closed to other users before the first child runs: a
        # module that found a classmate's labNN.py on the disk and ran it would be graded on the
        # classmate's work. (Each child also has its own copy of its own module only; the world
        # it runs in hides /tmp and the like, but not a class kept elsewhere, nor in the gpu mode.)
        judgeonly.hide(checkouts)
    kept = batch.read_journal(Path(journal)) if journal else {}
    if journal:
        Path(journal).parent.mkdir(parents=True, exist_ok=True)
    worker_options = {k: (str(v) if isinstance(v, Path) else v) for k, v in options.items()}
    secret_digest = hashlib.sha256((secret or "").encode()).hexdigest()
    rows: dict[int, GradebookRow] = {}
    pending: dict[int, tuple[str, str, str, str]] = {}

    def finish(index: int, row: GradebookRow) -> None:
        rows[index] = row
        if progress is not None:
            progress(row)

    def done(outcome) -> None:
        student, lab_id, commit, key = pending[outcome.job.index]
        if outcome.result is not None:
            row = _graded_row(student, lab_id, commit, GradeResult.from_dict(outcome.result))
        else:
            row = GradebookRow(student, lab_id, "", "", "not graded", commit,
                               outcome.error).seal()
        if journal:
            batch.journal_line(Path(journal), {
                "checkout": Path(outcome.job.checkout).name, "key": key, "row": row.as_csv(),
                "result": row.result.to_dict() if row.result else None,
                "seconds": round(outcome.seconds, 3)})
        finish(outcome.job.index, row)

    with tempfile.TemporaryDirectory(prefix="msda-batch-") as tmp:
        cache: dict[str, Path] = {}
        judge_copies: dict[str, Path | None] = {}  # a template that records its truth: no secret
        (Path(tmp) / "out").mkdir(mode=0o700)
        todo = []
        for index, checkout in enumerate(checkouts):
            student = _student(checkout.name, prefix)
            commit = commit_of(checkout)
            try:
                lab_id = detect_lab(checkout, lab)
                source = pristine
                if source is None:
                    if lab_id not in cache:
                        cache[lab_id] = _kit_pristine(lab_id, Path(tmp) / lab_id)
                    source = cache[lab_id]
                elif lab_id not in judge_copies:
                    judge_copies[lab_id] = judge_copy_for(source, lab_id, secret,
                                                          Path(tmp) / f"{lab_id}-judge")
            except (KitError, ValueError, OSError) as exc:
                finish(index, GradebookRow(student, lab or "", "", "", "not graded", commit,
                                           str(exc)).seal())
                continue
            module, why = student_module(checkout, lab_id)
            key = batch.digest(checkout.name, lab_id, commit,
                               hashlib.sha256(module).hexdigest() if module is not None else why,
                               _pristine_digest(source), secret_digest,
                               sorted(worker_options.items()))
            entry = kept.get(checkout.name)
            if entry and entry.get("key") == key and (entry.get("row") or [""] * 3)[2] != "":
                result = GradeResult.from_dict(entry["result"]) if entry.get("result") else None
                finish(index, GradebookRow(*entry["row"], result=result).seal())
                continue
            pending[index] = (student, lab_id, commit, key)
            copy = judge_copies.get(lab_id) if pristine is not None else None
            todo.append(batch.Job(index, str(checkout), lab_id, str(Path(source).resolve()),
                                  dict(worker_options, **({"judge_copy": str(copy)} if copy
                                                          else {})),
                                  out=f"{tmp}/out/{index}.json",
                                  log=f"{tmp}/out/{index}.log"))
        rooms = f"msda-regrade-{secrets.token_hex(8)}"  # one folder per slot, reused in turn

        def room(slot: int) -> Path:
            return Path(tempfile.gettempdir()) / f"{rooms}-{slot}"

        try:
            with _stems_for_the_batch():
                batch.run_jobs(todo, parallel=jobs, done=done,
                               limit=student_limit or batch.DEFAULT_STUDENT_LIMIT, room=room)
        finally:  # a worker killed at its limit leaves its room
            for slot in range(max(1, jobs)):
                shutil.rmtree(room(slot), ignore_errors=True)
    return [rows[i] for i in sorted(rows)]


def write_gradebook(rows: list[GradebookRow], path: Path) -> Path:
    """Write the gradebook whole or not at all (a temporary file renamed over it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(GRADEBOOK_COLUMNS)
        for row in rows:
            writer.writerow(row.as_csv())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def rows_json(rows: list[GradebookRow]) -> list[dict]:
    """The regrade's ``--json`` list: one entry per row, with its result."""
    return [{"student": r.student, "lab": r.lab, "commit": r.commit, "note": r.note,
             "result": r.result.to_dict() if r.result else None} for r in rows]


def verify_outputs(rows: list[GradebookRow], gradebook: Path | None = None,
                   json_path: Path | None = None) -> list[str]:
    """Check the written gradebook (and ``--json`` list) against each row's digest, taken when
    the judge wrote the row: returns the rows that differ (empty when all hold)."""
    problems = []
    for row in rows:
        if row.digest != _row_digest(row.as_csv(), row.result):
            problems.append(f"{row.student}: the row changed in memory after it was written")
    if gradebook is not None:
        with open(gradebook, newline="") as fh:
            written = list(csv.reader(fh))
        if written[:1] != [list(GRADEBOOK_COLUMNS)] or len(written) != len(rows) + 1:
            problems.append(f"{gradebook}: not the {len(rows)} rows the judge wrote")
        else:
            for row, cells in zip(rows, written[1:]):
                if _row_digest(cells, row.result) != row.digest:
                    problems.append(f"{gradebook}: the row of {row.student} was altered")
    if json_path is not None:
        entries = json.loads(Path(json_path).read_text())
        if len(entries) != len(rows):
            problems.append(f"{json_path}: not the {len(rows)} entries the judge wrote")
        else:
            for row, entry in zip(rows, entries):
                if _row_digest(row.as_csv(), entry.get("result")) != row.digest:
                    problems.append(f"{json_path}: the entry of {row.student} was altered")
    return problems
