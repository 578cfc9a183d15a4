"""No points for work that ignores its input: every degenerate answer scores 0 on its task.

The answers (tests/mutants/degenerate.yaml, planted by msda_labs.mistakes.degenerate) are zeros,
ones, a constant, the input echoed, a constant from the sizes alone, each constant bool or int,
a kernel storing a constant where the chip's kernel stores, an earlier lab's answer, another
function of the lab. Graded in rounds: one grading per round of a lab, each round planting at
most one answer per test (a planted answer runs the chip's code for its shape, with every other
planted answer passing through, so each answer is judged as if alone; APART keeps apart the few
functions whose tests reach each other outside a planted call). The by-hand examples of
``python labNN.py`` must call every answer wrong too, except those whose values are right,
computed by an earlier lab's method (``byhand: no``), which only the grader's spies can tell.
docs/degenerate.md has the audit.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from degenerate_run import answers
from kit import MUTANTS, ROOT, all_tests, chip_path, lab_ids, run_grade, starter_path

from msda_labs.authoring.handout import collect_rules, entry_tests, rules_map
from msda_labs.student.selfcheck import steps

# Functions whose answers never share a grading: a test of one reaches the other outside a
# planted answer's own call (lab 06: with the chip's msda_forward_autotuned, the kernel that
# make_autotuned_forward returns launches the chunked kernel from the test itself).
APART = {"lab06": {frozenset({"msda_forward_chunked_kernel", "make_autotuned_forward"})}}
BYHAND = Path(__file__).with_name("degenerate_byhand.py")


def _clash(a, b) -> bool:
    """Whether two answers' scopes share a test: the same task, unless both name disjoint
    ``tests`` of it."""
    for _task in set(a.tasks) & set(b.tasks):
        if not a.tests or not b.tests or set(a.tests) & set(b.tests):
            return True
    return False


def rounds(lab: str) -> list[list]:
    """The lab's answers in gradings: in each, no two answers whose scopes share a test."""
    pending = list(answers(lab))
    out = []
    while pending:
        batch = []
        for answer in list(pending):
            if any(_clash(answer, other) or
                   frozenset({answer.function, other.function}) in APART.get(lab, ())
                   for other in batch):
                continue
            batch.append(answer)
            pending.remove(answer)
        out.append(batch)
    return out


def _planted(lab: str, batch: list) -> str:
    source = chip_path(lab).read_text()
    for answer in batch:
        source = answer.apply(source)
    return source


def _scope(answer, result: dict) -> list[dict]:
    """The tests ``answer`` must fail: those of its tasks (of its ``tests``, where given)."""
    return [t for ex, t in all_tests(result) if ex["id"] in answer.tasks
            and (not answer.tests or t["name"].split("[")[0] in answer.tests)]


def test_every_graded_function_has_degenerate_answers():
    table = yaml.safe_load((MUTANTS / "degenerate.yaml").read_text())
    for lab in lab_ids():
        listed = {entry["function"].split(".")[0] for entry in table[lab]}
        stubs = {step.name for step in steps(int(lab[3:]))}
        assert stubs <= listed, f"{lab}: no degenerate answers for {sorted(stubs - listed)}"
        for answer in answers(lab):  # each applies to the chip (the function exists)
            answer.apply(chip_path(lab).read_text())
        assert starter_path(lab).is_file()


@pytest.mark.parametrize("lab", lab_ids())
def test_degenerate_answers_score_zero(lab, tmp_path):
    above, graded = [], 0
    mapped = _rows_naming_degenerate(lab)
    for i, batch in enumerate(rounds(lab)):
        path = tmp_path / f"round{i}" / f"{lab}.py"
        path.parent.mkdir()
        path.write_text(_planted(lab, batch))
        tasks = sorted({t for answer in batch for t in answer.tasks})
        result = run_grade(lab, submission=path, tasks=tasks)
        for answer in batch:
            scope = _scope(answer, result)
            graded += 1
            assert scope, f"{lab} {answer.id}: no graded test in its scope {answer.tasks}"
            scored = [f"{t['name']} {t['score']}/{t['max_score']}" for t in scope if t["score"]]
            if scored:
                above.append(f"{answer.id} ({answer.tasks}): {', '.join(scored)}")
            for row, tests in mapped.get(f"degenerate:{answer.id}", ()):
                lost = {t["name"].split("[")[0] for t in scope if t["score"] < t["max_score"]}
                assert lost & set(tests), (f"{lab} {answer.id} breaks the rule {row!r}, but lost "
                                           f"no points in its tests {tests}")
    assert not above, f"{lab}: degenerate answers scored above 0:\n" + "\n".join(above)
    assert graded == len(answers(lab))


def _rows_naming_degenerate(lab: str) -> dict:
    """{degenerate:<id>: [(row, tests), ...]} of the lab's rules-table map."""
    rules, _ = collect_rules(ROOT / _folder(lab))
    out = {}
    for entry in rules_map(ROOT).get(lab) or ():
        for mutant in entry.get("mutants") or ():
            if str(mutant).startswith("degenerate:"):
                out.setdefault(mutant, []).append((entry["row"], entry_tests(entry, rules)))
    return out


def _folder(lab: str) -> str:
    from kit import MANIFEST

    return MANIFEST.lab(lab).folder


# The by-hand examples, per mode: the plain-torch labs, the interpreter labs, lab 09 (AOT).
BYHAND_GROUPS = {
    "plain torch": ("lab00", "lab01", "lab02", "lab03", "lab07"),
    "interpreter": ("lab04", "lab05", "lab06", "lab08", "lab10"),
    "ahead of time": ("lab09",),
}


@pytest.mark.parametrize("group", BYHAND_GROUPS)
def test_by_hand_examples_call_every_degenerate_answer_wrong(group, tmp_path):
    jobs = []
    for lab in BYHAND_GROUPS[group]:
        named = {step.name for step in steps(int(lab[3:]))}
        for answer in answers(lab):
            step = answer.function.split(".")[0]
            if step not in named:  # a given wrapper: the by-hand check runs the student's parts
                continue
            if not answer.byhand:  # right values by another method: only the grader's spies see
                continue
            path = tmp_path / f"{lab}-{len(jobs)}" / f"{lab}.py"
            path.parent.mkdir()
            path.write_text(answer.apply(chip_path(lab).read_text()))
            jobs.append([lab, step, f"{lab} {answer.id}", str(path)])
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "MSDA_STAGE")}
    if group == "interpreter":
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "shared"), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "jobs.json"
        spec.write_text(json.dumps(jobs))
        proc = subprocess.run([sys.executable, str(BYHAND), str(spec)], capture_output=True,
                              text=True, timeout=900, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("DEGENERATE-JSON ")), None)
    assert proc.returncode == 0 and line, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(line.split(" ", 1)[1])
    assert len(results) == len(jobs)
    passed = [f"{name}:\n{report}" for name, (status, report) in results.items() if status == "ok"]
    assert not passed, "python labNN.py says these degenerate answers agree with the spec:\n" + \
        "\n".join(passed)


def test_the_audit_counts_what_is_tried():
    from degenerate_run import BEGIN, END, count_table

    text = (ROOT / "docs" / "degenerate.md").read_text()
    assert BEGIN in text and END in text, "docs/degenerate.md lost its table markers"
    table = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert table == count_table(), ("docs/degenerate.md's table of answers tried is stale: "
                                    "python tests/labs/degenerate_run.py --table prints it")


@pytest.mark.parametrize(("lab", "function", "answer", "tasks"), [
    ("lab01", "bilinear_sample", "real", ("1.1",)),
    ("lab08", "predict_racy_histogram", "real", ("8.1",)),
    ("lab04", "add_kernel", "zeros", ("4.1", "4.2", "4.3")),  # a kernel no test launches
    # The labs whose watched rules earn points only where the judge reads that the module cannot
    # reach the watch (rules.watch_untouched): the answer written into the source as plain code
    # passes that reading, so a 0 there is the answer's.
    ("lab00", "msda", "real", ("0.5",)),
    ("lab02", "flat_msda", "real", ("2.2",)),
    ("lab06", "forward_configs", "real", ("6.2",)),
    ("lab06", "make_autotuned_forward", "real", ("6.2",)),
    ("lab07", "grad_attention_weights", "real", ("7.1",)),
    ("lab09", "find_atomics", "real", ("9.1",)),
    ("lab10", "msda", "real", ("10.3", "10.4")),
    ("lab10", "MSDAFunction.forward", "real", ("10.1",)),
])
def test_a_planted_answer_that_keeps_the_chips_result_scores_full(lab, function, answer, tasks,
                                                                 tmp_path):
    # The control: the planting itself (the appended block, its imports, the wrapper, the
    # interpreter's patched stores; in the labs of PLAIN_LABS the rewritten body and its helpers)
    # costs nothing, so a 0 above is the answer's, not the harness's.
    from msda_labs.mistakes.library import Degenerate

    keep = Degenerate(lab, function, "named" if answer == "real" else answer, tasks,
                      expr="real" if answer == "real" else None)
    path = tmp_path / f"{lab}.py"
    path.write_text(keep.apply(chip_path(lab).read_text()))
    result = run_grade(lab, submission=path, tasks=tasks)
    assert result["score"] == result["max_score"] > 0, [
        (t["name"], t["message"][:200]) for _, t in all_tests(result)
        if t["score"] < t["max_score"]]
