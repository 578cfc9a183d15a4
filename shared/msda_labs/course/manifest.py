"""The course manifest ``classroom.yml``: loaded, validated against its JSON schema, typed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from msda_labs.errors import KitError

__all__ = ["ManifestError", "Stage", "Lab", "Manifest", "load_manifest", "find_manifest",
           "schema"]

DEFAULT_TIMEOUT = {"cpu": 60, "interpret": 120, "aot": 180, "gpu": 300}
DEFAULT_GPU = "H100"


class ManifestError(KitError, ValueError):
    """classroom.yml is missing, unreadable or does not match its schema."""


@dataclass(frozen=True)
class Stage:
    name: str
    timeout_s: int
    gpu: str | None = None
    job_timeout_s: int = 1800


@dataclass(frozen=True)
class Lab:
    id: str
    folder: str
    title: str
    status: str
    stages: tuple[Stage, ...]

    @property
    def number(self) -> int:
        return int(self.id[3:])

    @property
    def module(self) -> str:
        return f"{self.id}.py"

    @property
    def built(self) -> bool:
        return self.status == "ready"

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)

    @property
    def cpu_stages(self) -> tuple[Stage, ...]:
        return tuple(s for s in self.stages if s.name != "gpu")

    @property
    def has_gpu(self) -> bool:
        return self.stage("gpu") is not None


@dataclass
class Manifest:
    path: Path
    name: str
    title: str
    python: str
    pins: dict[str, str]
    labs: list[Lab] = field(default_factory=list)
    raw: dict = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.path.parent

    def lab(self, key: str) -> Lab:
        """Find a lab by id (``lab05``, ``5``, ``05``) or folder name."""
        wanted = key.strip().rstrip("/")
        if wanted.isdigit():
            wanted = f"lab{int(wanted):02d}"
        for lab in self.labs:
            if wanted in (lab.id, lab.folder):
                return lab
        known = ", ".join(lab.id for lab in self.labs)
        raise ManifestError(f"no lab {key!r} in {self.path}; known labs: {known}")


def schema() -> dict:
    text = resources.files("msda_labs.course").joinpath("classroom.schema.json").read_text()
    return json.loads(text)


def _where(error) -> str:
    parts = []
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts) or "(top level)"


def _shape_problem(data) -> str | None:
    """The keys the loader reads, checked without jsonschema (which the full check needs)."""
    if not isinstance(data, dict) or not isinstance(data.get("course"), dict):
        return "(top level): needs a 'course' mapping"
    if not isinstance(data.get("labs"), list) or not data["labs"]:
        return "labs: needs a non-empty list"
    for i, lab in enumerate(data["labs"]):
        if not isinstance(lab, dict):
            return f"labs[{i}]: not a mapping"
        for key in ("id", "folder", "title", "status", "stages"):
            if key not in lab:
                return f"labs[{i}]: '{key}' is a required property"
        for j, stage in enumerate(lab["stages"] if isinstance(lab["stages"], list) else [None]):
            if not isinstance(stage, dict) or stage.get("name") not in DEFAULT_TIMEOUT:
                return f"labs[{i}].stages[{j}]: needs a name among {', '.join(DEFAULT_TIMEOUT)}"
    return None


def load_manifest(path: Path | str) -> Manifest:
    """Load and validate ``classroom.yml``; a ManifestError names the offending key."""
    try:
        import jsonschema
    except ImportError:  # e.g. a GPU machine's own python: fall back to a check of the shape
        jsonschema = None

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ManifestError(f"{path} does not exist") from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path} is not valid YAML: {exc}") from None
    if jsonschema is None:
        problem = _shape_problem(data)
        if problem:
            raise ManifestError(f"{path} does not match its schema:\n  {problem}")
        errors = []
    else:
        validator = jsonschema.Draft202012Validator(schema())
        errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  {_where(e)}: {e.message}" for e in errors[:10]]
        raise ManifestError(f"{path} does not match its schema:\n" + "\n".join(lines))
    course = data["course"]
    default_gpu = course.get("gpu", DEFAULT_GPU)
    labs = []
    seen = set()
    for entry in data["labs"]:
        if entry["id"] in seen:
            raise ManifestError(f"{path}: lab id {entry['id']} appears twice")
        seen.add(entry["id"])
        if entry["folder"][4:6] != entry["id"][3:5]:
            raise ManifestError(f"{path}: lab {entry['id']} has folder {entry['folder']}; the "
                                f"folder must start with lab-{entry['id'][3:]}-")
        stages = tuple(
            Stage(name=s["name"], timeout_s=s.get("timeout_s", DEFAULT_TIMEOUT[s["name"]]),
                  gpu=s.get("gpu", default_gpu) if s["name"] == "gpu" else None,
                  job_timeout_s=s.get("job_timeout_s", 1800))
            for s in entry["stages"])
        labs.append(Lab(entry["id"], entry["folder"], entry["title"], entry["status"], stages))
    return Manifest(path=path.resolve(), name=course["name"], title=course["title"],
                    python=course.get("python", "3.11"), pins=dict(course.get("pins", {})),
                    labs=labs, raw=data)


def find_manifest(start: Path | None = None) -> Path:
    """classroom.yml in ``start`` or a parent, else beside the installed kit's sources."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "classroom.yml"
        if candidate.is_file():
            return candidate
    kit_root = Path(__file__).resolve().parents[3]
    candidate = kit_root / "classroom.yml"
    if candidate.is_file():
        return candidate
    raise ManifestError("no classroom.yml here or in any parent folder; run from the course "
                        "repository (or pass a path to a lab folder)")
