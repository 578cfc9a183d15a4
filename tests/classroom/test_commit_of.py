"""The commit a gradebook row names is read from the checkout's repository as data: it agrees
with git on every ordinary repository, and an odd one (a FIFO, a link, a huge or forged file)
gives an empty commit at once instead of blocking the batch or running the student's git."""

import os
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msda_labs.classroom.regrade import commit_of

GIT = ["git", "-c", "user.name=s", "-c", "user.email=s@invalid", "-c", "init.defaultBranch=main"]


def _repo(folder: Path, commits: int = 1, branch: str = "main") -> Path:
    folder.mkdir(parents=True)
    subprocess.run([*GIT, "init", "-q", "-b", branch], cwd=folder, check=True)
    for i in range(commits):
        (folder / "lab03.py").write_text(f"x = {i}\n")
        subprocess.run([*GIT, "add", "-A"], cwd=folder, check=True)
        subprocess.run([*GIT, "commit", "-q", "-m", f"c{i}"], cwd=folder, check=True)
    return folder


def _git_head(folder: Path) -> str:
    proc = subprocess.run(["git", "-C", str(folder), "rev-parse", "--verify", "HEAD"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


_BRANCHES = st.lists(st.sampled_from(["main", "lab", "feature", "x1", "a-b", "v_2"]), min_size=1,
                     max_size=3).map("/".join)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(branch=_BRANCHES, commits=st.integers(0, 2), packed=st.booleans(),
       detached=st.booleans())
def test_agrees_with_git_on_ordinary_repositories(tmp_path_factory, branch, commits, packed,
                                                   detached):
    folder = _repo(tmp_path_factory.mktemp("repo") / "alice", commits, branch)
    if packed:
        subprocess.run(["git", "pack-refs", "--all"], cwd=folder, check=True)
    if detached and commits:
        subprocess.run(["git", "checkout", "-q", "--detach"], cwd=folder, check=True)
    assert commit_of(folder) == _git_head(folder)
    assert bool(commit_of(folder)) == bool(commits)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _link_out(path: Path) -> None:
    path.unlink()
    path.symlink_to("/etc/hostname")


def _huge(path: Path) -> None:
    path.write_bytes(b"ref: refs/heads/main" + b" " * (1 << 20))


def _escaping_ref(path: Path) -> None:
    path.write_text("ref: refs/../../../etc/hostname\n")


def _not_a_ref(path: Path) -> None:
    path.write_text("ref: HEAD\n")


def _forged(path: Path) -> None:
    path.write_text("not a commit\n")


@pytest.mark.parametrize("spoil", [_fifo, _link_out, _huge, _escaping_ref, _not_a_ref, _forged],
                         ids=lambda f: f.__name__.strip("_"))
def test_an_odd_head_gives_no_commit_at_once(tmp_path, spoil):
    folder = _repo(tmp_path / "mallory")
    spoil(folder / ".git" / "HEAD")
    start = time.monotonic()
    assert commit_of(folder) == ""
    assert time.monotonic() - start < 2  # git rev-parse blocks on a FIFO until its timeout


def test_a_loose_ref_that_is_a_fifo_and_a_git_file_give_no_commit(tmp_path):
    folder = _repo(tmp_path / "mallory")
    _fifo(folder / ".git" / "refs" / "heads" / "main")
    assert commit_of(folder) == ""
    other = tmp_path / "worktree"
    other.mkdir()
    (other / ".git").write_text(f"gitdir: {folder / '.git'}\n")  # a pointer is not followed
    assert commit_of(other) == ""
    assert commit_of(tmp_path / "absent") == ""
