"""The same file always gets the same grade: a submission graded several times, unchanged, gets
the same verdict and points in every test.

Always on: the mutants whose verdict once depended on the run (a stray store of a kernel that
Triton's interpreter does not stop corrupted the heap of the process, and some runs crashed while
others passed): unmasked tails, and the paths where the student's own launcher allocates the
output. Opt-in (``MSDA_SAME_GRADE=all``, about an hour on two cores): every mutant of the
library, each graded three times; ``MSDA_SAME_GRADE=lab05,lab06`` picks labs.
"""

import os
from pathlib import Path

import pytest
from kit import all_mutants, all_tests, chip_path, mutants, run_grade

RUNS = 3

# (lab, mutant id, tasks graded): a stray store past an output, through the kernel probes and
# through the wrapper that allocates its own output.
FLAKY_KINDS = (
    ("lab05", "unmasked_tail", ("5.4",)),
    ("lab06", "store_without_mask_q", ("6.1",)),
)


def _verdicts(result: dict) -> dict[str, tuple[str, int]]:
    return {test["name"]: (test["status"], test["score"]) for _, test in all_tests(result)}


def _assert_same_grade(lab: str, source: str, tasks, tmp_path: Path, label: str) -> None:
    path = tmp_path / f"{lab}.py"
    path.write_text(source)
    # Each run a fresh `python -m msda_labs grade` (not the warm grading server, whose forks
    # share one hash seed): the same file must grade the same from a cold start every time.
    runs = [run_grade(lab, submission=path, tasks=tasks, warm=False) for _ in range(RUNS)]
    first = _verdicts(runs[0])
    assert first, f"{label}: no test was graded"
    for n, result in enumerate(runs[1:], start=2):
        again = _verdicts(result)
        changed = {name: (first.get(name), again.get(name)) for name in set(first) | set(again)
                   if first.get(name) != again.get(name)}
        assert not changed, (f"{label}: grading run {n} differs from run 1 in "
                             f"{len(changed)} tests: {changed}")
        assert result["score"] == runs[0]["score"], label


def _mutant(lab: str, mutant_id: str):
    found = [m for m in mutants(lab) if m.id == mutant_id]
    assert found, f"no mutant {mutant_id} in {lab}'s library"
    return found[0]


@pytest.mark.parametrize(("lab", "mutant_id", "tasks"), FLAKY_KINDS,
                         ids=[f"{lab}-{mid}" for lab, mid, _ in FLAKY_KINDS])
def test_stray_stores_grade_the_same_every_run(lab, mutant_id, tasks, tmp_path):
    mutant = _mutant(lab, mutant_id)
    _assert_same_grade(lab, mutant.apply(chip_path(lab).read_text()), tasks, tmp_path,
                       f"mutant {lab}/{mutant_id}")


def _opted_in() -> set[str] | None:
    wanted = os.environ.get("MSDA_SAME_GRADE", "").strip()
    if not wanted:
        return None
    return {m.lab for m in all_mutants()} if wanted == "all" else set(wanted.split(","))


@pytest.mark.parametrize("mutant", all_mutants(), ids=lambda m: f"{m.lab}-{m.id}")
def test_every_mutant_grades_the_same_every_run(mutant, tmp_path):
    labs = _opted_in()
    if labs is None:
        pytest.skip("opt-in (about an hour on two cores): MSDA_SAME_GRADE=all, or a list of labs")
    if mutant.lab not in labs:
        pytest.skip(f"{mutant.lab} is not in MSDA_SAME_GRADE")
    _assert_same_grade(mutant.lab, mutant.apply(chip_path(mutant.lab).read_text()),
                       mutant.tasks, tmp_path, f"mutant {mutant.lab}/{mutant.id}")
