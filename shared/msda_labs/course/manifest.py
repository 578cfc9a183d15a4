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

__all__ = ["DEFAULT_TIMEOUT", "DEFAULT_GPU", "DEFAULT_JOB_TIMEOUT", "ManifestError", "Stage", "Lab",
           "LatePolicy", "GradeTrigger", "Manifest",
           "Extension", "Adjustment", "load_manifest", "find_manifest", "schema", "parse_due",
           "GRADE_ON", "student_key"]

# The stage defaults, in one place: what a stage that names no limit gets (seconds one test's
# code may run, per stage), the GPU type, and the whole GPU stage's limit (the Modal function).
# A bare lab folder without a manifest grades with these too.
DEFAULT_TIMEOUT = {"cpu": 60, "interpret": 120, "aot": 180, "gpu": 300}
DEFAULT_GPU = "H100"
DEFAULT_JOB_TIMEOUT = 1800
# When the exported workflow grades (``course.grade_on``).
GRADE_ON = ("push", "submission", "throttled")


class ManifestError(KitError, ValueError):
    """classroom.yml is missing, unreadable or does not match its schema."""


@dataclass(frozen=True)
class Stage:
    name: str
    timeout_s: int
    gpu: str | None = None
    job_timeout_s: int = DEFAULT_JOB_TIMEOUT


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


def student_key(student: str) -> str:
    """A student as extensions and adjustments name them: the GitHub login, lower case (a
    gradebook's ``owner--lab-05-ada`` or ``lab-05-ada`` matches ``ada``)."""
    name = student.split("--")[-1] if "--" in student else student
    if name.startswith("lab-") and name[4:6].isdigit() and name[6:7] == "-":
        name = name[7:]
    return name.strip().lower()


@dataclass(frozen=True)
class Extension:
    """One student's own due date for one lab: a new date, or extra days on the lab's."""

    student: str
    lab: str
    due: datetime               # the student's due date (the late window follows it)
    cutoff: datetime            # the end of the student's late window
    days: int = 0               # extra days given (0: an explicit date)
    reason: str = ""
    where: str = ""             # the file and entry it came from

    def describe(self) -> str:
        given = f"+{self.days} day(s)" if self.days else "new date"
        text = f"extension ({given}): due {self.due.isoformat(sep=' ', timespec='minutes')}"
        return text + (f" ({self.reason})" if self.reason else "") + f" [{self.where}]"


@dataclass(frozen=True)
class Adjustment:
    """Points an instructor adds to (or takes from) one student's lab by hand, with the
    reason; kept in a file of its own, so every regrade keeps it."""

    student: str
    lab: str
    points: float
    reason: str
    where: str = ""


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
    extensions: list[Extension] = field(default_factory=list)
    adjustments: list[Adjustment] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.path.parent

    def extension_for(self, student: str, lab_id: str) -> Extension | None:
        key = student_key(student)
        return next((e for e in self.extensions if e.lab == lab_id and e.student == key), None)

    def deadline_for(self, student: str, lab_id: str) -> tuple[datetime | None,
                                                                 datetime | None,
                                                                 Extension | None]:
        """(due, end of the late window, the extension applied or None) of one student."""
        extension = self.extension_for(student, lab_id)
        if extension is not None:
            return extension.due, extension.cutoff, extension
        lab = self.lab(lab_id)
        return lab.due, lab.cutoff, None

    def adjustment_for(self, student: str, lab_id: str) -> Adjustment | None:
        key = student_key(student)
        return next((a for a in self.adjustments if a.lab == lab_id and a.student == key), None)

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
    if error.validator == "oneOf" and path[:1] == ["extensions"]:
        both = isinstance(error.instance, dict) and "due" in error.instance
        return ("give either due (a new date) or days (extra days), not "
                + ("both" if both else "neither"))
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
    except ValueError as exc:
        # The schema's pattern admits 2026-11-31 and 24:00: say which part does not exist.
        why = str(exc)
        if "out of range" in why or "must be in" in why:
            raise ValueError(f"{text!r} is not a moment that exists ({why}); {example}") \
                from None
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


class _TextDates(yaml.SafeLoader):
    """YAML without timestamps: an unquoted date stays the text written, so that an impossible
    one (``2026-11-31``) reaches the checks that name its file and key instead of failing inside
    the YAML reader."""


_TextDates.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def _read_yaml(path: Path):
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_TextDates)  # noqa: S506
    except FileNotFoundError:
        raise ManifestError(f"{path} does not exist") from None
    except OSError as exc:
        raise ManifestError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise ManifestError(f"{path} is not valid YAML: {exc}") from None


def _side_file(path: Path, data: dict, key: str) -> tuple[Path | None, list]:
    """The entries of the file ``key`` names (relative to classroom.yml): YAML (a list, or a
    mapping with the list under ``key``'s stem) or CSV (a header row)."""
    name = data.get(key)
    if not name:
        return None, []
    side = (path.parent / name).resolve()
    if side.suffix.lower() == ".csv":
        import csv

        try:
            with open(side, newline="", encoding="utf-8-sig") as fh:
                rows = [{k.strip().lower(): (v or "").strip() for k, v in row.items() if k}
                        for row in csv.DictReader(fh)]
        except FileNotFoundError:
            raise ManifestError(f"{path}: {key}: {side} does not exist") from None
        except (OSError, csv.Error) as exc:
            raise ManifestError(f"{path}: {key}: {side} cannot be read ({exc})") from None
        return side, [{k: v for k, v in row.items() if v != ""} for row in rows]
    loaded = _read_yaml(side) if side.is_file() else None
    if loaded is None and not side.is_file():
        raise ManifestError(f"{path}: {key}: {side} does not exist")
    entries = loaded.get(key.removesuffix("_file"), []) if isinstance(loaded, dict) else loaded
    if not isinstance(entries, list):
        raise ManifestError(f"{side}: needs a list of entries (each a mapping)")
    return side, entries


def _extensions(path: Path, data: dict, labs: dict[str, Lab],
                timezone: str) -> list[Extension]:
    """The ``extensions`` of classroom.yml and of the file ``extensions_file`` names, checked:
    a known lab with a due date, a due date or a number of days (not both), once per student
    and lab."""
    side, from_file = _side_file(path, data, "extensions_file")
    entries = [(f"{path.name}: extensions[{i}]", e) for i, e in enumerate(data.get("extensions")
                                                                         or [])]
    entries += [(f"{side.name}: entry {i + 1}", e) for i, e in enumerate(from_file)]
    out, seen = [], {}
    for where, entry in entries:
        if not isinstance(entry, dict):
            raise ManifestError(f"{path}: {where}: not a mapping (student, lab, due or days)")
        unknown = set(entry) - {"student", "lab", "due", "days", "reason"}
        if unknown:
            raise ManifestError(f"{path}: {where}: unknown key(s) {', '.join(sorted(unknown))} "
                                f"(known: student, lab, due, days, reason)")
        student = str(entry.get("student", "")).strip()
        lab_key = str(entry.get("lab", "")).strip()
        if not student or not lab_key:
            raise ManifestError(f"{path}: {where}: needs a student (GitHub login) and a lab")
        lab_id = f"lab{int(lab_key):02d}" if lab_key.isdigit() else lab_key
        lab = labs.get(lab_id)
        if lab is None:
            raise ManifestError(f"{path}: {where}.lab: no lab {lab_key!r} (known: "
                                f"{', '.join(labs)})")
        if lab.due is None:
            raise ManifestError(f"{path}: {where}: {lab_id} has no due date (labs[].due) to "
                                f"extend")
        if ("due" in entry) == ("days" in entry):
            raise ManifestError(f"{path}: {where}: give either due (a new date) or days "
                                f"(extra days), not {'both' if 'due' in entry else 'neither'}")
        days = 0
        if "due" in entry:
            try:
                due = parse_due(entry["due"], timezone)
            except ValueError as exc:
                raise ManifestError(f"{path}: {where}.due: {exc}") from None
        else:
            try:
                days = int(str(entry["days"]).strip())
            except ValueError:
                days = 0
            if days < 1 or days > 365:
                raise ManifestError(f"{path}: {where}.days: {entry['days']!r} is not a whole "
                                    f"number of days between 1 and 365")
            due = lab.due + timedelta(days=days)
        key = (student_key(student), lab_id)
        if key in seen:
            raise ManifestError(f"{path}: {where}: {student} already has an extension of "
                                f"{lab_id} ({seen[key]}): keep one")
        seen[key] = where
        out.append(Extension(key[0], lab_id, due, due + timedelta(days=lab.late_days), days,
                             str(entry.get("reason", "")).strip(), where))
    return out


def _adjustments(path: Path, data: dict, labs: dict[str, Lab]) -> list[Adjustment]:
    """The manual adjustments of the file ``adjustments_file`` names (student, lab, points,
    reason): one per student and lab, each with a reason."""
    side, entries = _side_file(path, data, "adjustments_file")
    out, seen = [], set()
    for i, entry in enumerate(entries):
        where = f"{side.name}: entry {i + 1}"
        if not isinstance(entry, dict):
            raise ManifestError(f"{path}: {where}: not a mapping (student, lab, points, reason)")
        student = str(entry.get("student", "")).strip()
        lab_key = str(entry.get("lab", "")).strip()
        lab_id = f"lab{int(lab_key):02d}" if lab_key.isdigit() else lab_key
        if not student or lab_id not in labs:
            raise ManifestError(f"{path}: {where}: needs a student and a known lab (got "
                                f"{student!r}, {lab_key!r})")
        try:
            points = float(str(entry.get("points", "")).strip())
        except ValueError:
            raise ManifestError(f"{path}: {where}.points: {entry.get('points')!r} is not a "
                                f"number of points (e.g. 2 or -1.5)") from None
        reason = str(entry.get("reason", "")).strip()
        if not reason:
            raise ManifestError(f"{path}: {where}.reason: say why (the gradebook shows it)")
        key = (student_key(student), lab_id)
        if key in seen:
            raise ManifestError(f"{path}: {where}: a second adjustment of {student}'s {lab_id}")
        seen.add(key)
        out.append(Adjustment(key[0], lab_id, points, reason, where))
    return out


def load_manifest(path: Path | str) -> Manifest:
    """Load and validate ``classroom.yml``; a ManifestError names the offending key."""
    try:
        import jsonschema
    except ImportError:  # e.g. a GPU machine's own python: fall back to a check of the shape
        jsonschema = None

    path = Path(path)
    data = _read_yaml(path)
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
    by_id = {lab.id: lab for lab in labs}
    return Manifest(path=path.resolve(), name=course["name"], title=course["title"],
                    python=course.get("python", "3.11"), pins=dict(course.get("pins", {})),
                    labs=labs, raw=data, late_policy=late_policy, timezone=timezone,
                    grading=grading, extensions=_extensions(path, data, by_id, timezone),
                    adjustments=_adjustments(path, data, by_id))


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
