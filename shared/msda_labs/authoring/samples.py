"""A handout's sample failure, produced by the grader and kept in step by ``sync``.

In a handout, a sample is a fenced ``text`` block right after a marker that names a planted bug
from the kit's mutant library (``tests/mutants/labNN.yaml``), the task to grade and the test whose
failure to show::

    <!-- sample: mutant=MUTANT task=4.1 test=TEST inputs=HASH out=HASH -->
    ```text
      Task 4.1   copy2d_kernel      1/5
          FAILED: test_copy_masks_the_column_tail: ...
    ```

``sync`` grades the chip with that bug planted (only that task, in a fresh process, with the
public cases) and writes what the grader's terminal report says: the task's line and the named
test's line, wrapped at 100 columns. The marker records two hashes: ``inputs`` (of everything that
can change the report: the planted submission, the lab's tests, the grading, truth, mistake and
student modules but those for running a lab by hand, the torch and triton versions) and ``out``
(of the block). ``sync --check`` is then cheap: when both still match, the block is what the
grader produces. When only the block differs it was edited by hand (drift); when the inputs
changed, it grades again and reports drift only if the report changed (``sync`` then records the
new hash).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from importlib import metadata
from pathlib import Path

__all__ = ["Sample", "find_samples", "planted_source", "inputs_hash", "render_sample",
           "sync_samples"]

MARKER = re.compile(
    r"<!-- sample: mutant=(?P<mutant>\S+) task=(?P<task>\S+) test=(?P<test>\S+) "
    r"inputs=(?P<inputs>\w+) out=(?P<out>\w+) -->\n```text\n(?P<body>.*?)```\n", re.S)
WIDTH = 100
# What can change a report, besides the planted submission and the lab's tests.
PACKAGES = ("grading", "truth", "mistakes", "student")
PUBLIC_CASES = ("MSDA_GRADE_SEED", "MSDA_CASE_SALT", "MSDA_STAGE", "TRITON_INTERPRET")


class Sample:
    """One marker and its block in a handout."""

    def __init__(self, match: re.Match):
        self.match = match
        self.mutant, self.task, self.test = match["mutant"], match["task"], match["test"]
        self.inputs, self.out, self.body = match["inputs"], match["out"], match["body"]

    def text(self, inputs: str, body: str) -> str:
        return (f"<!-- sample: mutant={self.mutant} task={self.task} test={self.test} "
                f"inputs={inputs} out={digest(body)} -->\n```text\n{body}```\n")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def find_samples(readme_text: str) -> list[Sample]:
    return [Sample(m) for m in MARKER.finditer(readme_text)]


def planted_source(root: Path, lab_id: str, chip_text: str, mutant_id: str) -> str:
    """The chip with the mutant ``mutant_id`` of the kit's library (``tests/mutants``) planted."""
    from msda_labs.mistakes import library

    folder = Path(root) / "tests" / "mutants"
    mutant = next((m for m in library.load(lab_id, folder, whole=False) if m.id == mutant_id),
                  None)
    if mutant is None:
        raise ValueError(f"{folder / (lab_id + '.yaml')}: no mutant {mutant_id!r} (a handout's "
                         f"sample names it)")
    return mutant.apply(chip_text)


def _by_hand(path: Path, package: Path) -> bool:
    """Whether ``path`` is one of the modules for running a lab by hand (the self-check and the
    student-facing spec): the grader never imports them, so they cannot change a report."""
    from msda_labs.grading.judge.rules import RUN_BY_HAND

    dotted = ".".join(("msda_labs", *path.relative_to(package).with_suffix("").parts))
    return any(dotted == m or dotted.startswith(m + ".") for m in RUN_BY_HAND)


def inputs_hash(lab_dir: Path, submission: str, what: str) -> str:
    """The hash of everything a sample's report depends on (``what``: the marker's mutant, task
    and test)."""
    package = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(what.encode())
    h.update(submission.encode())
    tests = Path(lab_dir) / "tests"
    files = [(p, p.relative_to(tests)) for p in sorted(tests.rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts]
    files += [(p, p.relative_to(package)) for name in PACKAGES
              for p in sorted((package / name).rglob("*.py")) if not _by_hand(p, package)]
    for path, name in files:
        h.update(str(name).encode())
        h.update(path.read_bytes())
    for dist in ("torch", "triton"):
        try:
            h.update(f"{dist}=={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist} absent".encode())
    return h.hexdigest()[:16]


def _grade(root: Path, lab_id: str, submission: str, task: str) -> dict:
    """Grade ``task`` of ``submission`` in a fresh process, with the public cases."""
    env = {k: v for k, v in os.environ.items() if k not in PUBLIC_CASES}
    with tempfile.TemporaryDirectory() as tmp:
        path, out = Path(tmp) / f"{lab_id}.py", Path(tmp) / "grade.json"
        path.write_text(submission)
        proc = subprocess.run([sys.executable, "-m", "msda_labs", "grade", lab_id, "--submission",
                               str(path), "--task", task, "--json", str(out)], cwd=root, env=env,
                              capture_output=True, text=True, timeout=900)
        if proc.returncode != 0 or not out.is_file():
            raise RuntimeError(f"grading the sample of {lab_id} failed (exit {proc.returncode}):"
                               f"\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        return json.loads(out.read_text())


def render_sample(result: dict, task: str, test: str) -> str:
    """The task's line and the test's line of the grader's terminal report, wrapped."""
    from msda_labs.grading.judge.render import render_terminal
    from msda_labs.grading.judge.results import GradeResult

    graded = GradeResult.from_dict(result)
    text = render_terminal(graded)
    lines = text.splitlines()
    head = next((x for x in lines if x.startswith(f"  Task {task} ")), None)
    # The test's own line, as the grader wrote it: the report may fold it into a line shared by
    # the tests that name the same mistake, which would show the reader nothing of the message.
    failed = next((f"      {t.status.terminal}: {t.name}: {t.message or t.status}"
                   for ex in graded.exercises if ex.id == task for t in ex.tests
                   if t.name == test and not t.status.passed), None)
    if head is None or failed is None:
        raise ValueError(f"the grader's report has no failing {test} under Task {task}:\n{text}")
    wrapped = textwrap.fill(failed.strip(), WIDTH, initial_indent=" " * 6,
                            subsequent_indent=" " * 6, break_long_words=False,
                            break_on_hyphens=False)
    return f"{head.rstrip()}\n{wrapped}\n"


def sync_samples(lab_dir: Path, lab_id: str, chip_text: str, readme: Path,
                 check: bool = False) -> list[str]:
    """Bring every sample of ``readme`` in line with the grader; returns what differed."""
    text = readme.read_text()
    samples = find_samples(text)
    if not samples:
        return []
    root = Path(lab_dir).resolve().parent
    drift, pieces, last = [], [], 0
    for sample in samples:
        submission = planted_source(root, lab_id, chip_text, sample.mutant)
        inputs = inputs_hash(lab_dir, submission, f"{sample.mutant} {sample.task} {sample.test}")
        body = sample.body
        if inputs != sample.inputs:  # something the report depends on changed: grade again
            body = render_sample(_grade(root, lab_id, submission, sample.task), sample.task,
                                 sample.test)
        if body != sample.body or digest(sample.body) != sample.out:
            drift.append(f"{readme} (sample failure {sample.mutant}/{sample.test})")
        elif inputs != sample.inputs and not check:
            drift.append(f"{readme} (sample failure {sample.mutant}/{sample.test}: the same "
                         f"report, its inputs' new hash)")
        elif inputs != sample.inputs:
            print(f"note: {readme.name} of {lab_id}: the sample {sample.mutant}/{sample.test} is "
                  f"still what the grader reports, but its inputs changed, so this check graded it "
                  f"again; `python -m msda_labs sync` records the new hash", file=sys.stderr)
        pieces += [text[last:sample.match.start()], sample.text(inputs, body)]
        last = sample.match.end()
    new = "".join(pieces) + text[last:]
    if not check and new != text:
        readme.write_text(new)
    return drift
