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

from msda_labs.grading import judgeonly, sandbox
from msda_labs.grading.executor import Executor, InfrastructureError
from msda_labs.grading.secret import case_salt, export_salt, read_secret

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
    assert _run(separated, "signal_judge", judge) == "PermissionError"
    assert _run(separated, "read", f"/proc/{judge}/environ") == "PermissionError"
    assert _run(separated, "read", f"/proc/{judge}/mem") == "PermissionError"


@needs_root
def test_the_child_writes_only_its_scratch(separated, judge_dir):
    assert _run(separated, "write", str(judge_dir / "public" / "grade.json")) == \
        "PermissionError"
    assert _run(separated, "write", "scratch.txt") == "written"  # its cwd is its scratch
    assert not (judge_dir / "public" / "grade.json").exists()


@needs_root
def test_nothing_of_the_child_outlives_its_request(separated):
    marker = f"/tmp/msda-sandbox-test-{os.getpid()}"
    grandchild = _run(separated, "leave_behind", marker)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{grandchild}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{grandchild}").exists(), "a setsid grandchild outlived its test"
    assert not Path(marker).exists()
    assert list(Path(separated._sandbox.plan()["run"]).iterdir()) == []


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
    assert export_salt(path) == case_salt("s3cret", a) == int(os.environ["MSDA_CASE_SALT"])
    monkeypatch.delenv("MSDA_GRADE_SEED_FILE")
    assert export_salt(path) == 0 and os.environ["MSDA_CASE_SALT"] == "0"


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
        ex.run(("msda_labs.grading.submission", "", "imported_probe"))
    assert culprit in str(info.value) and "probes_lab99.py:1" in str(info.value)


def test_the_worker_refuses_the_labs_own_chip(tmp_path, monkeypatch):
    monkeypatch.setenv(sandbox.SEPARATE_ENV, "0")
    (tmp_path / "lab01.py").write_text("X = 1\n")
    with Executor(tmp_path / "lab01.py", lab=1, preload_modules=["msda_labs.chips.lab00"]) as ex:
        assert ex.run(("msda_labs.grading.submission", "", "imported_probe")).value is True
    with Executor(tmp_path / "lab01.py", lab=1, preload_modules=["msda_labs.chips.lab01"]) as ex, \
            pytest.raises(InfrastructureError, match="msda_labs.chips.lab01"):
        ex.run(("msda_labs.grading.submission", "", "imported_probe"))


# -- the report's line ---------------------------------------------------------------------------
def _session(separation):
    from types import SimpleNamespace

    from msda_labs.grading.plugin import GradingSession

    gs = GradingSession.__new__(GradingSession)
    gs.lab, gs.title, gs.submission = "lab99", "", None
    gs.tasks, gs.order, gs.records, gs.notes = {}, [], {}, []
    gs._executor = SimpleNamespace(separation=separation)
    return gs


def test_an_unseparated_grade_says_it_is_feedback_only():
    from msda_labs.grading.results import GradeResult

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
