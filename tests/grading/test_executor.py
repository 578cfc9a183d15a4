"""Isolation: what a submission does in its process cannot reach the judge."""

import textwrap
import time

import pytest
import torch

from msda_labs.grading.isolation.executor import Executor


def _value(module, name):
    return getattr(module, name)()


@pytest.fixture
def make_sub(tmp_path):
    def make(body: str):
        path = tmp_path / "lab99.py"
        path.write_text(textwrap.dedent(body))
        return Executor(path, default_timeout=10)
    return make


def test_ok_returns_tensors(make_sub):
    with make_sub("import torch\ndef f(): return {'a': torch.ones(2), 'b': (1, 2.5, 'x')}\n") as ex:
        out = ex.run(_value, "f")
    assert out.kind == "ok"
    assert torch.equal(out.value["a"], torch.ones(2)) and out.value["b"] == (1, 2.5, "x")


def test_not_implemented_and_errors(make_sub):
    with make_sub("def f(): raise NotImplementedError('Task 9.1: f')\n"
                  "def g(): return 1 / 0\n"
                  "def h():\n    import sys\n    sys.exit(3)\n") as ex:
        assert ex.run(_value, "f").kind == "not_attempted"
        err = ex.run(_value, "g")
        assert err.kind == "error"
        assert "ZeroDivisionError" in err.message and "line 2" in err.message
        ex_h = ex.run(_value, "h")
        assert ex_h.kind == "error" and "exit()" in ex_h.message


def test_crash_and_signal_cost_one_request(make_sub):
    with make_sub("import os, signal\n"
                  "def boom(): os.kill(os.getpid(), signal.SIGSEGV)\n"
                  "def bye(): os._exit(0)\n"
                  "def ok(): return 7\n") as ex:
        assert ex.run(_value, "boom").kind == "crashed"
        assert ex.run(_value, "bye").kind == "crashed"
        assert ex.run(_value, "ok").value == 7


def test_timeout_kills_the_whole_session(make_sub, tmp_path):
    marker = tmp_path / "late"
    with make_sub(f"""
        import os, time
        def hang():
            if os.fork() == 0:
                time.sleep(3)
                open({str(marker)!r}, "w").write("grandchild survived")
                os._exit(0)
            while True:
                pass
        def ok(): return 1
        """) as ex:
        assert ex.run(_value, "ok").value == 1  # warm the worker: its start is not the test's
        start = time.monotonic()
        out = ex.run(_value, "hang", timeout=1)
        assert out.kind == "timeout" and time.monotonic() - start < 8
        assert ex.run(_value, "ok").value == 1
    time.sleep(3.5)
    assert not marker.exists(), "a grandchild outlived its test"


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_forged_payload_cannot_run_code_in_the_judge(make_sub, tmp_path):
    flag = tmp_path / "pwned"
    with make_sub(f"""
        import os, pickle, sys
        class Evil:
            def __reduce__(self):
                return (os.system, ("touch {flag}",))
        def f():
            return Evil()
        def g():
            # Defeat the child's own sanitizer and serializer: a raw pickle goes to the judge.
            zyg = sys.modules["__main__"]  # the worker runs as python -m ...
            zyg._sanitize = lambda obj, depth=0: obj
            import torch
            torch.save = lambda obj, buf: pickle.dump(obj, buf)
            return Evil()
        """) as ex:
        out = ex.run(_value, "f")
        assert out.kind == "ok" and isinstance(out.value, dict) and "__unsupported__" in out.value
        forged = ex.run(_value, "g")
    assert forged.kind == "crashed" and "cannot read" in forged.message
    assert not flag.exists()


def test_killing_the_worker_is_survived(make_sub):
    with make_sub("import os, signal\n"
                  "def kill_parent(): os.kill(os.getppid(), signal.SIGKILL)\n"
                  "def ok(): return 5\n") as ex:
        out = ex.run(_value, "kill_parent")
        if ex.separation["separated"]:  # a child of another uid may not signal the worker
            assert out.kind == "error" and "PermissionError" in out.message
        else:  # the worker died and was restarted; this request counts as crashed
            assert out.kind == "crashed"
        assert ex.run(_value, "ok").value == 5


def test_stdout_is_captured_not_trusted(make_sub):
    with make_sub("def f():\n    print('Total 99/99 passed')\n    return 0\n") as ex:
        out = ex.run(_value, "f")
    assert out.value == 0 and "99/99" in out.output


def test_credentials_do_not_reach_student_code(make_sub, monkeypatch):
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-very-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret")
    monkeypatch.setenv("MSDA_GRADE_SEED", "the-instructors-secret")
    monkeypatch.setenv("MSDA_GRADE_SEED_FILE", "/somewhere/seed")
    monkeypatch.setenv("MSDA_CASE_SALT", "12345")
    monkeypatch.setenv("MSDA_HARMLESS", "visible")
    with make_sub("import os\ndef f(): return dict(os.environ)\n") as ex:
        env = ex.run(_value, "f").value
    assert "MODAL_TOKEN_SECRET" not in env and "GITHUB_TOKEN" not in env
    assert "MSDA_GRADE_SEED" not in env and "MSDA_GRADE_SEED_FILE" not in env
    assert env.get("MSDA_CASE_SALT") == "12345"  # the salt is for the child; the seed is not
    assert env.get("MSDA_HARMLESS") == "visible"


def test_printed_workflow_commands_are_defused(make_sub):
    with make_sub("import sys\n"
                  "def f():\n"
                  "    print('::error file=lab99.py::forged')\n"
                  "    print('  ::set-output name=score::99\\r::notice::x')\n"
                  "    print('text ##[error]forged')\n"
                  "    return 0\n"
                  "def g(): raise ValueError('first\\n::error::forged')\n"
                  "def h():\n"
                  "    print('::error::last words')\n"
                  "    sys.stdout.flush()\n"
                  "    import os; os._exit(3)\n") as ex:
        out = ex.run(_value, "f")
        err = ex.run(_value, "g")
        crash = ex.run(_value, "h")
    lines = out.output.splitlines() + err.message.splitlines() + crash.message.splitlines()
    assert lines and not [line for line in lines if line.lstrip().startswith("::")]
    assert "##[" not in out.output and "forged" in out.output
    assert "\n" not in err.message and "last words" in crash.message
