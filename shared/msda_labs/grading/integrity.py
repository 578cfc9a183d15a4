"""Integrity of an exported lab repository: which files grade, their published hashes, what changed.

An exported template carries ``.msda/integrity.sha256``, one ``<sha256>  <path>`` line per grading
file (the format of ``sha256sum``, so ``sha256sum -c .msda/integrity.sha256`` works without the
kit). Grading files are everything that decides a score except the student's own module:

* ``tests/`` and ``shared/`` (the grader, the ground truth, the chips of earlier labs),
* ``noxfile.py``, ``requirements.txt``, ``classroom.yml`` and ``.github/workflows/*``.

The grading flow (:mod:`msda_labs.flow`) calls :func:`check_folder`, and ``grade``
shows what differs (changed, missing, or added: a new file in a grading folder, a
``conftest.py`` at the root, or a root module that would shadow a package the grader imports).
This is detection, not prevention: a student can edit the manifest too. The instructor's
``regrade`` compares with pristine files from the kit and grades the pristine copy with the
student's ``labNN.py`` alone.

The export also lists every file of the template (``.msda/template.txt``): whatever else a
checkout holds (a module beside ``labNN.py``, a metadata folder, a ``conftest.py``, a copy in
``my/``) is reported as added (:func:`extra_files`). The grader never imports or runs it.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

__all__ = ["MANIFEST_PATH", "TEMPLATE_PATH", "GRADING_DIRS", "GRADING_FILES", "grading_files",
           "write_manifest", "read_manifest", "diff", "compare_trees", "check_folder", "walk",
           "extra_files", "summary"]

MANIFEST_PATH = ".msda/integrity.sha256"
TEMPLATE_PATH = ".msda/template.txt"
# Folders a checkout may hold that are nobody's work: git data, environments, caches, and what
# the kit itself writes beside a lab (reports, GPU plots, the progress cache, the grading
# workflow's cached packages).
NOT_SCANNED = frozenset({".git", ".venv", "venv", ".nox", "__pycache__", ".pytest_cache",
                         ".ruff_cache", ".mypy_cache", "node_modules", "gpu-artifacts",
                         ".progress", ".msda-env"})
_KIT_OUTPUTS = frozenset({"grade.json", "grade.md"})
_WALK_LIMIT = 20000  # entries listed at most: a checkout of a million files is not walked whole
GRADING_DIRS = ("tests", "shared", ".github/workflows")
GRADING_FILES = ("noxfile.py", "requirements.txt", "classroom.yml")
# Root files that change how pytest or Python starts, whatever their content.
ROOT_HOOKS = ("conftest.py", "sitecustomize.py", "usercustomize.py")
# Build and cache litter that tools write into grading folders; never part of a grade.
_LITTER_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", "build", "dist"}
_LITTER_SUFFIXES = (".pyc", ".pyo")


def _is_litter(rel: Path) -> bool:
    return (any(part in _LITTER_DIRS or part.endswith(".egg-info") for part in rel.parts)
            or rel.name.endswith(_LITTER_SUFFIXES))


def walk(root: Path, skip: frozenset[str] | set[str] = frozenset(),
         limit: int = _WALK_LIMIT) -> tuple[list[str], bool]:
    """Every entry under ``root`` that is not a folder (files, links, FIFOs, sockets), as
    relative POSIX paths, sorted; folders named in ``skip`` are not entered. Iterative (a tree
    thousands of levels deep is fine), never follows a link, and stops after ``limit`` entries:
    returns (paths, whether it stopped early)."""
    found: list[str] = []
    stack = [("", os.fspath(root))]
    while stack:
        rel, folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                if entry.name not in skip:
                    stack.append((name, entry.path))
                continue
            found.append(name)
            if len(found) >= limit:
                return sorted(found), True
    return sorted(found), False


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def _shadowing_entries(root: Path) -> list[str]:
    """Root modules or packages that would shadow a module importable from elsewhere.

    ``python -m msda_labs grade .`` puts the current folder first on ``sys.path``, so a
    ``torch.py`` or ``pytest/`` at the root would replace what the grader imports.
    """
    others = [Path(p) for p in sys.path if p and Path(p).resolve() != root.resolve()]
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    found = []
    for entry in sorted(root.iterdir()):
        if entry.is_file() and entry.suffix == ".py":
            name = entry.stem
        elif entry.is_dir() and (entry / "__init__.py").is_file():
            name = entry.name
        else:
            continue
        if entry.name in ROOT_HOOKS or name == "noxfile" or name.startswith("lab"):
            continue  # hooks are listed anyway; the student module and noxfile are expected
        if name in stdlib or any((p / f"{name}.py").is_file() or (p / name).is_dir()
                                 for p in others if p.is_dir()):
            found.append(entry.name + ("/" if entry.is_dir() else ""))
    return found


def grading_files(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every grading file present under ``root``."""
    root = Path(root)
    files: dict[str, str] = {}
    for name in (*GRADING_FILES, *ROOT_HOOKS):
        if (root / name).is_file():
            files[name] = sha256_file(root / name)
    for folder in GRADING_DIRS:
        base = root / folder
        if not base.is_dir() or base.is_symlink():
            continue
        for name in walk(base)[0]:
            path = base / name
            rel = path.relative_to(root)
            if path.is_file() and not _is_litter(rel):
                files[rel.as_posix()] = sha256_file(path)
    return files


def write_manifest(root: Path) -> Path:
    """Write ``.msda/integrity.sha256`` for the grading files under ``root``, and the list of
    every file of the template (``.msda/template.txt``); returns the manifest's path."""
    root = Path(root)
    lines = [f"{digest}  {rel}\n" for rel, digest in sorted(grading_files(root).items())]
    target = root / MANIFEST_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(lines))
    names = set(walk(root, skip=NOT_SCANNED)[0]) | {MANIFEST_PATH, TEMPLATE_PATH}
    (root / TEMPLATE_PATH).write_text("".join(f"{name}\n" for name in sorted(names)))
    return target


def extra_files(checkout: Path, template: set[str] | list[str],
                student_module: str = "") -> list[str]:
    """What ``checkout`` holds beyond ``template`` (a set of relative paths) and the student's
    module: files, links and other entries, outside git data, environments, caches and the
    kit's own reports. A checkout too large to walk ends its list with a count."""
    found, stopped = walk(checkout, skip=NOT_SCANNED)
    known = set(template) | {student_module} | _KIT_OUTPUTS
    # A name with a line break or another control character is shown escaped: it is listed
    # in one gradebook cell and one line of a report.
    extra = [name if name.isprintable() else name.encode("unicode_escape").decode()
             for name in found if name not in known and not _is_litter(Path(name))]
    if stopped:
        extra.append(f"(more than {_WALK_LIMIT} entries: not all listed)")
    return extra


def template_of(root: Path) -> set[str] | None:
    """The template's files as an export listed them (``.msda/template.txt``), or None."""
    try:
        return {line.strip() for line in (Path(root) / TEMPLATE_PATH).read_text().splitlines()
                if line.strip()}
    except OSError:
        return None


def summary(info: dict, limit: int = 6) -> str:
    """One gradebook cell for a regrade's integrity: ``modified: ...`` (grading files the
    checkout changed, restored before grading), ``added: ...`` (files beyond the template,
    never run), both, or ``clean``."""
    parts = []
    for key, word in (("tampered", "modified"), ("added", "added")):
        names = list(info.get(key) or [])
        if names:
            shown = "; ".join(names[:limit]) + (f"; ... ({len(names)} in all)"
                                               if len(names) > limit else "")
            parts.append(f"{word}: {shown}")
    return " | ".join(parts) or "clean"


def read_manifest(path: Path) -> dict[str, str]:
    entries = {}
    for lineno, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64:
            raise ValueError(f"{path}:{lineno}: not a '<sha256>  <path>' line")
        entries[rel.strip()] = digest
    return entries


def diff(expected: dict[str, str], actual: dict[str, str]) -> dict[str, list[str]]:
    """Changed, missing and added paths between two {path: digest} maps."""
    return {
        "changed": sorted(p for p in expected if p in actual and actual[p] != expected[p]),
        "missing": sorted(p for p in expected if p not in actual),
        "added": sorted(p for p in actual if p not in expected),
    }


def _report(parts: dict[str, list[str]], root: Path, **extra) -> dict:
    # A workflow the student (or Classroom 50's accept shim, autograde.yaml) adds changes no
    # grade: grading runs the published workflow, whose changes are reported.
    added = [p for p in parts["added"] if not p.startswith(".github/workflows/")]
    added = sorted(set(added) | set(_shadowing_entries(root)))
    parts = {**parts, "added": added}
    modified = sorted(set(parts["changed"]) | set(parts["missing"]) | set(added))
    return {"checked": True, "modified": modified, **parts, **extra}


def compare_trees(checkout: Path, pristine: Path) -> dict:
    """What a checkout's grading files have that the pristine copy does not (same keys as
    :func:`check_folder`)."""
    return _report(diff(grading_files(pristine), grading_files(checkout)), Path(checkout),
                   manifest="pristine copy")


def check_folder(lab_folder: Path) -> dict:
    """Check a lab folder's grading files against its integrity manifest.

    Returns ``{"checked": bool, "modified": [relative paths], "changed": [...], "missing": [...],
    "added": [...], "manifest": path}``; ``checked`` is False (with a ``reason``) in the kit, where
    lab folders carry no manifest. An exported repository whose manifest is gone reports the
    manifest itself as missing.
    """
    root = Path(lab_folder)
    manifest = root / MANIFEST_PATH
    if not manifest.is_file():
        if (root / "shared").is_dir() and (root / "classroom.yml").is_file():
            return {"checked": True, "modified": [MANIFEST_PATH], "changed": [],
                    "missing": [MANIFEST_PATH], "added": [], "manifest": MANIFEST_PATH}
        return {"checked": False, "modified": [],
                "reason": "no integrity manifest (a lab folder of the kit, not an export)"}
    try:
        expected = read_manifest(manifest)
    except (OSError, ValueError) as exc:
        return {"checked": True, "modified": [MANIFEST_PATH], "changed": [MANIFEST_PATH],
                "missing": [], "added": [], "manifest": MANIFEST_PATH, "reason": str(exc)}
    report = _report(diff(expected, grading_files(root)), root, manifest=MANIFEST_PATH)
    template = template_of(root)
    if template is not None:  # what the repository holds beyond the template: listed, never run
        module = next((p.name for p in sorted(root.glob("lab[0-9][0-9].py"))), "")
        report["extra"] = extra_files(root, template, module)
    return report
