"""Which lab a command means: a lab id (``lab05`` or ``5``), a folder name, or a lab folder's path.

    lab = resolve_lab("lab05")          # through classroom.yml, found from the current folder
    lab = resolve_lab(".")              # the root of an exported template (labNN.py + tests/)

A lab folder given by path need not be listed in a manifest (a bare folder grades with the
fallback time limits); a lab id must be, and must be built.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from msda_labs.errors import KitError

__all__ = ["ResolvedLab", "resolve_lab"]


@dataclass
class ResolvedLab:
    """What grading needs to know of one lab: where it is and what the manifest says of it."""

    id: str
    folder: Path
    title: str
    timeouts: dict[str, int]  # classroom.yml stage name -> seconds one test's code may run
    stages: list[str]  # classroom.yml stage names, e.g. ["interpret", "gpu"]
    gpu: str | None  # the GPU type of its gpu stage, when it has one


def _lab_from_manifest(key: str, start: Path | None = None,
                       by_path: bool = False) -> ResolvedLab | None:
    from msda_labs.course.manifest import ManifestError, find_manifest, load_manifest

    try:
        manifest = load_manifest(find_manifest(start))
    except ManifestError as exc:
        if "no classroom.yml" in str(exc):
            return None
        raise KitError(str(exc)) from None
    try:
        lab = manifest.lab(key)
    except ManifestError as exc:
        if by_path:  # a lab folder given by path need not be in this manifest
            return None
        raise KitError(str(exc)) from None
    if not lab.built and not by_path:
        raise KitError(f"{lab.id} ({lab.title}) is declared in classroom.yml but not built "
                       f"yet (status: {lab.status}); there is nothing to grade")
    folder = manifest.root / lab.folder
    if not folder.is_dir():
        folder = manifest.root  # an exported template: the lab sits at the root
    gpu = lab.stage("gpu").gpu if lab.has_gpu else None
    return ResolvedLab(lab.id, folder, lab.title, {s.name: s.timeout_s for s in lab.stages},
                       [s.name for s in lab.stages], gpu)


def resolve_lab(key: str) -> ResolvedLab:
    """The lab that ``key`` names; raises :class:`KitError` saying what to pass instead."""
    path = Path(key)
    if path.is_dir() and (path / "tests").is_dir():
        modules = sorted(p.stem for p in path.glob("lab[0-9][0-9].py"))
        if not modules:
            raise KitError(f"{path} has a tests/ folder but no labNN.py student module")
        lab_id = modules[0]
        info = _lab_from_manifest(lab_id, path, by_path=True)
        if info is not None:
            info.folder = path.resolve()
            return info
        return ResolvedLab(lab_id, path.resolve(), "", {}, [], None)
    if path.is_dir() or "/" in key:
        raise KitError(f"{key} is not a lab folder (a lab folder holds labNN.py and tests/)")
    info = _lab_from_manifest(key)
    if info is None:
        raise KitError(f"no lab {key!r}: there is no classroom.yml here; pass the path of a "
                       f"lab folder instead (e.g. `grade .` at the root of a lab repository)")
    return info
