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

Everything this module reads of a folder, it reads through
:class:`msda_labs.grading.isolation.studentfiles.Reader`: no link followed anywhere, regular files
only, opened without blocking, sizes, depth and entry counts capped. What it refuses (a FIFO, a
device, a link, a file too large, a tree too deep) is reported (``odd``: ``path (what it is)``), and
a grading file that is not a regular file counts as changed.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from msda_labs.grading.isolation.studentfiles import Reader

__all__ = ["MANIFEST_PATH", "TEMPLATE_PATH", "GRADING_DIRS", "GRADING_FILES", "grading_files",
           "write_manifest", "read_manifest", "diff", "compare_trees", "check_folder", "walk",
           "extra_files", "summary", "template_of", "odd_grading_digest"]

MANIFEST_PATH = ".msda/integrity.sha256"
TEMPLATE_PATH = ".msda/template.txt"
# In the judge's copy of a lab only: the template's own manifest (see _template_digests).
TEMPLATE_DIGESTS_PATH = ".msda/template.sha256"
# Folders a checkout may hold that are nobody's work: git data, environments, caches, and what
# the kit itself writes beside a lab (reports, GPU plots, the progress cache, the grading
# workflow's cached packages).
NOT_SCANNED = frozenset({".git", ".venv", "venv", ".nox", "__pycache__", ".pytest_cache",
                         ".ruff_cache", ".mypy_cache", "node_modules", "gpu-artifacts",
                         ".progress", ".msda-env"})
_KIT_OUTPUTS = frozenset({"grade.json", "grade.md"})
_WALK_LIMIT = 20000  # entries listed at most: a checkout of a million files is not walked whole
_MANIFEST_LIMIT = 4 << 20  # bytes of .msda/integrity.sha256 or .msda/template.txt at most
_ODD_PREFIX = "not a regular file: "  # the digest of a grading file that cannot be hashed
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
         limit: int = _WALK_LIMIT, reader: Reader | None = None) -> tuple[list[str], bool]:
    """Every entry under ``root`` that is not a folder (files, links, FIFOs, sockets), as
    relative POSIX paths, sorted; folders named in ``skip`` are not entered. Never follows a
    link, enters no folder deeper than the reader's depth limit, and stops after ``limit``
    entries: returns (paths, whether it stopped early)."""
    reader = reader or Reader(Path(root))
    saved, reader.entry_limit = reader.entry_limit, min(limit, reader.entry_limit)
    try:
        found, stopped = reader.walk("", skip)
    finally:
        reader.entry_limit = saved
    return [name for name, _ in found], stopped


def sha256_file(path: Path) -> str:
    """The sha256 of the regular file ``path`` (bounded: see :class:`Reader`); a path that is
    not one gets :func:`odd_grading_digest`."""
    path = Path(path)
    reader = Reader(path.parent)
    data = reader.read(path.name)
    if data is None:
        return odd_grading_digest(reader.odd.get(path.name, "missing"))
    return hashlib.sha256(data).hexdigest()


def odd_grading_digest(kind: str) -> str:
    """What stands for the digest of a grading file that is not a regular file: never equal to
    a sha256, so the file counts as changed."""
    return _ODD_PREFIX + kind


def _shadowing_entries(root: Path, reader: Reader | None = None) -> list[str]:
    """Root modules or packages that would shadow a module importable from elsewhere.

    ``python -m msda_labs grade .`` puts the current folder first on ``sys.path``, so a
    ``torch.py`` or ``pytest/`` at the root would replace what the grader imports. The root is
    listed without following links; a link named like a module counts as one.
    """
    root = Path(root)
    reader = reader or Reader(root)
    others = [Path(p) for p in sys.path if p and Path(p).resolve() != root.resolve()]
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    found = []
    for entry_name, kind in reader.listing():
        if kind == "folder":
            if reader.kind(f"{entry_name}/__init__.py") not in ("regular file", "symbolic link"):
                continue
            name = entry_name
        elif entry_name.endswith(".py") and kind in ("regular file", "symbolic link"):
            name = entry_name[:-3]
        else:
            continue
        if entry_name in ROOT_HOOKS or name == "noxfile" or name.startswith("lab"):
            continue  # hooks are listed anyway; the student module and noxfile are expected
        if name in stdlib or any((p / f"{name}.py").is_file() or (p / name).is_dir()
                                 for p in others if p.is_dir()):
            found.append(entry_name + ("/" if kind == "folder" else ""))
    return found


def grading_files(root: Path, reader: Reader | None = None) -> dict[str, str]:
    """{relative path: sha256} of every grading file present under ``root``; one that is not a
    regular file (or is too large) gets :func:`odd_grading_digest`, so it counts as changed."""
    root = Path(root)
    reader = reader or Reader(root)
    files: dict[str, str] = {}

    def add(rel: str) -> None:
        data = reader.read(rel)
        if data is not None:
            files[rel] = hashlib.sha256(data).hexdigest()
        elif rel in reader.odd:
            files[rel] = odd_grading_digest(reader.odd[rel])

    for name in (*GRADING_FILES, *ROOT_HOOKS):
        add(name)
    for folder in GRADING_DIRS:
        kind = reader.kind(folder)
        if kind is None:
            continue
        if kind != "folder":
            reader.odd.setdefault(folder, kind)
            files[folder] = odd_grading_digest(kind)
            continue
        for rel, _ in reader.walk(folder)[0]:
            if not _is_litter(Path(rel)):
                add(rel)
    return files


def write_manifest(root: Path) -> Path:
    """Write ``.msda/integrity.sha256`` for the grading files under ``root``, and the list of
    every file of the template (``.msda/template.txt``); returns the manifest's path."""
    root = Path(root)
    reader = Reader(root)
    digests = grading_files(root, reader)
    if reader.odd:
        raise ValueError(f"{root}: not regular files, or too large: {reader.odd_list()}")
    lines = [f"{digest}  {rel}\n" for rel, digest in sorted(digests.items())]
    target = root / MANIFEST_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(lines))
    names = set(walk(root, skip=NOT_SCANNED)[0]) | {MANIFEST_PATH, TEMPLATE_PATH}
    (root / TEMPLATE_PATH).write_text("".join(f"{name}\n" for name in sorted(names)))
    return target


def extra_files(checkout: Path, template: set[str] | list[str],
                student_module: str = "", reader: Reader | None = None) -> list[str]:
    """What ``checkout`` holds beyond ``template`` (a set of relative paths) and the student's
    module: files, links and other entries, outside git data, environments, caches and the
    kit's own reports. A checkout too large to walk ends its list with a count."""
    found, stopped = walk(checkout, skip=NOT_SCANNED, reader=reader)
    known = set(template) | {student_module} | _KIT_OUTPUTS
    # A name with a line break or another control character is shown escaped: it is listed
    # in one gradebook cell and one line of a report.
    extra = [name if name.isprintable() else name.encode("unicode_escape").decode()
             for name in found if name not in known and not _is_litter(Path(name))]
    if stopped:
        extra.append(f"(more than {_WALK_LIMIT} entries: not all listed)")
    return extra


def template_of(root: Path, reader: Reader | None = None) -> set[str] | None:
    """The template's files as an export listed them (``.msda/template.txt``), or None (also
    when it is not a regular file, or too large: recorded in the reader's ``odd``)."""
    reader = reader or Reader(Path(root))
    data = reader.read(TEMPLATE_PATH, _MANIFEST_LIMIT)
    if data is None:
        return None
    return {line.strip() for line in data.decode("utf-8", "replace").splitlines()
            if line.strip()}


def summary(info: dict, limit: int = 6) -> str:
    """One gradebook cell for a regrade's integrity: ``modified: ...`` (grading files the
    checkout changed, restored before grading), ``added: ...`` (files beyond the template,
    never run), ``odd: ...`` (entries the judge would not open: links, FIFOs, devices, files
    too large, trees too deep), or ``clean``."""
    parts = []
    for key, word in (("tampered", "modified"), ("added", "added"), ("odd", "odd")):
        names = list(info.get(key) or [])
        if names:
            shown = "; ".join(names[:limit]) + (f"; ... ({len(names)} in all)"
                                               if len(names) > limit else "")
            parts.append(f"{word}: {shown}")
    return " | ".join(parts) or "clean"


def read_manifest(path: Path, reader: Reader | None = None) -> dict[str, str]:
    """The entries of an integrity manifest; OSError when it cannot be read as a regular file
    (bounded: see :class:`Reader`)."""
    path = Path(path)
    if reader is None:
        reader, rel = Reader(path.parent), path.name
    else:
        rel = path.relative_to(reader.root).as_posix()
    data = reader.read(rel, _MANIFEST_LIMIT)
    if data is None:
        raise OSError(f"{rel}: {reader.odd.get(rel, 'missing')}")
    entries = {}
    for lineno, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
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


def _report(parts: dict[str, list[str]], root: Path, reader: Reader | None = None,
            **extra) -> dict:
    # A workflow the student (or Classroom 50's accept shim, autograde.yaml) adds changes no
    # grade: grading runs the published workflow, whose changes are reported.
    added = [p for p in parts["added"] if not p.startswith(".github/workflows/")]
    added = sorted(set(added) | set(_shadowing_entries(root, reader)))
    parts = {**parts, "added": added}
    modified = sorted(set(parts["changed"]) | set(parts["missing"]) | set(added))
    return {"checked": True, "modified": modified, **parts, **extra}


def _template_digests(pristine: Path) -> dict[str, str]:
    """The grading files of the template a pristine copy was exported as: the judge's copy of a
    lab (``export_lab(judge=True)``) also holds truth that the template carries only recorded,
    and keeps the template's manifest in :data:`TEMPLATE_DIGESTS_PATH`; any other copy is the
    template itself."""
    reader = Reader(pristine)
    if reader.kind(TEMPLATE_DIGESTS_PATH) == "regular file":
        try:
            return read_manifest(pristine / TEMPLATE_DIGESTS_PATH, reader)
        except (OSError, ValueError):
            pass
    return grading_files(pristine)


def compare_trees(checkout: Path, pristine: Path, reader: Reader | None = None) -> dict:
    """What a checkout's grading files have that the pristine copy does not (same keys as
    :func:`check_folder`, and ``odd``: what the checkout's reader refused)."""
    reader = reader or Reader(Path(checkout))
    report = _report(diff(_template_digests(Path(pristine)), grading_files(checkout, reader)),
                     Path(checkout), reader, manifest="pristine copy")
    report["odd"] = reader.odd_list()
    return report


def check_folder(lab_folder: Path, reader: Reader | None = None) -> dict:
    """Check a lab folder's grading files against its integrity manifest.

    Returns ``{"checked": bool, "modified": [relative paths], "changed": [...], "missing": [...],
    "added": [...], "manifest": path}``; ``checked`` is False (with a ``reason``) in the kit, where
    lab folders carry no manifest. An exported repository whose manifest is gone reports the
    manifest itself as missing.
    """
    root = Path(lab_folder)
    reader = reader or Reader(root)
    manifest = root / MANIFEST_PATH
    if reader.kind(MANIFEST_PATH) is None:
        if (reader.kind("shared") == "folder"
                and reader.kind("classroom.yml") == "regular file"):
            return {"checked": True, "modified": [MANIFEST_PATH], "changed": [],
                    "missing": [MANIFEST_PATH], "added": [], "manifest": MANIFEST_PATH}
        return {"checked": False, "modified": [],
                "reason": "no integrity manifest (a lab folder of the kit, not an export)"}
    try:
        expected = read_manifest(manifest, reader)
    except (OSError, ValueError) as exc:
        return {"checked": True, "modified": [MANIFEST_PATH], "changed": [MANIFEST_PATH],
                "missing": [], "added": [], "manifest": MANIFEST_PATH, "reason": str(exc)}
    report = _report(diff(expected, grading_files(root, reader)), root, reader,
                     manifest=MANIFEST_PATH)
    template = template_of(root, reader)
    if template is not None:  # what the repository holds beyond the template: listed, never run
        module = next((name for name, _ in reader.listing()
                       if _is_lab_module(name)), "")
        report["extra"] = extra_files(root, template, module, reader)
    report["odd"] = reader.odd_list()
    return report


def _is_lab_module(name: str) -> bool:
    return len(name) == 8 and name.startswith("lab") and name[3:5].isdigit() and \
        name.endswith(".py")
