"""Warm stems: a zygote forked from a stem is the zygote a cold start gives, and the stem serves
only what it can serve as a cold start would."""

import json
import os
import socket
import textwrap
import time

import pytest

from msda_labs.grading.isolation import stem
from msda_labs.grading.isolation.executor import Executor


def _facts(module):
    import os as os_
    import random
    import sys

    return {"env": {k: v for k, v in os_.environ.items() if k.startswith(("MSDA_", "TRITON_"))},
            "cwd": os_.getcwd(), "random": random.random(), "argv0": sys.argv[0],
            "main": sys.modules["__main__"].__spec__.name}


@pytest.fixture
def stems(tmp_path, monkeypatch):
    folder = tmp_path / "stems"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv(stem.STEMS_ENV, str(folder))
    yield folder
    stem.stop_all(folder)


def _submission(tmp_path):
    path = tmp_path / "lab99.py"
    path.write_text("def f():\n    return 1\n")
    return path


def test_a_forked_zygote_is_what_a_cold_start_gives(stems, tmp_path):
    seen = []
    for _ in range(2):
        with Executor(_submission(tmp_path), default_timeout=30,
                      env={"MSDA_CASE_SALT": f"salt-{len(seen)}"}) as ex:
            out = ex.run(_facts, mode="interpret")
            assert out.kind == "ok", out.message
            seen.append((out.value, type(ex._zygotes["interpret"].proc)))
    (first, kind1), (second, kind2) = seen
    assert kind1 is kind2 is stem.StemChild  # both from the one stem of the interpret mode
    assert len(list(stems.glob("*.sock"))) == 1
    # each request's own MSDA_ names, the mode's TRITON_INTERPRET, no stems folder for a child
    assert [seen["env"]["MSDA_CASE_SALT"] for seen in (first, second)] == ["salt-0", "salt-1"]
    assert first["env"]["TRITON_INTERPRET"] == "1" and stem.STEMS_ENV not in first["env"]
    assert first["main"] == "msda_labs.grading.isolation.zygote"  # run as python -m runs it
    assert first["random"] != second["random"]  # reseeded per zygote, as a new process is
    with Executor(_submission(tmp_path), default_timeout=30) as ex:
        os.environ.pop(stem.STEMS_ENV)
        cold = ex.run(_facts, mode="interpret")
        assert type(ex._zygotes["interpret"].proc) is not stem.StemChild
    assert (cold.value["main"], cold.value["argv0"]) == (first["main"], first["argv0"])
    # the child's folder: a scratch folder of its own either way (its name is drawn per run)
    assert os.path.basename(cold.value["cwd"]) == os.path.basename(first["cwd"])


def test_a_zygote_from_a_stem_dies_and_is_killed_as_a_cold_one(stems, tmp_path):
    path = tmp_path / "lab99.py"
    path.write_text(textwrap.dedent("""
        def f():
            return 1
    """))
    with Executor(path, default_timeout=30) as ex:
        assert ex.run(_facts).kind == "ok"
        zygote = ex._zygotes["cpu"]
        assert isinstance(zygote.proc, stem.StemChild) and zygote.alive()
        zygote.kill()
        assert not zygote.alive()
        assert ex.run(_facts).kind == "ok"  # a new zygote, forked again


def _request(path, payload: bytes, fds=()):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        socket.send_fds(sock, [payload], list(fds))
        sock.settimeout(30)
        reply = sock.recv(1 << 16)
    return json.loads(reply[4:])


def test_the_stem_refuses_what_it_cannot_serve_and_stays_up(stems, tmp_path):
    with Executor(_submission(tmp_path), default_timeout=30) as ex:
        assert ex.run(_facts).kind == "ok"
    (sock,) = stems.glob("*.sock")
    body = json.dumps({"args": ["--mode", "cpu"], "env": {}, "cwd": "/"}).encode()
    framed = len(body).to_bytes(4, "big") + body
    assert "three descriptors" in _request(sock, framed)["error"]
    assert "short message" in _request(sock, b"x")["error"]
    r, w = os.pipe()
    try:
        bad = json.dumps({"args": ["--mode", "cpu"], "env": {"A": 1}, "cwd": "/"}).encode()
        reply = _request(sock, len(bad).to_bytes(4, "big") + bad, [r, w, w])
        assert "--fd" in reply["error"] or "names to strings" in reply["error"]
    finally:
        os.close(r)
        os.close(w)
    with Executor(_submission(tmp_path), default_timeout=30) as ex:  # still serving
        assert ex.run(_facts).kind == "ok"
        assert isinstance(ex._zygotes["cpu"].proc, stem.StemChild)


def test_no_stem_from_a_folder_others_can_enter(tmp_path, monkeypatch):
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o755)
    monkeypatch.setenv(stem.STEMS_ENV, str(folder))
    with Executor(_submission(tmp_path), default_timeout=30) as ex:
        assert ex.run(_facts).kind == "ok"
        assert not isinstance(ex._zygotes["cpu"].proc, stem.StemChild)
    assert not list(folder.iterdir())


def test_a_stems_folder_at_any_depth_serves(tmp_path, monkeypatch):
    """A socket's address holds 107 bytes at most; the folder's own path may be longer."""
    folder = tmp_path / ("deep" * 30) / "stems"
    folder.mkdir(mode=0o700, parents=True)
    assert len(str(folder / ("x" * 20))) > 107
    monkeypatch.setenv(stem.STEMS_ENV, str(folder))
    try:
        with Executor(_submission(tmp_path), default_timeout=30) as ex:
            assert ex.run(_facts, mode="interpret").kind == "ok"
            assert type(ex._zygotes["interpret"].proc) is stem.StemChild
        assert len(list(folder.glob("*.sock"))) == 1
    finally:
        stem.stop_all(folder)


def test_a_stem_ends_when_its_socket_goes(stems, tmp_path):
    with Executor(_submission(tmp_path), default_timeout=30) as ex:
        assert ex.run(_facts).kind == "ok"
    (pid_file,) = stems.glob("*.pid")
    pid = int(pid_file.read_text())
    for sock in stems.glob("*.sock"):
        sock.unlink()
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            ended = os.waitpid(pid, os.WNOHANG)[0] == pid  # this process started it
        except ChildProcessError:
            ended = True
        if ended:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the stem outlived its socket")


def test_the_same_file_gets_the_same_grade_with_and_without_stems(tmp_path):
    """The lab 03 chip, and the chip with a planted slip, graded cold and from stems (the uid a
    child runs as is whichever was free)."""
    from kit import chip_path, mutants, run_grade  # not at the top: the zygote imports this file

    chip = chip_path("lab03").read_text()
    slip = next(m for m in mutants("lab03") if m.id == "cache_lines_128").apply(chip)
    for n, text in enumerate((chip, slip)):
        path = tmp_path / f"s{n}" / "lab03.py"
        path.parent.mkdir()
        path.write_text(text)
        warm = run_grade("lab03", submission=path)
        cold = run_grade("lab03", submission=path, warm=False, env={stem.STEMS_ENV: ""})
        for data in (warm, cold):
            data.pop("_stdout")
            data.pop("submission", None)
            for ex in data["exercises"]:
                for test in ex["tests"]:
                    test.pop("duration")
            data["separation"].pop("uid", None)
        assert warm == cold
