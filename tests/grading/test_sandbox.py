"""Separation: a child running as its own uid cannot reach what the judge keeps.

The separation tests need root (the sandbox takes a uid per executor); elsewhere they skip and
say so. The salt and the child-side contract need nothing.
"""

import os
import shutil
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from msda_labs.grading.isolation import judgeonly, sandbox
from msda_labs.grading.isolation.executor import Executor, InfrastructureError
from msda_labs.grading.isolation.secret import case_salt, read_secret

needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="separation needs root (it runs each child as a uid of its own); this run is not root")

SUBMISSION = '''
import os, signal, socket, time

def read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(40).decode("latin-1")
    except OSError as exc:
        return type(exc).__name__

def signal_judge(pid):
    try:
        os.kill(pid, signal.SIGTERM)
        return "sent"
    except OSError as exc:
        return type(exc).__name__

def write(path):
    try:
        with open(path, "w") as fh:
            fh.write("forged")
        return "written"
    except OSError as exc:
        return type(exc).__name__

def whoami():
    import resource
    with open("/proc/self/status") as fh:
        nnp = [l.split()[1] for l in fh if l.startswith("NoNewPrivs")]
    return {"ids": list(os.getresuid()) + list(os.getresgid()), "groups": os.getgroups(),
            "cwd": os.getcwd(), "home": os.environ["HOME"], "tmp": os.environ["TMPDIR"],
            "nnp": nnp[0], "fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0],
            "core": resource.getrlimit(resource.RLIMIT_CORE)[0],
            "interfaces": [name for _, name in socket.if_nameindex()]}

def lazy_imports():
    import fractions, secrets, wave  # stdlib modules nothing imported before
    return [m.__name__ for m in (fractions, secrets, wave)]

def leave_behind(marker):
    with open(os.path.join(os.environ["TMPDIR"], "mine"), "w") as fh:
        fh.write("x")
    with open(marker, "w") as fh:
        fh.write("left in /tmp")
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:  # a grandchild in a session of its own, meant to outlive the test
            os.write(write_end, str(os.getpid()).encode())
            time.sleep(60)
        os._exit(0)
    return int(os.read(read_end, 32))

def _shmget(key, flags):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.shmget(ctypes.c_int(key), ctypes.c_size_t(4096), ctypes.c_int(flags))

def litter(folders, tag):
    """Write a file named ``tag`` into every folder given, the scratch and the Triton cache, and
    make a SysV shared memory segment; returns where it could write."""
    wrote = []
    for folder in [*folders, os.environ["TMPDIR"], os.environ["TRITON_CACHE_DIR"]]:
        try:
            with open(os.path.join(folder, tag), "w") as fh:
                fh.write("planted")
            wrote.append(folder)
        except OSError:
            pass
    return {"wrote": wrote, "shm": _shmget(0x6d736461, 0o1000 | 0o666) >= 0}

def shape_scratch():
    """What a child can leave in its scratch for the cleanup (see _hostile_tree below)."""
    import socket
    fd = os.open(".", os.O_RDONLY)
    for _ in range(3000):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    os.makedirs("closed/inner")
    os.chmod("closed/inner", 0)
    os.chmod("closed", 0)
    os.symlink("loop", "loop")
    os.mkfifo("fifo")
    socket.socket(socket.AF_UNIX).bind("sock")
    return sorted(os.listdir("."))

def look(folders, tag):
    """What this child sees of ``litter``: the folders holding ``tag``, the segment."""
    seen = [f for f in [*folders, os.environ["TMPDIR"], os.environ["TRITON_CACHE_DIR"]]
            if os.path.exists(os.path.join(f, tag))]
    return {"seen": seen, "cache": sorted(os.listdir(os.environ["TRITON_CACHE_DIR"])),
            "shm": _shmget(0x6d736461, 0) >= 0}
'''


def _call(module, name, *args):
    return getattr(module, name)(*args)


@pytest.fixture(scope="module")
def judge_dir():
    """A folder every user may enter, with a judge-only file and a public one beside it."""
    folder = Path(tempfile.mkdtemp(prefix="msda-judge-test-"))
    folder.chmod(0o755)
    for name in ("secret", "public"):
        sub = folder / name
        sub.mkdir()
        sub.chmod(0o755)
        (sub / "answers.py").write_text("ANSWER = 42\n")
        (sub / "answers.py").chmod(0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def separated(judge_dir):
    from kit import separation_unavailable  # the judge's side only: this module is also a probe

    if separation_unavailable():
        pytest.skip(separation_unavailable())
    saved = {k: os.environ.get(k) for k in (sandbox.JUDGE_ONLY_ENV, sandbox.SEPARATE_ENV,
                                             "MSDA_GRADE_SEED")}
    os.environ[sandbox.JUDGE_ONLY_ENV] = str(judge_dir / "secret")
    os.environ[sandbox.SEPARATE_ENV] = "1"
    os.environ["MSDA_GRADE_SEED"] = "instructor-secret"
    path = judge_dir / "lab99.py"
    path.write_text(textwrap.dedent(SUBMISSION))
    ex = Executor(path, default_timeout=20)
    try:
        ex.start("cpu")
        yield ex
    finally:
        ex.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _processes(uid: int, parent: int) -> list[str]:
    """The processes that run as ``uid`` or whose parent is ``parent`` (a zygote)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if str(uid) in fields.get("Uid", "").split() or fields.get("PPid", "").strip() == \
                str(parent):
            found.append(f"{entry} {fields.get('Name', '').strip()}")
    return found


def _run(ex, *args):
    out = ex.run(_call, *args)
    assert out.kind == "ok", (out.kind, out.message, out.output)
    return out.value


@needs_root
def test_the_child_is_another_user_with_limits(separated):
    me = _run(separated, "whoami")
    uid = separated.separation["uid"]
    assert separated.separation["separated"] is True and uid >= sandbox.UID_BASE
    assert me["ids"] == [uid] * 6 and me["groups"] == []
    assert me["nnp"] == "1" and me["core"] == 0 and 0 < me["fsize"] <= 64 << 30
    assert me["cwd"] == me["home"] == me["tmp"]
    # it still imports what nobody imported before it (the interpreter's folders are reachable,
    # through the worker's mount namespace where one of them is closed to other users)
    assert _run(separated, "lazy_imports") == ["fractions", "secrets", "wave"]


@needs_root
def test_the_child_cannot_read_judge_only_files(separated, judge_dir):
    import msda_labs.truth

    assert _run(separated, "read", str(judge_dir / "public" / "answers.py")) == "ANSWER = 42\n"
    assert _run(separated, "read", str(judge_dir / "secret" / "answers.py")) == "PermissionError"
    truth = Path(msda_labs.truth.__file__).parent / "reference.py"
    assert _run(separated, "read", str(truth)) == "PermissionError"


@needs_root
def test_the_child_cannot_reach_the_judge(separated):
    judge = os.getpid()
    _run(separated, "whoami")  # the worker is up: its separation is known
    # In its own PID namespace the judge is not even there; elsewhere it is out of reach.
    hidden = separated.separation.get("private") and "PID" not in separated.separation.get(
        "world", "")
    refused = ("ProcessLookupError",) if hidden else ("PermissionError",)
    unreadable = ("FileNotFoundError",) if hidden else ("PermissionError",)
    assert _run(separated, "signal_judge", judge) in refused
    assert _run(separated, "read", f"/proc/{judge}/environ") in unreadable
    assert _run(separated, "read", f"/proc/{judge}/mem") in unreadable


@needs_root
def test_the_child_writes_only_its_scratch(separated, judge_dir):
    # (OSError: a read-only file system, in the child's private world)
    assert _run(separated, "write", str(judge_dir / "public" / "grade.json")) in \
        ("PermissionError", "OSError")
    assert _run(separated, "write", "scratch.txt") == "written"  # its cwd is its scratch
    assert not (judge_dir / "public" / "grade.json").exists()


@needs_root
def test_nothing_of_the_child_outlives_its_request(separated):
    marker = f"/tmp/msda-sandbox-test-{os.getpid()}"
    _run(separated, "leave_behind", marker)  # the grandchild's pid, in the child's namespace
    uid, zygote = separated.separation["uid"], separated._zygotes["cpu"].info["pid"]
    deadline = time.monotonic() + 5
    while _processes(uid, zygote) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _processes(uid, zygote), "a setsid grandchild outlived its test"
    assert not Path(marker).exists()
    assert list(Path(separated._sandbox.plan()["run"]).iterdir()) == []


@needs_root
def test_nothing_a_child_writes_is_seen_by_the_next(separated, judge_dir):
    """A child writes into every world-writable folder, its scratch and its Triton cache, and
    makes a SysV segment. The next child of the same worker sees none of it but the cache (kept
    for the grading run), a child of a later grading of the same file (a regrade) sees nothing,
    and nothing of it is left on the disk."""
    folders = sandbox.world_writable_folders()
    assert {"/tmp", "/var/tmp", "/dev/shm"} <= set(folders)
    tag = f"planted-{os.getpid()}"
    wrote = _run(separated, "litter", folders, tag)
    assert separated.separation.get("private") is True, separated.separation
    assert len(wrote["wrote"]) == len(folders) + 2 and wrote["shm"], wrote  # all were writable
    # The Triton cache is the grading run's (its kernels compile once per run), the rest is not
    cache = os.path.join(separated._sandbox.plan()["triton"])
    assert _run(separated, "look", folders, tag) == {"seen": [cache], "cache": [tag],
                                                     "shm": False}
    assert not [f for f in folders if os.path.exists(os.path.join(f, tag))]
    with Executor(judge_dir / "lab99.py", default_timeout=20) as again:
        again.start("cpu")
        assert _run(again, "look", folders, tag) == {"seen": [], "cache": [], "shm": False}
    # Writes outside them fail: the rest of the file system is read-only in the child's world.
    assert _run(separated, "write", "/var/msda-planted") in ("PermissionError", "OSError")


@needs_root
def test_without_a_private_world_the_cleanup_still_holds(judge_dir, fast_tmp, monkeypatch):
    """Where the kernel refuses the namespaces (here turned off): the result says so, and the
    cleanup after each request still leaves the next child nothing but the run's Triton cache,
    also from a scratch shaped to break a recursive removal."""
    from msda_labs.grading.isolation import world

    for key, value in ((world.WORLD_ENV, "0"), (sandbox.SEPARATE_ENV, "1"),
                       (sandbox.JUDGE_ONLY_ENV, str(judge_dir / "secret"))):
        monkeypatch.setenv(key, value)
    folders = sandbox.world_writable_folders()
    tag = f"planted-{os.getpid()}"
    (judge_dir / "lab99.py").write_text(textwrap.dedent(SUBMISSION))
    with Executor(judge_dir / "lab99.py", default_timeout=30) as ex:  # its scratch on tmpfs
        ex.start("cpu")
        wrote = _run(ex, "litter", folders, tag)
        assert ex.separation["private"] is False and world.WORLD_ENV in ex.separation["world"]
        assert len(wrote["wrote"]) == len(folders) + 2 and wrote["shm"], wrote
        cache = ex._sandbox.plan()["triton"]
        assert _run(ex, "look", folders, tag) == {"seen": [cache], "cache": [tag], "shm": False}
        assert "d" in _run(ex, "shape_scratch")
        assert _run(ex, "look", folders, tag)["seen"] == [cache]
        assert list(Path(ex._sandbox.plan()["run"]).iterdir()) == []
        base = ex._sandbox.base
    assert not base.exists()


@needs_root
def test_the_worker_holds_no_seed_and_no_network(separated):
    interfaces = _run(separated, "whoami")["interfaces"]  # and the worker is up
    pid = separated._zygotes["cpu"].info["pid"]
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    names = {item.split(b"=", 1)[0] for item in environ}
    assert b"MSDA_GRADE_SEED" not in names and os.environ["MSDA_GRADE_SEED"]
    if separated.separation["netns"]:
        assert interfaces == ["lo"]
    else:  # e.g. a container without CAP_SYS_ADMIN: said in the result
        assert "not isolated" in separated.separation["network"]


@needs_root
def test_required_separation_fails_loudly_when_files_stay_readable(tmp_path, monkeypatch):
    monkeypatch.setenv(sandbox.SEPARATE_ENV, "1")
    monkeypatch.setattr(judgeonly, "hide", lambda paths: None)  # as if chmod had no effect
    public = Path(tempfile.mkdtemp(prefix="msda-judge-test-"))
    try:
        public.chmod(0o755)
        (public / "truth.py").write_text("X = 1\n")
        monkeypatch.setenv(sandbox.JUDGE_ONLY_ENV, str(public / "truth.py"))
        (tmp_path / "lab99.py").write_text("X = 1\n")
        with Executor(tmp_path / "lab99.py") as ex, \
                pytest.raises(InfrastructureError, match="separation is not in force"):
            ex.start("cpu")
    finally:
        shutil.rmtree(public, ignore_errors=True)


def test_required_separation_needs_root(tmp_path, monkeypatch):
    monkeypatch.setenv(sandbox.SEPARATE_ENV, "1")
    monkeypatch.setattr(sandbox, "is_root", lambda: False)
    (tmp_path / "lab99.py").write_text("X = 1\n")
    with Executor(tmp_path / "lab99.py") as ex, \
            pytest.raises(InfrastructureError, match="needs root"):
        ex.start("cpu")
    monkeypatch.setenv(sandbox.SEPARATE_ENV, "yes")
    with Executor(tmp_path / "lab99.py") as ex, pytest.raises(InfrastructureError, match="use 1"):
        ex.start("cpu")


# -- the salt ------------------------------------------------------------------------------------
def test_the_salt_is_stable_per_submission_and_differs_between_them(tmp_path, monkeypatch):
    a, b = b"def f(): return 1\n", b"def f(): return 1 \n"
    assert case_salt("s3cret", a) == case_salt("s3cret", a)
    assert case_salt("s3cret", a) != case_salt("s3cret", b)
    assert case_salt("s3cret", a) != case_salt("other", a)
    assert 0 <= case_salt("s3cret", a) < 1 << 63 and case_salt(None, a) == 0
    path = tmp_path / "lab99.py"
    path.write_bytes(a)
    seed_file = tmp_path / "seed"
    seed_file.write_text("s3cret\n")
    monkeypatch.delenv("MSDA_GRADE_SEED", raising=False)
    monkeypatch.setenv("MSDA_GRADE_SEED_FILE", str(seed_file))
    assert read_secret() == "s3cret" and read_secret(seed=7) == "7"
    monkeypatch.delenv("MSDA_GRADE_SEED_FILE")
    assert read_secret() is None


# -- the child-side contract -------------------------------------------------------------------
@pytest.mark.parametrize("line, culprit", [
    ("from msda_labs.truth.cases import make_inputs", "msda_labs.truth"),
    ("import test_lab99_fake", "test_lab99_fake"),
])
def test_the_worker_refuses_to_serve_with_judge_only_modules(tmp_path, monkeypatch, line,
                                                             culprit):
    monkeypatch.setenv(sandbox.SEPARATE_ENV, "0")  # the check holds with or without separation
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_lab99_fake.py").write_text("EXPECTED = 1\n")
    (tests / "probes_lab99.py").write_text(f"{line}\n\ndef probe(module):\n    return 1\n")
    (tmp_path / "lab99.py").write_text("X = 1\n")
    with Executor(tmp_path / "lab99.py", lab=99, preload=[str(tests / "probes_lab99.py")]) as ex, \
            pytest.raises(InfrastructureError, match="refuses to serve") as info:
        ex.start("cpu")
        ex.run(("msda_labs.grading.judge.submission", "", "imported_probe"))
    assert culprit in str(info.value) and "probes_lab99.py:1" in str(info.value)


def test_the_worker_refuses_the_labs_own_chip(tmp_path, monkeypatch):
    monkeypatch.setenv(sandbox.SEPARATE_ENV, "0")
    (tmp_path / "lab01.py").write_text("X = 1\n")
    with Executor(tmp_path / "lab01.py", lab=1, preload_modules=["msda_labs.chips.lab00"]) as ex:
        assert ex.run(("msda_labs.grading.judge.submission", "", "imported_probe")).value is True
    with Executor(tmp_path / "lab01.py", lab=1, preload_modules=["msda_labs.chips.lab01"]) as ex, \
            pytest.raises(InfrastructureError, match="msda_labs.chips.lab01"):
        ex.run(("msda_labs.grading.judge.submission", "", "imported_probe"))


# -- the report's line ---------------------------------------------------------------------------
def _session(separation):
    from types import SimpleNamespace

    from msda_labs.grading.judge.plugin import GradingSession

    gs = GradingSession.__new__(GradingSession)
    gs.lab, gs.title, gs.submission = "lab99", "", None
    gs.tasks, gs.order, gs.records, gs.notes = {}, [], {}, []
    gs.speed, gs.gpu_points, gs.items, gs.job = [], {}, [], None
    gs._executor = SimpleNamespace(separation=separation)
    return gs


def test_an_unseparated_grade_says_it_is_feedback_only():
    from msda_labs.grading.judge.results import GradeResult

    laptop = _session({"separated": False, "why": "the grader does not run as root"}).result()
    assert laptop.notes == [sandbox.FEEDBACK_ONLY] and not laptop.separation["separated"]
    graded = _session({"separated": True, "uid": 64001, "netns": True}).result()
    assert graded.notes == [] and graded.separation["uid"] == 64001
    again = GradeResult.from_dict(graded.to_dict())
    assert again.separation == {"separated": True, "uid": 64001, "netns": True}
    assert graded.merge(laptop).separation["separated"] is False  # the weaker stage counts


def test_the_gradescope_zip_carries_the_seed_for_root_only(tmp_path):
    import zipfile

    from msda_labs.cli import main

    seed = tmp_path / "seed"
    seed.write_text("term-secret\n")
    target = tmp_path / "gs.zip"
    assert main(["export", "lab01", "--gradescope", str(target),
                 "--gradescope-seed-file", str(seed)]) == 0
    with zipfile.ZipFile(target) as zf:
        info = zf.getinfo("msda_grade_seed")
        assert (info.external_attr >> 16) & 0o777 == 0o600
        assert zf.read(info).decode().strip() == "term-secret"
        script = zf.read("gradescope_grade.py").decode()
    assert 'setdefault("MSDA_SEPARATE", "1")' in script and "MSDA_GRADE_SEED_FILE" in script


# -- cleanup: a tree a child shaped never stops a grading ------------------------------------
def _hostile_tree(top: Path, depth: int = 3000, width: int = 3000) -> None:
    """What a child can leave in its scratch: a chain of folders ``depth`` deep (past PATH_MAX and
    Python's recursion limit), a folder of ``width`` files, symlinks in loops and out of the
    tree, folders and files without permissions for their owner, a socket and a FIFO."""
    import socket

    fd = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    (top / "wide").mkdir()
    for i in range(width):
        (top / "wide" / f"f{i}").touch()
    (top / "links").mkdir()
    for name, target in (("up", ".."), ("root", "/"), ("self", "self"), ("a", "b"), ("b", "a")):
        os.symlink(target, top / "links" / name)
    (top / "closed" / "inner").mkdir(parents=True)
    (top / "closed" / "inner" / "file").write_text("x")
    (top / "closed" / "inner" / "file").chmod(0)
    (top / "closed" / "inner").chmod(0)
    (top / "closed").chmod(0)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(top / "sock"))
    os.mkfifo(top / "fifo")


@pytest.fixture
def fast_tmp(monkeypatch):
    """A temporary folder on tmpfs where there is one (removing 3,000 folders one by one on a
    disk mounted with ``discard`` takes seconds), made the process's temporary folder."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    folder = Path(tempfile.mkdtemp(prefix="msda-cleanup-test-", dir=base))
    folder.chmod(0o711)  # a child passes through it to its scratch, as through /tmp
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    sandbox.remove_tree(folder)  # (shutil.rmtree recurses once per level)


def test_removal_survives_any_tree_a_child_can_shape(fast_tmp):
    top = fast_tmp / "scratch"
    top.mkdir()
    _hostile_tree(top)
    # the walk goes down as far as a path can name (PATH_MAX), without recursion
    assert len(sandbox.walk_tree(top)) > 4000
    assert sandbox.remove_tree(top) is True and not os.path.lexists(top)
    assert sandbox.remove_tree(top) is True  # already gone
    plan = {"run": str(top), "uid": os.geteuid()}
    top.mkdir()
    _hostile_tree(top, depth=500, width=10)
    (fast_tmp / "shared").mkdir()
    sandbox.clean(plan, folders=[str(fast_tmp / "shared")])  # never raises; a fresh scratch
    assert top.is_dir() and list(top.iterdir()) == []


def _free_slots(count: int) -> list[int]:
    """The first ``count`` sandbox slots no executor holds now (their lock files are free)."""
    import fcntl

    free = []
    for slot in range(sandbox._SLOTS):
        fd = os.open(sandbox._lock_dir() / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            free.append(slot)
        except OSError:
            continue
        finally:
            os.close(fd)
        if len(free) == count:
            break
    return free


@needs_root
def test_a_stale_sandbox_never_blocks_the_next(fast_tmp):
    """An executor that died (or a removal that failed) leaves its folder behind, shaped by the
    child: the next sandbox of that slot moves it out of the way, removes it, and starts fresh."""
    # Other gradings on this machine hold slots, and take and give them back while this runs: a
    # stale folder goes to every slot up to the fourth free one, so that the slot the next
    # sandbox takes has one, whichever it is. (They lie in this test's own temporary folder.)
    planted = list(range(max(_free_slots(4)) + 1))
    for slot in planted:
        (fast_tmp / f"msda-sandbox-{slot}-stale" / "run").mkdir(parents=True)
        _hostile_tree(fast_tmp / f"msda-sandbox-{slot}-stale" / "run", width=10)
    second = sandbox.Sandbox.open()
    try:
        stale = fast_tmp / f"msda-sandbox-{second.slot}-stale"
        assert second.slot in planted and second.base.parent == fast_tmp
        assert second.run_dir.is_dir() and list(second.run_dir.iterdir()) == []
        assert not stale.exists() and not list(fast_tmp.glob(f".msda-discarded-{second.slot}-*"))
        _hostile_tree(second.run_dir, depth=3000, width=10)  # and the same in its own scratch
    finally:
        second.close()
    assert not second.base.exists() and not list(fast_tmp.glob(f".msda-discarded-{second.slot}-*"))


def test_the_private_world_binds_back_only_what_a_child_must_read(monkeypatch):
    """Which entries of each world-writable folder a child's world shows, and where the world is
    on (no root needed)."""
    from msda_labs.grading.isolation import world

    plan = {"uid": 64001, "gid": 64001, "run": "/tmp/msda-sandbox-1-ab/run",
            "triton": "/tmp/msda-sandbox-1-ab/triton"}
    spec = world.plan_world(plan, ["/tmp", "/var/tmp", "/tmp/open"],
                            ["/tmp/msda-regrade-x/work/shared/msda_labs/student", "/usr/lib"])
    assert spec["keep"] == {"/tmp": ["msda-regrade-x", "msda-sandbox-1-ab"], "/var/tmp": [],
                            "/tmp/open": []}
    assert spec["writable"] == ["/tmp/msda-sandbox-1-ab/triton"] and spec["uid"] == 64001
    assert world._unescape("/mnt/with\\040space\\011tab") == "/mnt/with space\ttab"
    monkeypatch.delenv(world.WORLD_ENV, raising=False)
    assert world.wanted() == "" and "gpu" in world.wanted(gpu=True)
    monkeypatch.setenv(world.WORLD_ENV, "1")
    assert world.wanted(gpu=True) == ""
    monkeypatch.setenv(world.WORLD_ENV, "0")
    assert world.wanted() == world.wanted(gpu=True) == f"{world.WORLD_ENV}=0"
