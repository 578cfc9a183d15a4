"""Whatever a checkout holds at whatever path the judge reads, the judge's reading of it is
bounded, reports it, and still finds the student's ``labNN.py``.

The generator (``odd_checkouts``) takes a lab's real export with the chip as ``labNN.py``, picks
a path the judge reads (every grading file the export lists, the other root files that grade,
``.msda/template.txt``, ``.msda/integrity.sha256``, ``labNN.py``), picks one component of that
path (the file itself or a folder on its way), and puts there one of: a FIFO, a socket, a
character device (or, where ``mknod`` is refused, a link to ``/dev/zero``), links to
``/dev/zero``, to ``/proc/self/pagemap``, to a file and to a folder outside the checkout, a
dangling link, a link to itself, a sparse file of 64 GiB, a tree deeper than the reader enters,
and the original file with mode 000. The whole of what the regrade reads of a checkout
(:func:`msda_labs.classroom.regrade.survey_checkout`) runs in a forked child under an alarm and
an address-space limit, so a reading that blocks or grows fails the property instead of
hanging the suite. ``max_examples=70`` (derandomized); about 15 s.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import stat
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit import MANIFEST, chip_path

from msda_labs.classroom.export import export_lab
from msda_labs.classroom.regrade import survey_checkout
from msda_labs.grading.isolation import studentfiles
from msda_labs.grading.judge import integrity

LAB = "lab03"
KINDS = ("fifo", "socket", "device", "link /dev/zero", "link /proc/self/pagemap",
         "link outside file", "link outside folder", "dangling link", "looping link",
         "sparse 64 GiB", "deep tree", "mode 000")
SECONDS = 5.0  # for everything the judge reads of one checkout
MEMORY = 1 << 30  # bytes of address space beyond what the child starts with


@pytest.fixture(scope="module")
def lab_export(tmp_path_factory):
    base = tmp_path_factory.mktemp("studentfiles")
    pristine = export_lab(MANIFEST, MANIFEST.lab(LAB), base / "export")
    honest = base / "honest"
    shutil.copytree(pristine, honest, symlinks=True)
    shutil.copy(chip_path(LAB), honest / f"{LAB}.py")
    return pristine, honest


def _judged_paths(pristine: Path) -> list[str]:
    listed = integrity.read_manifest(pristine / integrity.MANIFEST_PATH)
    return sorted({*listed, *integrity.GRADING_FILES, *integrity.ROOT_HOOKS,
                   integrity.TEMPLATE_PATH, integrity.MANIFEST_PATH, f"{LAB}.py"})


def _plant(path: Path, kind: str, outside: Path) -> None:
    original = path.read_bytes() if path.is_file() and not path.is_symlink() else b"x = 1\n"
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # the node of /dev/zero
        except OSError:
            path.symlink_to("/dev/zero")
    elif kind.startswith("link /"):
        path.symlink_to(kind[5:])
    elif kind == "link outside file":
        path.symlink_to(outside / "secret.txt")
    elif kind == "link outside folder":
        path.symlink_to(outside)
    elif kind == "dangling link":
        path.symlink_to(outside / "nothing" / "here")
    elif kind == "looping link":
        path.symlink_to(path.name)
    elif kind == "sparse 64 GiB":
        with open(path, "wb") as fh:
            fh.truncate(64 << 30)
    elif kind == "deep tree":
        deep = path.joinpath(*["d"] * (studentfiles.DEPTH_LIMIT + 4))
        deep.mkdir(parents=True)
        (deep / "leaf.py").write_bytes(original)
    elif kind == "mode 000":
        path.write_bytes(original)
        path.chmod(0)
    else:
        raise AssertionError(kind)


def _survey_bounded(checkout: Path, pristine: Path) -> dict:
    """survey_checkout in a forked child, under SECONDS and MEMORY: its summary, or what
    stopped it."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            os.close(read_fd)
            with open("/proc/self/statm") as fh:
                size = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(resource.RLIMIT_AS, (size + MEMORY, size + MEMORY))
            signal.alarm(int(SECONDS * 2))
            start = time.monotonic()
            survey = survey_checkout(checkout, pristine, LAB)
            out = {"seconds": time.monotonic() - start, "module": survey["module"] is not None,
                   "module_bytes": (survey["module"] or b"").decode("utf-8", "replace"),
                   "why": survey["why"], "odd": survey["odd"],
                   "changed": survey["found"]["changed"] + survey["found"]["missing"]}
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            out, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
        os.write(write_fd, json.dumps(out).encode())
        os._exit(code)
    os.close(write_fd)
    deadline = time.monotonic() + SECONDS * 3
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status = None
    with os.fdopen(read_fd, "rb") as fh:
        data = fh.read()
    if status is None:
        return {"error": f"no answer within {SECONDS * 3:g} s"}
    if os.WIFSIGNALED(status):
        return {"error": f"killed by signal {os.WTERMSIG(status)} (an alarm: it took over "
                         f"{SECONDS * 2:g} s)"}
    return json.loads(data) if data else {"error": f"no answer (exit {status})"}


@st.composite
def odd_checkouts(draw, paths: list[str]):
    rel = draw(st.sampled_from(paths))
    parts = rel.split("/")
    depth = draw(st.integers(min_value=1, max_value=len(parts)))
    return "/".join(parts[:depth]), draw(st.sampled_from(KINDS))


def test_odd_entries_at_every_judged_path_are_bounded_and_reported(lab_export, tmp_path_factory):
    pristine, honest = lab_export
    paths = _judged_paths(pristine)
    grading = set(integrity.read_manifest(pristine / integrity.MANIFEST_PATH))
    chip = chip_path(LAB).read_text()
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.txt").write_text("not the student's\n")
    tried: list[tuple[str, str]] = []

    @settings(max_examples=70, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(odd_checkouts(paths))
    def prop(case):
        target, kind = case
        tried.append(case)
        checkout = tmp_path_factory.mktemp("odd") / "student"
        shutil.copytree(honest, checkout, symlinks=True)
        try:
            _plant(checkout / target, kind, outside)
            seen = _survey_bounded(checkout, pristine)
        finally:
            for folder, dirs, _ in os.walk(checkout):
                for name in dirs:
                    os.chmod(os.path.join(folder, name), 0o755)
            shutil.rmtree(checkout.parent, ignore_errors=True)
        assert "error" not in seen, f"{kind} at {target}: {seen['error']}"
        assert seen["seconds"] < SECONDS, f"{kind} at {target}: {seen['seconds']:.1f} s"
        harmless = kind == "mode 000" and os.geteuid() == 0  # root reads a file of mode 000
        if target == f"{LAB}.py":
            if not harmless:
                assert not seen["module"], f"{kind} as {LAB}.py was read"
                assert seen["why"], seen
        else:  # graded on labNN.py alone, whatever is beside it
            assert seen["module"] and seen["module_bytes"] == chip, f"{kind} at {target}"
        if not harmless:
            assert any(entry == target or entry.startswith((target + " (", target + "/"))
                       for entry in seen["odd"]), f"{kind} at {target} not reported: {seen}"
            if any(p == target or p.startswith(target + "/") for p in grading):
                assert any(p == target or p.startswith(target + "/")
                           for p in seen["changed"]), f"{kind} at {target} counted unchanged"

    prop()
    kinds = {kind for _, kind in tried}
    print(f"odd_checkouts: {len(tried)} examples, {len(kinds)} kinds, "
          f"{len({t for t, _ in tried})} paths")
    assert len(tried) >= 60 and kinds == set(KINDS)


def test_a_reader_refuses_a_swap_between_look_and_open(tmp_path, monkeypatch):
    """The file opened is the file looked at: a swap after the lstat is refused."""
    (tmp_path / "a.py").write_text("a = 1\n")
    (tmp_path / "b.py").write_text("b = 2\n")
    reader = studentfiles.Reader(tmp_path)
    real_open = os.open

    def swapping_open(path, flags, mode=0o777, *, dir_fd=None):
        if path == "a.py":
            os.replace(tmp_path / "b.py", tmp_path / "a.py")
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(studentfiles.os, "open", swapping_open)
    assert reader.read("a.py") is None
    assert reader.odd["a.py"] == "changed while it was opened"


def test_a_wide_tree_stops_at_the_entry_limit(tmp_path):
    for index in range(50):
        (tmp_path / f"f{index}").write_text("")
    reader = studentfiles.Reader(tmp_path, entry_limit=20)
    found, stopped = reader.walk()
    assert stopped and len(found) == 20 and "more than 20 entries" in reader.odd["."]
