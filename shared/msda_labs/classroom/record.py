"""Regrade at the deadline: each student's commit of record, graded with pristine files.

    python -m msda_labs regrade CLONES/ --at-deadline [--lab LAB] [--github] --json OUT
    python -m msda_labs class regrade --org ORG --prefix lab-05- --lab lab05 --json OUT

A folder of clones: each clone's commit of record (:mod:`msda_labs.classroom.deadline`, from
GitHub's server times with ``--github``, else from the commit dates with a warning) is read
from the clone's object store into a scratch folder and regraded there
(:func:`msda_labs.classroom.regrade.regrade_checkout`); the clone is never written to. A whole
class: the organisation's repositories of the assignment are listed through GitHub's API, each
resolved to its commit of record, and its ``labNN.py`` at that commit fetched through the API
(no clone), then regraded the same way.

Each gradebook row's commit is the commit of record and its note says when GitHub received it
and how late it was; the ``--json`` entries carry the full record (``record``), which the
course gradebook (:mod:`msda_labs.classroom.grades`) turns into late-day charges.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from msda_labs.classroom import deadline
from msda_labs.classroom.regrade import GradebookRow, _kit_pristine, detect_lab, regrade_checkout
from msda_labs.errors import KitError
from msda_labs.grading.judge import integrity

__all__ = ["regrade_folder_at_deadline", "regrade_class", "rows_json"]


def _lab(lab_id: str):
    from msda_labs.course.manifest import find_manifest, load_manifest

    return load_manifest(find_manifest()).lab(lab_id)


def _deadline(manifest, info, student: str):
    """(due, end of the late window, extension or None) of ``student`` for the lab ``info``:
    the extension classroom.yml gives them, else the lab's own dates."""
    extension = manifest.extension_for(student, info.id) if manifest is not None else None
    if extension is not None:
        return extension.due, extension.cutoff, extension
    return info.due, info.cutoff, None


def _manifest_or_none():
    from msda_labs.course.manifest import ManifestError, find_manifest, load_manifest

    try:
        return load_manifest(find_manifest())
    except ManifestError:
        return None  # a folder of clones outside the kit: no extensions to apply


def _with_extension(record: dict | None, extension) -> dict | None:
    if record is not None and extension is not None:
        record["extension"] = extension.describe()
    return record


def _graded_row(student: str, lab_id: str, record: deadline.CommitOfRecord, folder: Path,
                pristine: Path, options: dict, extension=None) -> GradebookRow:
    result = regrade_checkout(folder, pristine=pristine, lab_id=lab_id, **options)
    note = record.note() + (f"; {extension.describe()}" if extension is not None else "")
    result.notes.insert(0, note)
    return GradebookRow(student, lab_id, result.score, result.max_score,
                        integrity.summary(result.integrity), record.sha, note,
                        result=result).seal()


def _failed_row(student: str, lab_id: str, commit: str, why: str) -> GradebookRow:
    return GradebookRow(student, lab_id, "", "", "not graded", commit, why).seal()


def regrade_folder_at_deadline(folder: Path, *, lab: str | None = None, prefix: str | None = None,
                               pristine: Path | None = None, client=None, progress=None,
                               lab_info=None, **options) -> list[tuple[GradebookRow, dict]]:
    """Regrade every clone of ``folder`` (or ``folder`` itself, one clone) at its commit of
    record for the lab's due date (``classroom.yml``). Returns ``(row, record dict)`` pairs; a
    clone that cannot be resolved or graded gets a row with an empty score and the reason."""
    from msda_labs.classroom.regrade import _student, is_checkout

    folder = Path(folder)
    clones = [folder] if (folder / ".git").exists() or is_checkout(folder) else sorted(
        p for p in folder.iterdir()
        if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
    out = []
    manifest = _manifest_or_none()
    with tempfile.TemporaryDirectory(prefix="msda-deadline-") as tmp:
        cache: dict[str, Path] = {}
        for clone in clones:
            student = _student(clone.name, prefix)
            record, lab_id, extension = None, lab or "", None
            try:
                lab_id = detect_lab(clone, lab)
                info = lab_info or _lab(lab_id)
                if info.due is None:
                    raise KitError(f"{lab_id} has no due date in classroom.yml (labs[].due): "
                                   f"there is no deadline to regrade at")
                due, cutoff, extension = _deadline(manifest, info, student)
                record = deadline.local_record(clone, due, cutoff, client=client)
                if not record.found:
                    row = _failed_row(student, lab_id, "", record.note())
                else:
                    tree = deadline.materialise(clone, record.sha, Path(tmp) / "trees" /
                                                clone.name)
                    source = pristine
                    if source is None:
                        if lab_id not in cache:
                            cache[lab_id] = _kit_pristine(lab_id, Path(tmp) / "pristine" / lab_id)
                        source = cache[lab_id]
                    row = _graded_row(student, lab_id, record, tree, source, options, extension)
            except (KitError, ValueError, OSError) as exc:
                row = _failed_row(student, lab_id, record.sha if record else "", str(exc))
            except Exception as exc:  # noqa: BLE001 - one clone never stops the class
                row = _failed_row(student, lab_id, record.sha if record else "",
                                  f"the regrade failed on this clone ({type(exc).__name__}: "
                                  f"{str(exc)[:300]})")
            out.append((row, _with_extension(record.to_dict() if record else None, extension)))
            if progress is not None:
                progress(row)
    return out


def regrade_class(client, org: str, prefix: str, lab_id: str, *, pristine: Path | None = None,
                  progress=None, lab_info=None, **options) -> list[tuple[GradebookRow, dict]]:
    """List the assignment's repositories, resolve each to its commit of record from GitHub's
    server times, fetch its ``labNN.py`` at that commit (no clone) and regrade it."""
    from msda_labs.classroom.github import file_at, list_class_repos

    info = lab_info or _lab(lab_id)
    if info.due is None:
        raise KitError(f"{lab_id} has no due date in classroom.yml (labs[].due)")
    out = []
    manifest = _manifest_or_none()
    with tempfile.TemporaryDirectory(prefix="msda-class-") as tmp:
        source = pristine or _kit_pristine(lab_id, Path(tmp) / "pristine")
        for repo in list_class_repos(client, org, prefix):
            record = None
            due, cutoff, extension = _deadline(manifest, info, repo.student)
            try:
                record = deadline.server_record(client, repo.owner, repo.name,
                                                repo.default_branch, due, cutoff)
                if not record.found:
                    row = _failed_row(repo.student, lab_id, "", record.note())
                else:
                    data = file_at(client, repo.owner, repo.name, f"{lab_id}.py", record.sha)
                    folder = Path(tmp) / "submissions" / repo.name
                    folder.mkdir(parents=True)
                    if data is not None:
                        (folder / f"{lab_id}.py").write_bytes(data)
                    row = _graded_row(repo.student, lab_id, record, folder, source, options,
                                      extension)
            except (KitError, ValueError, OSError) as exc:
                row = _failed_row(repo.student, lab_id, record.sha if record else "", str(exc))
            out.append((row, _with_extension(record.to_dict() if record else None,
                                             extension)))
            if progress is not None:
                progress(row)
    return out


def rows_json(pairs: list[tuple[GradebookRow, dict]]) -> list[dict]:
    """The ``--json`` list of :func:`msda_labs.classroom.regrade.rows_json`, with each entry's
    commit of record (``record``)."""
    return [{"student": r.student, "lab": r.lab, "commit": r.commit, "note": r.note,
             "result": r.result.to_dict() if r.result else None, "record": record}
            for r, record in pairs]
