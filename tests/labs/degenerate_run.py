"""Grade degenerate answers (tests/mutants/degenerate.yaml): each one, alone, on its tasks.

Used by the self-test (test_degenerate.py) and by hand, to measure the audit table of
docs/degenerate.md: ``python tests/labs/degenerate_run.py [labNN ...] [--json out.json]``
prints, for every answer, its score on each of its tasks and the grading's wall time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kit import MUTANTS, chip_path, lab_ids, run_grade  # noqa: E402

from msda_labs.mistakes import library  # noqa: E402


def answers(lab_id: str) -> list[library.Degenerate]:
    return library.degenerate(lab_id, MUTANTS)


BEGIN, END = "<!-- degenerate:begin -->", "<!-- degenerate:end -->"


def count_table() -> str:
    """The audit's table of what is tried: per lab and task, the degenerate answers, by function
    (docs/degenerate.md holds it between its markers; test_degenerate.py keeps it in step)."""
    lines = ["| lab | task | answers | functions (answers each) |", "|---|---|---:|---|"]
    total = 0
    for lab in lab_ids():
        per_task: dict[str, dict[str, int]] = {}
        for answer in answers(lab):
            for task in answer.tasks:
                fns = per_task.setdefault(task, {})
                fns[answer.function] = fns.get(answer.function, 0) + 1
        for task in sorted(per_task, key=lambda t: [int(x) for x in t.split(".")]):
            fns = per_task[task]
            listed = ", ".join(f"`{fn}` ({n})" for fn, n in fns.items())
            lines.append(f"| {lab} | {task} | {sum(fns.values())} | {listed} |")
        total += len(answers(lab))
    lines.append(f"| **all** | | **{total}** | (an answer whose function serves several tasks "
                 f"is counted in each) |")
    return "\n".join(lines)


def grade(answer: library.Degenerate) -> dict:
    """{task: [score, max score]} of ``answer`` graded alone on its tasks, and the wall time."""
    source = answer.apply(chip_path(answer.lab).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{answer.lab}.py"
        path.write_text(source)
        start = time.perf_counter()
        result = run_grade(answer.lab, submission=path, tasks=answer.tasks)
        seconds = time.perf_counter() - start
    scores, passing = {}, {}
    for ex in result["exercises"]:
        if ex["id"] not in answer.tasks:
            continue
        tests = [t for t in ex["tests"]
                 if not answer.tests or t["name"].split("[")[0] in answer.tests]
        scores[ex["id"]] = [sum(t["score"] for t in tests), sum(t["max_score"] for t in tests)]
        passing[ex["id"]] = [t["name"] for t in tests if t["score"] > 0]
    return {"scores": scores, "passing": passing, "seconds": round(seconds, 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("labs", nargs="*")
    parser.add_argument("--json")
    parser.add_argument("--table", action="store_true", help="print the audit's count table")
    args = parser.parse_args(argv)
    if args.table:
        print(count_table())
        return 0
    rows = []
    done = {}
    if args.json and Path(args.json).is_file():  # resume: keep what an earlier run measured
        rows = [r for r in json.loads(Path(args.json).read_text()) if "error" not in r]
        done = {(r["lab"], r["function"], r["answer"]) for r in rows}
    for lab in args.labs or lab_ids():
        for answer in answers(lab):
            if (lab, answer.function, answer.answer) in done:
                continue
            try:
                res = grade(answer)
            except AssertionError as exc:  # the grading itself failed (a broken grading file)
                rows.append({"lab": lab, "function": answer.function, "answer": answer.answer,
                             "error": str(exc)[-500:]})
                print(f"{lab} {answer.id:50s} GRADING FAILED: {str(exc)[-300:]}", flush=True)
                continue
            rows.append({"lab": lab, "function": answer.function, "answer": answer.answer,
                         **res})
            above = {t: s for t, s in res["scores"].items() if s[0] > 0}
            print(f"{lab} {answer.id:50s} {res['seconds']:6.1f}s "
                  f"{'ABOVE 0: ' + str(above) + ' ' + str(res['passing']) if above else 'ok'}",
                  flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
