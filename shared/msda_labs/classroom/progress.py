"""Where a learner stands across the whole ladder, in one checkout of the kit.

    python -m msda_labs progress [LAB ...] [--html PATH] [--refresh]      (nox -s progress)

One row per lab: the score and its maximum (the CPU stages, as ``grade`` reports them), a status
(not started, in progress, done), the next task to do (the first task short of full points),
and which earlier labs the lab runs on (``msda_labs.student.earlier.load``: the learner's own
``my/labNN.py`` beside the lab module, else the course's chip).

Grading one lab takes 20-60 s, so results are cached in ``.progress/`` at the root of the
checkout (git-ignored), keyed by the hash of the lab module, of the ``my/*.py`` files beside it,
and of the kit (package version, the grading core's sources, the lab's tests folder). A lab
whose module is the untouched starter is not graded at all: a starter scores 0 by construction
(the self-test proves it for every lab), so its row needs only the tasks, read from the tests.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from msda_labs.errors import KitError

__all__ = ["LabProgress", "lab_progress", "ladder_progress", "render_table", "write_html",
           "cache_key", "runs_on", "CACHE_DIR"]

CACHE_DIR = ".progress"
NOT_STARTED, IN_PROGRESS, DONE, ERROR = "not started", "in progress", "done", "not graded"


@dataclass
class LabProgress:
    lab: str
    title: str
    score: int
    max_score: int
    status: str
    next_task: str  # "Task 4.2 `name` (0/6)", or "" when done
    runs_on: list[str] = field(default_factory=list)  # ["lab06: chip", "lab08: yours (...)"]
    gpu_stage: bool = False  # the lab also has a GPU stage, not counted here
    how: str = ""  # "graded now (41 s)", "cached", "untouched starter", or what went wrong

    def to_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------- hashing

def _hash_files(paths, base: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.relative_to(base).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def kit_version(lab_dir: Path) -> str:
    """The package version, plus hashes of the grading core and of the lab's tests folder."""
    import msda_labs
    from msda_labs import grading

    package = Path(grading.__file__).parent
    tests = [p for p in (lab_dir / "tests").rglob("*.py") if "__pycache__" not in p.parts]
    return "|".join((msda_labs.__version__, _hash_files(package.glob("*.py"), package)[:16],
                     _hash_files(tests, lab_dir)[:16]))


def cache_key(module: Path, lab_dir: Path) -> str:
    """What a cached row depends on: the module, its my/*.py files and the kit version."""
    mine = sorted((lab_dir / "my").glob("*.py")) if (lab_dir / "my").is_dir() else []
    parts = [hashlib.sha256(module.read_bytes()).hexdigest(), _hash_files(mine, lab_dir),
             kit_version(lab_dir)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


# ------------------------------------------------------------------------------------- runs on

def _loads(source: str) -> list[tuple[int, str]]:
    """(lab, name) of every ``load(N, "name")`` call in a module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        lab, what = node.args[0], node.args[1]
        if name == "load" and isinstance(lab, ast.Constant) and isinstance(lab.value, int) \
                and isinstance(what, ast.Constant) and isinstance(what.value, str):
            found.append((lab.value, what.value))
    return sorted(set(found))


def _defines(path: Path, name: str) -> bool:
    """Whether a module defines ``name`` at its top level (read, never run)."""
    try:
        tree = ast.parse(path.read_text())
    except (SyntaxError, UnicodeDecodeError, OSError):
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return False


def runs_on(module: Path, lab_dir: Path, done: set[str] = frozenset()) -> list[str]:
    """One entry per earlier lab the module loads: whose version it runs on.

    ``done`` holds the labs the learner has finished: an earlier lab that is done but not copied
    into ``my/`` gets a hint to copy it.
    """
    try:
        loads = _loads(module.read_text())
    except (SyntaxError, UnicodeDecodeError):
        return ["(the module does not parse)"]
    by_lab: dict[int, list[str]] = {}
    for lab, name in loads:
        by_lab.setdefault(lab, []).append(name)
    out = []
    for lab, names in sorted(by_lab.items()):
        lab_id, mine = f"lab{lab:02d}", lab_dir / "my" / f"lab{lab:02d}.py"
        if mine.is_file() and all(_defines(mine, n) for n in names):
            out.append(f"{lab_id}: yours (my/{mine.name})")
        elif mine.is_file():
            missing = [n for n in names if not _defines(mine, n)]
            out.append(f"{lab_id}: chip (my/{mine.name} lacks {', '.join(missing)})")
        elif lab_id in done:
            out.append(f"{lab_id}: chip (yours is done: copy it to my/{mine.name})")
        else:
            out.append(f"{lab_id}: chip")
    return out


# ------------------------------------------------------------------------------------- grading

class _CpuTasks:
    """A pytest plugin that keeps {task id: [name, CPU points]} of a collection."""

    def __init__(self):
        self.tasks: dict[str, list] = {}

    def pytest_collection_finish(self, session):
        from msda_labs.grading.judge.plugin import GRADE_KEY

        gs = session.config.stash[GRADE_KEY]
        for task_id, name in gs.tasks.items():
            self.tasks[task_id] = [name, 0]
        for task_id, points in gs.points.values():
            self.tasks[task_id][1] += points


def _collect_here(lab_dir: Path) -> dict[str, list]:
    from msda_labs.grading.judge.stage_run import collect

    collector = _CpuTasks()
    code = collect(lab_dir, collector, "cpu")
    if code not in (0, 5):
        raise SystemExit(f"collecting the tests of {lab_dir} failed (pytest exit {int(code)})")
    return collector.tasks


def _cpu_tasks(lab_dir: Path, timeout: float = 300.0) -> dict[str, list]:
    """{task id: [name, CPU points]} of a lab, read from its test markers in a fresh process
    (two labs' test modules must never meet in one pytest run)."""
    done = subprocess.run([sys.executable, "-m", __name__, "collect", str(lab_dir)],
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise KitError(f"collecting the tests of {lab_dir} failed: "
                       + " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:]))
    return json.loads(done.stdout.strip().splitlines()[-1])


def _grade(lab_id: str, root: Path, timeout: float) -> dict:
    """Grade one lab's CPU stages in a fresh process; the grade.json as a dict."""
    with tempfile.TemporaryDirectory(prefix="msda-progress-") as tmp:
        out = Path(tmp) / "grade.json"
        try:
            done = subprocess.run([sys.executable, "-m", "msda_labs", "grade", lab_id, "--json",
                                   str(out)], cwd=root, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise KitError(f"grading {lab_id} took more than {timeout:.0f} s") from None
        if done.returncode != 0 or not out.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise KitError(f"grading {lab_id} failed (exit {done.returncode}): "
                           + " / ".join(tail))
        return json.loads(out.read_text())


def _from_grade(data: dict) -> tuple[int, int, str, str]:
    """(score, max, status, next task) of a grade.json."""
    score, top = int(data["score"]), int(data["max_score"])
    attempted = any(t["status"] != "not_attempted"
                    for ex in data["exercises"] for t in ex["tests"])
    gpu = data.get("gpu_points") or {}  # the handout counts these too; the GPU stage earns them
    nxt = next((f"Task {ex['id']} `{ex['name']}` ({ex['score']}/{ex['max_score']}"
                + (f", +{gpu[ex['id']]} on the GPU" if gpu.get(ex["id"]) else "") + ")"
                for ex in data["exercises"] if ex["score"] < ex["max_score"]), "")
    if top and score == top:
        return score, top, DONE, ""
    return score, top, IN_PROGRESS if (score or attempted) else NOT_STARTED, nxt


def _is_starter(module: Path, lab_id: str) -> bool:
    """Whether the module is, byte for byte, the starter made from this kit's chip."""
    from msda_labs.authoring.fences import strip
    from msda_labs.flow import chip_path

    chip = chip_path(lab_id)
    return chip.is_file() and module.read_text() == strip(chip.read_text(), str(chip))


def lab_progress(lab, root: Path, *, refresh: bool = False, timeout: float = 1800.0,
                 done: set[str] = frozenset()) -> LabProgress:
    """One lab's row: from the cache when nothing it depends on changed, else graded now."""
    lab_dir = Path(root) / lab.folder
    module = lab_dir / f"{lab.id}.py"
    row = LabProgress(lab.id, lab.title, 0, 0, NOT_STARTED, "",
                      gpu_stage=lab.stage("gpu") is not None)
    if not module.is_file():
        row.status, row.how = ERROR, f"{module} is missing"
        return row
    key = cache_key(module, lab_dir)
    cached = Path(root) / CACHE_DIR / f"{lab.id}.json"
    entry = json.loads(cached.read_text()) if cached.is_file() and not refresh else {}
    if entry.get("key") == key:
        row.score, row.max_score, row.status, row.next_task = entry["row"]
        row.how = "cached"
    elif _is_starter(module, lab.id):
        try:
            tasks = _cpu_tasks(lab_dir)
        except (KitError, subprocess.TimeoutExpired) as exc:
            row.status, row.how = ERROR, str(exc)
            return row
        row.max_score = sum(points for _, points in tasks.values())
        first = next(((t, n, p) for t, (n, p) in tasks.items() if p), None)
        row.next_task = f"Task {first[0]} `{first[1]}` (0/{first[2]})" if first else ""
        row.how = "untouched starter (not graded)"
    else:
        start = time.monotonic()
        try:
            data = _grade(lab.id, Path(root), timeout)
        except KitError as exc:
            row.status, row.how = ERROR, str(exc)
            return row
        row.score, row.max_score, row.status, row.next_task = _from_grade(data)
        row.how = f"graded now ({time.monotonic() - start:.0f} s)"
    if row.how != "cached":
        cached.parent.mkdir(exist_ok=True)
        cached.write_text(json.dumps({"key": key, "row": [row.score, row.max_score, row.status,
                                                          row.next_task]}, indent=1) + "\n")
    row.runs_on = runs_on(module, lab_dir, done)
    return row


def ladder_progress(manifest, labs=None, *, refresh: bool = False, report=None):
    """Rows for the labs of ``manifest`` (or those named), in ladder order. ``report(row)`` is
    called as each row is ready."""
    wanted = {manifest.lab(key).id for key in labs or ()}
    chosen = [lab for lab in manifest.labs if lab.built and (not wanted or lab.id in wanted)]
    rows, done = [], set()
    for lab in chosen:
        row = lab_progress(lab, manifest.root, refresh=refresh, done=done)
        if row.status == DONE:
            done.add(row.lab)
        rows.append(row)
        if report:
            report(row)
    return rows


# ------------------------------------------------------------------------------------ rendering

COLUMNS = ("Lab", "Title", "Score", "Status", "Next task", "Runs on")


def _cells(row: LabProgress) -> list[str]:
    score = f"{row.score}/{row.max_score}" if row.max_score or row.status != ERROR else "?"
    return [row.lab, row.title, score, row.status, row.next_task or "-",
            ", ".join(row.runs_on) or "-"]


def render_table(rows: list[LabProgress], *, how: bool = True) -> str:
    """The rows as a Markdown table (readable as plain text too), with what was graded now
    (``how=False``: not, where each row's line was printed as it came)."""
    cells = [list(COLUMNS)] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |" for line in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    score, top = sum(r.score for r in rows), sum(r.max_score for r in rows)
    done = sum(r.status == DONE for r in rows)
    lines.append("")
    lines.append(f"{done} of {len(rows)} labs done; {score}/{top} points on the CPU stages.")
    gpu = [r.lab for r in rows if r.gpu_stage]
    if gpu:
        lines.append(f"Not counted: the GPU stages of {', '.join(gpu)} (nox -s labNN-gpu).")
    if not how:
        return "\n".join(lines)
    for r in rows:
        if r.how and r.how != "cached":
            lines.append(f"{r.lab}: {r.how}")
    cached = [r.lab for r in rows if r.how == "cached"]
    if cached:
        lines.append(f"cached (unchanged since graded): {', '.join(cached)}")
    return "\n".join(lines)


def _code_spans(text: str) -> list[tuple[str, bool]]:
    """``a `b` c`` as [("a ", False), ("b", True), (" c", False)]: backticks mark code."""
    return [(part, i % 2 == 1) for i, part in enumerate(text.split("`")) if part]


def write_html(rows: list[LabProgress], path: Path | str, title: str = "") -> Path:
    """The same table as a small, self-contained HTML page."""
    try:
        from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
    except ImportError:
        raise KitError("--html needs jinja2 (pip install jinja2==3.1.6)") from None
    env = Environment(loader=PackageLoader("msda_labs.classroom", "templates"),
                      autoescape=select_autoescape(["html", "j2"]), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    page = env.get_template("progress.html.j2").render(
        title=title, columns=COLUMNS, rows=[(r, _cells(r), _code_spans(_cells(r)[4]))
                                            for r in rows],
        summary=render_table(rows).split("\n\n", 1)[1].splitlines())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path


if __name__ == "__main__":  # python -m msda_labs.classroom.progress collect LAB_DIR
    if sys.argv[1:2] != ["collect"] or len(sys.argv) != 3:
        raise SystemExit("usage: python -m msda_labs.classroom.progress collect LAB_DIR")
    print(json.dumps(_collect_here(Path(sys.argv[2]))))
