"""The judge-only files, closed to a separated child's uid, and the preflight that proves it.

What a child must not read (:func:`judge_only_paths`): the ground truth, the mistake catalogue,
the chips, lab 10's kernels below lab 10, every lab's tests, the kit's own tests (the mutant
library) and git folders, the seed file, and what ``$MSDA_JUDGE_ONLY`` adds (a regrade's pristine
copy and output folder, the Gradescope autograder's source and results). :func:`hide` takes their
permissions for other users away (``chmod o-rwx``: on a grading machine the kit's files need no
other reader); :func:`preflight` forks a process of the child's uid that must fail to open each.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from msda_labs.grading.isolation import sandbox

__all__ = ["judge_only_paths", "hide", "preflight"]

_ANSWER_MODULES = ("shipped.py", "shipped_kernels.py")  # lab 10's kernels (answers to 05-08)


def judge_only_paths(lab_dir: Path | None, lab: int | None) -> list[Path]:
    """What a child must not read: the package's truth, mistakes and chips (and, below lab 10,
    the module with lab 10's kernels), the lab's tests; in the kit (the package's or the lab's)
    also every lab's tests, the kit's own tests (the mutant library) and its git folders; the
    seed file; and every path in $MSDA_JUDGE_ONLY."""
    import msda_labs

    package = Path(msda_labs.__file__).resolve().parent
    paths = [package / "truth", package / "mistakes", package / "chips"]
    # the student-facing spec and its self-check (grading.judge.rules.RUN_BY_HAND): run by hand only
    paths += [package / "student" / name for name in ("spec.py", "check.py", "selfcheck")]
    if lab is None or lab < 10:
        paths += [package / "student" / name for name in _ANSWER_MODULES]
    roots = [package.parent.parent]  # the kit (or an exported lab) this package belongs to
    if lab_dir is not None:
        lab_dir = Path(lab_dir).resolve()
        paths.append(lab_dir / "tests")
        roots.append(lab_dir.parent)
    for root in dict.fromkeys(roots):
        if (root / "classroom.yml").is_file() and (root / "shared" / "msda_labs").is_dir():
            paths += sorted(root.glob("lab-*/tests")) + [root / "tests", *_git_dirs(root)]
    extra = os.environ.get(sandbox.JUDGE_ONLY_ENV, "").split(os.pathsep)
    paths += [Path(p) for p in [*extra, os.environ.get("MSDA_GRADE_SEED_FILE", "")] if p.strip()]
    return [p for p in dict.fromkeys(paths) if p.exists()]


def _git_dirs(root: Path) -> list[Path]:
    """The kit's git folder (every file of every commit); for a worktree, the folder that its
    ``.git`` file points to and the main repository's."""
    dot = root / ".git"
    if not dot.is_file():
        return [dot]
    text = dot.read_text().strip()
    if not text.startswith("gitdir:"):
        return []
    gitdir = (root / text[len("gitdir:"):].strip()).resolve()
    found = [gitdir]
    common = gitdir / "commondir"
    if common.is_file():
        found.append((gitdir / common.read_text().strip()).resolve())
    return found


def hide(paths: list[Path]) -> None:
    """``chmod o-rwx`` each path: other users (a child's uid) can neither list nor read it."""
    for path in paths:
        mode = os.lstat(path).st_mode
        if not stat.S_ISLNK(mode) and mode & 0o007:
            os.chmod(path, stat.S_IMODE(mode) & ~0o007)


def _sample_files(paths: list[Path], per_dir: int = 3) -> list[str]:
    """Each path, and a few files inside each folder: what the preflight tries to open."""
    out = []
    for path in paths:
        out.append(str(path))
        if path.is_dir():
            found = 0
            for sub in sorted(path.rglob("*.py")):
                out.append(str(sub))
                found += 1
                if found == per_dir:
                    break
    return out


def preflight(plan: dict, paths: list[Path]) -> tuple[list[str], str]:
    """Try, as the child's uid, to open each judge-only path (and a few files inside each
    folder). Returns (what it could open, why the uid could not be taken: empty when it could)."""
    targets = _sample_files(paths)

    def opened() -> list[str]:
        found = []
        for target in targets:
            try:
                os.close(os.open(target, os.O_RDONLY))
                found.append(target)
            except OSError:
                pass
        return found

    answer = sandbox.ask_as_child(plan, opened)
    if answer is None:
        return [], "the preflight process returned nothing"
    if isinstance(answer, dict):
        return [], answer["drop_error"]
    return list(answer), ""
