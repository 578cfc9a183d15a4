"""The course manifest ``classroom.yml``: loaded, validated against its JSON schema, typed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from importlib import resources
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from msda_labs.errors import KitError

__all__ = ["ManifestError", "Stage", "Lab", "LatePolicy", "GradeTrigger", "Manifest",
           "load_manifest", "find_manifest", "schema", "parse_due", "GRADE_ON"]

DEFAULT_TIMEOUT = {"cpu": 60, "interpret": 120, "aot": 180, "gpu": 300}
DEFAULT_GPU = "H100"
# When the exported workflow grades (``course.grade_on``).
GRADE_ON = ("push", "submission", "throttled")


class ManifestError(KitError, ValueError):
    """classroom.yml is missing, unreadable or does not match its schema."""


@dataclass(frozen=True)
class Stage:
    name: str
    timeout_s: int
    gpu: str | None = None
    job_timeout_s: int = 1800


@dataclass(frozen=True)
class LatePolicy:
    """What a late submission costs (``course.late_policy`` in classroom.yml).

    ``kind``: ``penalty`` (``penalty_per_day`` percent of the lab's points per late day),
    ``free_days`` (``free_days`` late days per student across the whole course at no cost, then
    ``penalty_per_day``), or ``none`` (no late work: only what GitHub received by the due date
    counts).
    """

    kind: str = "none"
    penalty_per_day: float = 0.0
    free_days: int = 0

    def describe(self) -> str:
        if self.kind == "none":
            return "no late work: only what GitHub received by the due date is graded"
        per_day = f"{self.penalty_per_day:g}% of the lab's points per late day"
        if self.kind == "penalty":
            return f"late work loses {per_day}"
        return (f"{self.free_days} free late day(s) across the course; after that, late work "
                f"loses {per_day}")


@dataclass(frozen=True)
class GradeTrigger:
    """When each lab's workflow grades (``course.grade_on``, ``course.grade_every_minutes``).

    ``push``: every push (the default); ``submission``: only a pushed tag ``submit*``, a
    published release or a manual run (students grade with ``nox -s labNN`` in between);
    ``throttled``: pushes, but a push less than ``every_minutes`` after the start of the branch's
    last graded run is not graded (submissions always are). The GPU stage runs on submissions
    only, whatever the choice.
    """

    on: str = "push"
    every_minutes: int = 0

    def describe(self) -> str:
        if self.on == "submission":
            return "on submission (a tag submit*, a published release or a manual run)"
        if self.on == "throttled":
            return f"on push, at most once every {self.every_minutes} minutes"
        return "on every push"


@dataclass(frozen=True)
class Lab:
    id: str
    folder: str
    title: str
    status: str
    stages: tuple[Stage, ...]
    # When the lab is due (timezone-aware), and how many days after it late work is accepted.
    due: datetime | None = None
    late_days: int = 0

    @property
    def cutoff(self) -> datetime | None:
        """The end of the late window: the last moment a push can count for this lab."""
        if self.due is None:
            return None
        return self.due + timedelta(days=self.late_days)

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
    late_policy: LatePolicy = field(default_factory=LatePolicy)
    timezone: str = ""
    grading: GradeTrigger = field(default_factory=GradeTrigger)

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


def _message(error) -> str:
    """The schema's message, in plain words where the raw one would puzzle (a regex, a "not")."""
    path = list(error.absolute_path)
    if error.validator == "pattern" and path[-1:] == ["due"]:
        return (f"{error.instance!r} is not an ISO 8601 date and time; write it as "
                f"2026-11-20T23:59:00+01:00 (a date, a time and a UTC offset)")
    if error.validator == "not" and path == ["course"]:
        return ("grade_every_minutes is read only with grade_on: throttled; remove it or set "
                "grade_on: throttled")
    if error.validator == "required" and path == ["course"] and \
            "grade_every_minutes" in error.message:
        return "grade_on: throttled needs grade_every_minutes (e.g. 30)"
    if error.validator == "not" and path[-1:] == ["late_policy"]:
        return (f"kind {error.instance.get('kind')!r} takes "
                + ("no free_days or penalty_per_day" if error.instance.get("kind") == "none"
                   else "no free_days (that is the free_days policy)"))
    return error.message


def _shape_problem(data) -> str | None:
    """The keys the loader reads, checked without jsonschema (which the full check needs)."""
    if not isinstance(data, dict) or not isinstance(data.get("course"), dict):
        return "(top level): needs a 'course' mapping"
    if not isinstance(data.get("labs"), list) or not data["labs"]:
        return "labs: needs a non-empty list"
    policy = data["course"].get("late_policy")
    if policy is not None and (not isinstance(policy, dict)
                               or policy.get("kind") not in ("penalty", "free_days", "none")):
        return "course.late_policy: needs a kind among penalty, free_days, none"
    grade_on = data["course"].get("grade_on", "push")
    if grade_on not in GRADE_ON:
        return f"course.grade_on: needs one of {', '.join(GRADE_ON)}"
    every = data["course"].get("grade_every_minutes")
    if (grade_on == "throttled") != (every is not None) or (
            every is not None and (not isinstance(every, int) or every < 1)):
        return ("course.grade_every_minutes: a whole number of minutes, given with "
                "grade_on: throttled and only then")
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


def parse_due(text, timezone: str = "") -> datetime:
    """A lab's due date, timezone-aware: ISO 8601 with a time and an offset
    (``2026-11-20T23:59:00+01:00``, ``...Z``), or without an offset when ``timezone`` (an IANA
    name, ``course.timezone``) says where. Raises ValueError with what to write instead."""
    if isinstance(text, datetime):
        text = text.isoformat()
    elif isinstance(text, date):
        text = text.isoformat()
    text = str(text).strip()
    example = "write it as 2026-11-20T23:59:00+01:00 (a date, a time and a UTC offset)"
    if len(text) <= 10:
        raise ValueError(f"{text!r} has no time of day; {example}")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 date and time; {example}") from None
    if when.tzinfo is None:
        if not timezone:
            raise ValueError(f"{text!r} has no timezone; {example}, or set course.timezone "
                             f"(e.g. Europe/Berlin) to say where the due dates are")
        when = when.replace(tzinfo=ZoneInfo(timezone))
    return when


def _deadlines(path: Path, data: dict) -> tuple[LatePolicy, str, dict[str, datetime]]:
    """The late policy, the timezone and each lab's due date, checked beyond the schema: a
    timezone that exists, due dates with a timezone, a late window only with a due date and a
    policy that accepts late work."""
    course = data["course"]
    timezone = course.get("timezone", "")
    if timezone:
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ManifestError(f"{path}: course.timezone {timezone!r} is not an IANA timezone "
                                f"name (e.g. Europe/Berlin, America/New_York, UTC)") from None
    raw = course.get("late_policy") or {"kind": "none"}
    policy = LatePolicy(kind=raw["kind"], penalty_per_day=float(raw.get("penalty_per_day", 0)),
                        free_days=int(raw.get("free_days", 0)))
    due = {}
    for i, entry in enumerate(data["labs"]):
        where = f"labs[{i}] ({entry['id']})"
        if "due" in entry:
            try:
                due[entry["id"]] = parse_due(entry["due"], timezone)
            except ValueError as exc:
                raise ManifestError(f"{path}: {where}.due: {exc}") from None
        if entry.get("late_days") and "due" not in entry:
            raise ManifestError(f"{path}: {where}.late_days: a late window needs a due date "
                                f"(add due: 2026-11-20T23:59:00+01:00)")
        if entry.get("late_days") and policy.kind == "none":
            raise ManifestError(f"{path}: {where}.late_days: course.late_policy is 'none' (no "
                                f"late work), so a late window would never count; remove it or "
                                f"choose the penalty or free_days policy")
    return policy, timezone, due


def _plain_dates(data) -> None:
    """YAML reads an unquoted ``2026-11-20T23:59:00+01:00`` as a datetime: back to its text, so
    that the schema sees what was written."""
    if isinstance(data, dict) and isinstance(data.get("labs"), list):
        for entry in data["labs"]:
            if isinstance(entry, dict) and isinstance(entry.get("due"), (date, datetime)):
                entry["due"] = entry["due"].isoformat()


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
    _plain_dates(data)
    if jsonschema is None:
        problem = _shape_problem(data)
        if problem:
            raise ManifestError(f"{path} does not match its schema:\n  {problem}")
        errors = []
    else:
        validator = jsonschema.Draft202012Validator(schema())
        errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  {_where(e)}: {_message(e)}" for e in errors[:10]]
        raise ManifestError(f"{path} does not match its schema:\n" + "\n".join(lines))
    late_policy, timezone, due = _deadlines(path, data)
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
        labs.append(Lab(entry["id"], entry["folder"], entry["title"], entry["status"], stages,
                        due=due.get(entry["id"]), late_days=int(entry.get("late_days", 0))))
    grading = GradeTrigger(on=course.get("grade_on", "push"),
                           every_minutes=int(course.get("grade_every_minutes", 0)))
    return Manifest(path=path.resolve(), name=course["name"], title=course["title"],
                    python=course.get("python", "3.11"), pins=dict(course.get("pins", {})),
                    labs=labs, raw=data, late_policy=late_policy, timezone=timezone,
                    grading=grading)


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
