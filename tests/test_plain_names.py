"""The kit says what its code does, not which work item or working session made it.

Every file git tracks is read (its path and, for text files, every line). A reference to one of
the kit's own work items ("issue" or "session" followed by a number, in any spelling such as
``issue-N``, ``issues N-M``, ``sessionN``) or to a numbered working session (an ``s`` and two
digits standing alone, as in a file named ``probe-sNN.json``) fails the test, with the file, line
and words.

External citations stay. Another project's public issue or pull request is cited with its
address or its repository, on the same line as the words that name it:
``https://github.com/OWNER/REPO/issues/N`` (or ``/pull/N``, ``/discussions/N``) or
``OWNER/REPO#N``, where N is the same number. A bare "issue N" names this kit's tracker and
is not allowed; "Project #N" without the word "issue" is not matched at all.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A work item or a session with its number, in any of the spellings the docstring lists.
WORK_ITEM = re.compile(r"(?<![a-z0-9])(?:issues?|sessions?)[ _-]?#?(\d+)", re.IGNORECASE)
# A numbered working session on its own: sNN (not .s32 in PTX, %s16, or part of a longer word).
SESSION_TAG = re.compile(r"(?<![a-z0-9%.])s\d{2}(?![a-z0-9])", re.IGNORECASE)
# What makes a work-item match an external citation: a link to, or the short form of, an issue
# of another repository, carrying the number that was matched.
EXTERNAL = re.compile(
    r"github\.com/[\w.-]+/[\w.-]+/(?:issues|pull|discussions)/(\d+)|[\w.-]+/[\w.-]+#(\d+)")


def violations(text: str) -> list[tuple[int, str]]:
    """(line number, words) of every reference to a work item or session in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        cited = {a or b for a, b in EXTERNAL.findall(line)}
        for match in WORK_ITEM.finditer(line):
            if match.group(1) not in cited:
                found.append((number, match.group(0)))
        found.extend((number, m.group(0)) for m in SESSION_TAG.finditer(line))
    return found


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # an exported copy without .git
        pytest.skip(f"not a git checkout, no tracked files to read: {exc}")
    return [p for p in out.decode().split("\0") if p]


def test_no_tracked_file_names_a_work_item_or_a_session():
    problems = []
    for rel in _tracked():
        problems.extend(f"{rel} (path): {words!r}" for _, words in violations(rel))
        path = ROOT / rel
        if not path.is_file():  # deleted in the work tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary: images, archives
            continue
        text = data.decode("utf-8", errors="replace")
        problems.extend(f"{rel}:{line}: {words!r}" for line, words in violations(text))
    assert not problems, ("say what the code does instead of naming the work item or session "
                          "that made it:\n" + "\n".join(problems))


# The example lines are assembled at run time, so that this file does not name any itself.
ISSUE, SESSION, S = "iss" + "ue", "sess" + "ion", "s"


@pytest.mark.parametrize("line", [
    f"# the launch path ({ISSUE} 10): direct launches",
    f'"""The attack suite of {ISSUE.title()} 12: files a student could submit."""',
    f"see docs/results/h200-gpu-stages-after-{ISSUE}11.md",
    f"after the {ISSUE}s-10-15 merges",
    f"measured in {SESSION} 20, second call",
    f"scripts/device_{S}20_host.sh",
    f"bench-{S.upper()}18-before-after.json",
    f"GPU MODE reference-kernels {ISSUE} #162",
])
def test_the_check_catches_each_spelling(line):
    assert violations(line), line


@pytest.mark.parametrize("line", [
    "Classroom 50 #1019 (education/classroom50#1019) says the runner drops the score",
    f"reported upstream: https://github.com/triton-lang/triton/{ISSUE}s/5123 ({ISSUE} 5123)",
    f"gpu-mode/reference-kernels#162: the {ISSUE} 162 of the reference kernels",
    "cvt.rn.f32.s32 %r1, %r2;  ld.global.s16 %rs12, [%rd3];",
    f"the {SESSION}'s device time; {ISSUE}s from students; 32 {SESSION}s' worth",
    "sm90 s390x tests35 gs16",
])
def test_external_citations_and_ordinary_words_pass(line):
    assert violations(line) == [], line


def test_an_external_link_covers_only_its_own_number():
    line = f"https://github.com/a/b/{ISSUE}s/5 and our {ISSUE} 6"
    assert violations(line) == [(1, f"{ISSUE} 6")]
