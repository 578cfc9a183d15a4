"""The warm grading server (tests/gradeserver.py) gives what `python -m msda_labs grade` gives.

Each of these grades a submission twice, once from the warm server and once in a plain
subprocess, and compares the two results after normalising what differs from run to run of the
real command too (durations, the uid that separation claimed). The sample here is small (a mutant,
on its tasks, of a lab of each mode; a starter; a chip); `python tests/labs/test_grade_server.py
[N]` compares N mutants per lab by hand.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run by hand: the tests' helpers

import gradeserver  # noqa: E402
import pytest  # noqa: E402
from kit import ROOT, chip_path, lab_ids, mutants, run_grade, starter_path  # noqa: E402

# What differs between two runs of the real command on the same file: the seconds each test
# took, and the uid that separation claimed (a slot shared with the runs in parallel).
VARYING_KEYS = ("duration", "uid")


def normalised(result: dict):
    """``result`` without what varies from run to run (:data:`VARYING_KEYS`)."""
    if isinstance(result, dict):
        return {k: normalised(v) for k, v in result.items() if k not in VARYING_KEYS}
    if isinstance(result, list):
        return [normalised(v) for v in result]
    return result


def differences(a, b, where: str = "") -> list[str]:
    """Where two normalised results differ (paths into them), for a readable failure."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k), b.get(k), f"{where}/{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: warm {str(a)[:300]!r}, plain {str(b)[:300]!r}"]


def compare(lab: str, **kwargs) -> list[str]:
    """Grade once from the warm server and once in a subprocess; the differences."""
    before = gradeserver.server(ROOT)
    served = before.served
    warm = run_grade(lab, **kwargs)
    # from this server, or from a new one started because a kit file's time changed meanwhile
    # (the other test process's test_a_change_to_the_kits_code_gets_a_new_server)
    now = gradeserver.server(ROOT)
    assert gradeserver.plain_requested() or now.served == (served + 1 if now is before else 1), \
        "the warm grading did not come from the server"
    plain = run_grade(lab, warm=False, **kwargs)
    return differences(normalised(warm), normalised(plain))


# The sample of the self-test: one lab per place a submission's code runs (plain torch, Triton's
# interpreter, ahead-of-time compilation); the judge's side is the same code for every lab.
SAMPLE_LABS = ("lab01", "lab04", "lab09")


def sample(per_lab: int = 1, labs=None):
    """(lab, mutant) pairs: the first ``per_lab`` mutants of each lab's library."""
    return [(lab, m) for lab in (labs or lab_ids()) for m in mutants(lab)[:per_lab]]


@pytest.mark.parametrize(("lab", "mutant"), sample(labs=SAMPLE_LABS),
                         ids=lambda x: getattr(x, "id", x))
def test_a_mutant_grades_the_same_warm_and_plain(lab, mutant, tmp_path):
    path = tmp_path / f"{lab}.py"
    path.write_text(mutant.apply(chip_path(lab).read_text()))
    assert compare(lab, submission=path, tasks=mutant.tasks) == []


def test_a_starter_and_a_chip_grade_the_same_warm_and_plain():
    assert compare("lab02", submission=starter_path("lab02")) == []
    assert compare("lab03", solution=True, tasks=("3.1",)) == []


def _both(args: list[str], **kwargs):
    warm = gradeserver.run_warm("msda_labs", args, env=dict(os.environ), cwd=ROOT,
                                timeout=120, **kwargs)
    plain = subprocess.run([sys.executable, "-m", "msda_labs", *args], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    return warm, plain


def test_exit_status_and_output_are_the_commands():
    """A usage error (exit 2 from argparse), a kit error (exit 2, its message on stderr), and
    success with output (the help, exit 0): the same status and the same text either way."""
    for args in (["grade"], ["grade", "lab99"], ["grade", "--help"]):
        warm, plain = _both(args)
        assert (warm.returncode, warm.stdout, warm.stderr) == \
            (plain.returncode, plain.stdout, plain.stderr), args


def test_the_module_search_path_is_the_commands():
    """`python -m site` prints sys.path: the same from the warm server as from a new
    interpreter started in the same folder."""
    warm = gradeserver.run_warm("site", [], env=dict(os.environ), cwd=ROOT, timeout=60)
    plain = subprocess.run([sys.executable, "-m", "site"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert warm.returncode == plain.returncode == 0
    assert warm.stdout == plain.stdout


def test_another_environment_gets_another_server(monkeypatch):
    """A name read while the server imported (OMP_NUM_THREADS, by torch's native code: never
    free), a name removed, another folder: each needs a server started so. MSDA_ names that no
    preloaded module read are free, and so is the test's own name; MSDA_PLAIN_GRADE=1 sends the
    run to a plain subprocess."""
    server = gradeserver.server(ROOT)
    same = dict(os.environ)
    assert server.differences(same, str(ROOT)) == []
    assert server.differences({**same, "MSDA_SEPARATE": "1"}, str(ROOT)) == []
    # each test has its own PYTEST_CURRENT_TEST: one server serves them all (the image, started
    # without it, cannot have read it, even where an import walks the whole environment)
    assert server.differences({**same, "PYTEST_CURRENT_TEST": "another (call)"}, str(ROOT)) == []
    assert "PYTEST_CURRENT_TEST" not in server.env
    assert server.differences({**same, "OMP_NUM_THREADS": "1"}, str(ROOT))
    assert server.differences({k: v for k, v in same.items() if k != "PATH"}, str(ROOT))
    assert server.differences(same, str(ROOT / "shared"))
    served = server.served
    proc = gradeserver.run_cli(["grade", "lab99"], cwd=ROOT, env={"MSDA_SEPARATE": "1"})
    assert proc.returncode == 2 and server.served == served + 1
    proc = gradeserver.run_cli(["grade", "lab99"], cwd=ROOT, env={"OMP_NUM_THREADS": "1"})
    other = gradeserver.server(ROOT, {**same, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2 and other is not server and other.served == 1
    assert not server.alive() or server.proc.wait(timeout=30) is not None
    monkeypatch.setenv(gradeserver.PLAIN_ENV, "1")
    proc = gradeserver.run_cli(["grade", "lab99"], cwd=ROOT, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2 and other.served == 1
    assert "error: " in proc.stderr


def test_a_change_to_the_kits_code_gets_a_new_server():
    """A preloaded module edited during the run (its file's time changed here, then put back):
    the server refuses to serve from its stale image, and the run comes from a new server that
    loaded the file again, as a new interpreter would."""
    first = gradeserver.server(ROOT)
    module = ROOT / "shared" / "msda_labs" / "errors.py"
    stat = module.stat()
    try:
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        proc = gradeserver.run_cli(["grade", "lab99"], cwd=ROOT)
        second = gradeserver.server(ROOT)
    finally:
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        gradeserver.stop()  # its image has the time set above: the next test starts another
    assert proc.returncode == 2 and "error: " in proc.stderr
    assert second is not first and second.served == 1


def test_a_run_past_its_time_is_killed_as_the_subprocess_would_be(tmp_path):
    """The server kills a run that outlives its time and the client raises TimeoutExpired,
    as subprocess.run does; the server serves on."""
    with pytest.raises(subprocess.TimeoutExpired):
        gradeserver.run_warm("msda_labs", ["grade", "lab01", "--solution"],
                             env=dict(os.environ), cwd=ROOT, timeout=0.2)
    warm, plain = _both(["grade", "lab99"])
    assert warm.returncode == plain.returncode == 2


def main(argv: list[str]) -> int:
    """By hand: ``python tests/labs/test_grade_server.py [N]`` compares the first N mutants of
    every lab (default 3), every lab's starter and every lab's chip; prints each comparison."""
    per_lab = int(argv[0]) if argv else 3
    import tempfile

    jobs = [(lab, f"mutant {m.id}", {"source": m.apply(chip_path(lab).read_text()),
                                      "tasks": m.tasks}) for lab, m in sample(per_lab)]
    jobs += [(lab, "starter", {"submission": starter_path(lab)}) for lab in lab_ids()]
    jobs += [(lab, "chip", {"solution": True}) for lab in lab_ids()]
    failed = 0
    for lab, what, job in jobs:
        with tempfile.TemporaryDirectory() as tmp:
            kwargs = {k: v for k, v in job.items() if k != "source"}
            if "source" in job:
                path = Path(tmp) / f"{lab}.py"
                path.write_text(job["source"])
                kwargs["submission"] = path
            found = compare(lab, **kwargs)
        failed += bool(found)
        print(f"{lab} {what:45s} {'same' if not found else 'DIFFERENT: ' + '; '.join(found)}",
              flush=True)
    print(f"{len(jobs)} pairs compared, {failed} different")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
