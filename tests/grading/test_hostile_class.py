"""A class of hostile lab 01 submissions cannot stop its own regrade, nor a later one.

Each hostile student's ``lab01.py`` answers zeros and, every time a child imports it, attacks the
cleanup and the machine: a folder chain 3,000 levels deep, a folder of 20,000 files, loops of
symlinks, folders and files without permissions for their owner, sockets and FIFOs (in its
scratch and every world-writable folder, and once per grading run in its Triton cache, which is
on the disk), a flood of output (128 MiB), hundreds of threads and thousands of open files, and
a daemon in a session of its own that keeps its working folder in the scratch. They are graded
in one separated batch regrade, before and after an honest student (the lab 01 chip); then the
honest student is regraded alone. Every hostile row must score 0, the honest one full marks
both times, with nothing removed by hand between the two runs, and nothing of the class may be
left running or lying in a world-writable folder.

Separation needs root; elsewhere this test skips. Four lab 01 regrades in all (about 60 s on
a loaded 2-core machine). The same class without the private world (``MSDA_PRIVATE_WORLD=0``,
on-disk scratch) was graded by hand to the same verdicts; it is not repeated here because
removing its 3,000-level trees from a disk mounted with ``discard`` takes minutes.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kit import MANIFEST, chip_path, separation_unavailable

from msda_labs.classroom.export import export_lab
from msda_labs.grading.isolation import sandbox

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attacks.suite import SECRET_SEED, regrade_class  # noqa: E402

pytestmark = pytest.mark.skipif(bool(separation_unavailable()),
                                reason=f"the hostile class runs separated, as the regrade does: "
                                       f"{separation_unavailable()}")

# Every hostile module: its attack runs at import, in every child; the answers are zeros.
PREAMBLE = '''
import os, socket, stat, sys, threading, time
import torch

TAG = "hostile"
STEP = 0

def _first_in_run():
    """Whether this is the grading run's first child to get here (the Triton cache folder is the
    run's, on the disk: attacked once per run, the rest in every child)."""
    try:
        os.close(os.open(os.path.join(os.environ["TRITON_CACHE_DIR"], f".{TAG}-{STEP}"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True
    except (KeyError, OSError):
        return False

def places():
    """Where this child can write: its scratch, every world-writable folder, and its Triton
    cache (the first time in a grading run)."""
    found = [os.getcwd(), "/tmp", "/var/tmp", "/dev/shm", "/run/lock"]
    if _first_in_run():
        found.append(os.environ["TRITON_CACHE_DIR"])
    return [p for p in found if p and os.access(p, os.W_OK)]

def spot(folder):
    """A fresh folder of ours in ``folder`` (None when it cannot be made)."""
    path = os.path.join(folder, f".{TAG}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.mkdir(path)
    except OSError:
        return None
    return path

def bilinear_sample(img, x, y):
    return torch.zeros(img.shape[-1], dtype=img.dtype)

def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    return torch.zeros(B, sampling_locations.shape[1], M * D, dtype=value.dtype)
'''

ATTACKS = {
    "deep-tree": '''
def chain(top, depth=3000):
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:
        pass
    os.close(fd)

for folder in places():
    where = spot(folder)
    if where:
        chain(where)
''',
    "wide-tree": '''
for folder in places():
    where = spot(folder)
    if where:
        many = 20000 if folder == os.environ.get("TRITON_CACHE_DIR") else 3000
        for i in range(many):
            try:
                os.close(os.open(os.path.join(where, f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o600))
            except OSError:
                break
''',
    "symlinks": '''
for folder in places():
    where = spot(folder)
    if where:
        for name, target in (("self", "self"), ("a", "b"), ("b", "a"), ("up", ".."),
                             ("root", "/"), ("proc", "/proc/1/root"), ("loop", ".")):
            try:
                os.symlink(target, os.path.join(where, name))
            except OSError:
                pass
        inner = os.path.join(where, "inner")
        os.mkdir(inner)
        os.symlink(where, os.path.join(inner, "back"))
''',
    "closed-modes": '''
for folder in places():
    where = spot(folder)
    if where:
        inner = os.path.join(where, "a", "b")
        os.makedirs(inner)
        with open(os.path.join(inner, "f"), "w") as fh:
            fh.write("x")
        for path in (os.path.join(inner, "f"), inner, os.path.dirname(inner), where):
            os.chmod(path, 0)
try:
    os.chmod(os.getcwd(), 0)  # its own scratch, the folder it works in
except OSError:
    pass
''',
    "sockets-fifos": '''
KEEP = []
for folder in places():
    where = spot(folder)
    if where:
        try:
            os.mkfifo(os.path.join(where, "fifo"))
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(os.path.join(where, "sock"))
            sock.listen(1)
            KEEP.append(sock)
        except OSError:
            pass
''',
    "flood-output": '''
block = "x" * (1 << 20)
for _ in range(64):
    sys.stdout.write(block)
    sys.stderr.write(block)
sys.stdout.flush()
''',
    "threads-fds": '''
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 20000), hard))
except (ValueError, OSError):
    pass
FILES = []
try:
    for _ in range(8000):
        FILES.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
for _ in range(300):
    try:
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    except RuntimeError:
        break
''',
    "scratch-holder": '''
scratch = os.getcwd()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.chdir(scratch)  # a daemon that keeps the scratch as its working folder
        held = [os.open(p, os.O_RDONLY) for p in places()]
        for fd in range(3):
            os.close(fd)
        end = time.time() + 600
        while time.time() < end:
            where = spot(scratch) or spot("/tmp")
            time.sleep(0.05)
        os._exit(0)
    os._exit(0)
''',
}
# The students: each hostile one combines several attacks (one regrade each costs seconds).
# Sorted by name, the batch grades one of them, then the honest student, then the other.
STUDENTS = {
    "a-trees": ["deep-tree", "wide-tree", "symlinks", "sockets-fifos", "scratch-holder",
                "closed-modes"],
    "z-flood": ["flood-output", "threads-fds", "scratch-holder"],
}
HONEST = "m-honest"


def _source(attacks: list[str]) -> str:
    parts = [textwrap.dedent(PREAMBLE)]
    for step, name in enumerate(attacks):
        parts.append(f"\nSTEP = {step}  # {name}\n" + textwrap.dedent(ATTACKS[name]))
    return "".join(parts)


def _left_in_shared(uids: set[int]) -> list[str]:
    """Entries of the world-writable folders owned by one of ``uids`` or named like ours."""
    left = []
    for top in sandbox.world_writable_folders():
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                owner = entry.stat(follow_symlinks=False).st_uid
            except OSError:
                continue
            if owner in uids or entry.name.startswith(".hostile-"):
                left.append(f"{entry.path} (uid {owner})")
    return left


def _started_before(pid: str, ticks: float) -> bool:
    """Whether process ``pid`` started before ``ticks`` (clock ticks since boot)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return int(fields[19]) < ticks


def _now_ticks() -> float:
    return float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK")


def _left_running(uids: set[int], before: float) -> list[str]:
    """Processes of ``uids`` started before ``before`` that are still there after a few looks.

    Slot uids are reused: once this class's executors released them, another test running in
    parallel may hold the same uid for its own (short-lived) children, so only a process that
    was already there when the class's grading ended, and stays, is a leftover."""
    found = [pid for pid in _running_as(uids) if _started_before(pid, before)]
    for _ in range(5):
        if not found:
            break
        time.sleep(1.0)
        found = [pid for pid in found if Path(f"/proc/{pid}").exists()]
    return found


def _running_as(uids: set[int]) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and set(map(int, line.split()[1:])) & uids:
                found.append(entry)
    return found


@pytest.fixture(scope="module")
def lab01_export(tmp_path_factory) -> Path:
    return export_lab(MANIFEST, MANIFEST.lab("lab01"), tmp_path_factory.mktemp("export"))


def _checkout(folder: Path, export: Path, source: str) -> None:
    shutil.copytree(export, folder)
    (folder / "lab01.py").write_text(source)


def test_a_hostile_class_is_graded_to_the_end(lab01_export, tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    names = sorted(STUDENTS)
    for name in names:
        _checkout(folder / name, lab01_export, _source(STUDENTS[name]))
    _checkout(folder / HONEST, lab01_export, chip_path("lab01").read_text())
    start = time.monotonic()
    results, notes, output = regrade_class(folder, "lab01", lab01_export, seed=SECRET_SEED,
                                           env={sandbox.SEPARATE_ENV: "1"})
    batch_seconds = time.monotonic() - start

    problems = []
    uids = set()
    for name in [*names, HONEST]:
        result = results.get(name)
        if result is None:
            problems.append(f"{name}: not graded ({notes.get(name, '')[:300]})")
            continue
        separation = result.get("separation") or {}
        if not separation.get("separated"):
            problems.append(f"{name}: graded without separation: {separation}")
        uids.add(separation.get("uid"))
        want = result["max_score"] if name == HONEST else 0
        if result["max_score"] == 0 or result["score"] != want:
            problems.append(f"{name}: {result['score']}/{result['max_score']}, expected "
                            f"{want} ({notes.get(name, '')[:200]})")
    uids.discard(None)
    assert not problems, f"the hostile class (in {batch_seconds:.0f} s):\n" + "\n".join(problems)
    # The flood reached the judge as a tail only, and every child had a private world here.
    honest = results[HONEST]["separation"]
    assert honest.get("private") is True, honest

    # The honest student alone, later, with nothing removed by hand in between.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copytree(folder / HONEST, alone / HONEST)
    class_done = _now_ticks()
    again, notes, _ = regrade_class(alone, "lab01", lab01_export, seed=SECRET_SEED,
                                    env={sandbox.SEPARATE_ENV: "1"})
    result = again.get(HONEST)
    assert result is not None, notes
    assert result["score"] == result["max_score"] > 0, (result["score"], notes)
    assert not _left_running(uids, class_done), \
        f"processes of the class's uids {uids} are still running"
    assert not _left_in_shared(uids), _left_in_shared(uids)
