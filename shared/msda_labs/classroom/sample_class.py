"""A synthetic class, graded: the folder a batch regrade writes, with known mistakes planted.

    python -m msda_labs.classroom.sample_class --students 60 --out DIR --labs lab01 lab05 lab08
                                              [--seed S] [--mutants DIR] [--planted K]
                                              [--cache DIR] [--jobs N]

Each student hands in, per lab, the untouched starter, the chip (the reference solution), or the
chip with one or two planted mistakes from the kit's mutant library (``tests/mutants/labNN.yaml``,
or ``--mutants DIR``). Per lab, ``K`` mutants that name their mistake (an ``expect`` phrase) are
drawn with the seed and given decreasing frequencies, so that the class has a most common mistake,
a second, and so on. A quarter of the students with a mistake get a second one, in another task,
from a pair whose graded feedback still names both (two mistakes in one function give an output
that matches neither; the second may be a rarer mistake of the library; a lab without such a
pair has none). Every distinct submission is graded once (``python -m msda_labs grade``, in a
subprocess, cached by the hash of the lab and the file's text under ``--cache``, default
``DIR/.cache``) and each student gets the result of their own file: the same file grades the
same.

``DIR`` then holds, per lab, ``labNN/regrade.json`` (the list ``regrade --batch --json`` writes)
and ``labNN/gradebook.csv``, and ``planted.json``: what each student was given, how many
students carry each mistake and the tests each mistake alone crashes or times out in (the truth
the insight page is tested against: every planted mistake, crashing or not, must be named).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from msda_labs.classroom.regrade import GradebookRow, write_gradebook
from msda_labs.errors import KitError
from msda_labs.grading.judge.results import GradeResult
from msda_labs.mistakes import library
from msda_labs.mistakes.library import Mutant, MutantError

__all__ = ["SampleClassError", "Mutant", "load_mutants", "plant", "make_class", "main"]

# The mix of a class: a share hands in the starter untouched, a share the chip, the rest the chip
# with planted mistakes; of those, a share carries a second one.
STARTER_SHARE = 0.1
CHIP_SHARE = 0.25
SECOND_MISTAKE_SHARE = 0.25
# Distinct pairs of mistakes per lab: each distinct file is graded once, so a handful of pairs
# keeps a class of any size cheap to grade.
MAX_PAIRS = 3
MAX_PAIR_TRIES = 8


class SampleClassError(KitError, ValueError):
    """The sample class cannot be made (unknown lab, no mutant library, a grading failure)."""


def _kit_root() -> Path:
    from msda_labs.course.manifest import find_manifest

    return find_manifest().parent


def load_mutants(lab_id: str, folder: Path | None = None) -> list[Mutant]:
    """The lab's replacement mutants (``folder``: default the kit's ``tests/mutants``)."""
    folder = Path(folder) if folder else _kit_root() / "tests" / "mutants"
    if not (folder / f"{lab_id}.yaml").is_file():
        raise SampleClassError(f"no mutant library for {lab_id} at {folder / f'{lab_id}.yaml'} "
                               f"(pass --mutants DIR, a folder of labNN.yaml files)")
    return [m for m in library.load(lab_id, folder, whole=False) if m.replace]


def plant(chip: str, mutants: list[Mutant]) -> str | None:
    """The chip with every mutant applied, or None when they do not apply together."""
    source = chip
    for mutant in mutants:
        try:
            source = mutant.apply(source)
        except MutantError:
            return None
    return source


def _counts(total: int, planted: int) -> list[int]:
    """``total`` students over ``planted`` mistakes with weights K, K-1, ..., 1 (largest first)."""
    weights = list(range(planted, 0, -1))
    counts = [total * w // sum(weights) for w in weights]
    for i in range(total - sum(counts)):
        counts[i % planted] += 1
    return counts


def _assign(lab_id: str, students: list[str], mutants: list[Mutant], chip: str, planted: int,
            rng: random.Random, pair_ok) -> dict[str, list[str]]:
    """What each student hands in: ``["starter"]``, ``[]`` (the chip) or mutant ids."""
    named = [m for m in mutants if m.expect and plant(chip, [m]) is not None]
    # One mutant per named mistake: two mutants sharing an expect phrase would merge on the page.
    by_expect: dict[str, Mutant] = {}
    for mutant in rng.sample(named, len(named)):
        by_expect.setdefault(mutant.expect, mutant)
    chosen = list(by_expect.values())[:planted]
    if len(chosen) < 2:
        raise SampleClassError(f"{lab_id}: fewer than two mutants with distinct named mistakes")
    n = len(students)
    n_starter = round(n * STARTER_SHARE)
    n_chip = round(n * CHIP_SHARE)
    order = rng.sample(students, n)
    plan: dict[str, list[str]] = {s: ["starter"] for s in order[:n_starter]}
    plan.update({s: [] for s in order[n_starter:n_starter + n_chip]})
    mutated = order[n_starter + n_chip:]
    firsts = [m.id for m, count in zip(chosen, _counts(len(mutated), len(chosen)))
              for _ in range(count)]
    for student, first in zip(mutated, firsts):
        plan[student] = [first]
    # A second mistake only where both stay visible: two mistakes in one function give an output
    # that matches neither, which no grader can name. Candidates (declared in other tasks) are
    # graded, and a pair is kept when its feedback still holds both `expect` phrases.
    # The second mistake may be any named one of the library (a rarer one, planted only there).
    candidates = [(a, b) for a in chosen for b in by_expect.values()
                  if a.id != b.id and a.tasks and b.tasks and not set(a.tasks) & set(b.tasks)
                  and plant(chip, [a, b]) is not None]
    pairs = []
    for a, b in rng.sample(candidates, min(MAX_PAIR_TRIES, len(candidates))):
        if len(pairs) < MAX_PAIRS and pair_ok(a, b):
            pairs.append((a.id, b.id))
    n_second = round(len(mutated) * SECOND_MISTAKE_SHARE)
    for student in rng.sample(mutated, len(mutated)):
        if n_second == 0:
            break
        first = plan[student][0]
        fits = [second for one, second in pairs if one == first]
        if fits:
            plan[student] = [first, rng.choice(fits)]
            n_second -= 1
    return plan


def _grade(lab_id: str, source: str, cache: Path, root: Path) -> dict:
    """The grade.json of ``source`` (cached by the hash of the lab and the text)."""
    key = hashlib.sha256(f"{lab_id}\n{source}".encode()).hexdigest()[:20]
    cached = cache / lab_id / f"{key}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="msda-sample-") as tmp:
        module = Path(tmp) / f"{lab_id}.py"
        module.write_text(source)
        out = Path(tmp) / "grade.json"
        env = {k: v for k, v in os.environ.items() if k not in ("MSDA_GRADE_SEED", "MSDA_STAGE")}
        proc = subprocess.run([sys.executable, "-m", "msda_labs", "grade", lab_id,
                               "--submission", str(module), "--json", str(out)],
                              cwd=root, env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not out.is_file():
            raise SampleClassError(f"grading a {lab_id} submission failed (exit "
                                   f"{proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}")
        data = json.loads(out.read_text())
    cached.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _crashes(graded: dict | None) -> list[str]:
    """The tests a submission with one planted mistake crashed or timed out in (the library's
    own record of which mistakes crash: the page must still name them)."""
    return [t["name"] for ex in (graded or {}).get("exercises", ()) for t in ex["tests"]
            if t["status"] in ("crashed", "timeout")]


def make_class(students: int, out: Path, labs: list[str], *, seed: int = 0,
               mutants: Path | None = None, planted: int = 5, cache: Path | None = None,
               jobs: int = 1, progress=None) -> dict:
    """Make, grade and write the sample class; returns the planted truth (``planted.json``)."""
    from msda_labs.course.manifest import find_manifest, load_manifest

    if students < 2:
        raise SampleClassError(f"--students {students}: a class needs at least 2 students")
    if planted < 2:
        raise SampleClassError(f"--planted {planted}: plant at least 2 mistakes per lab")
    manifest = load_manifest(find_manifest())
    root = manifest.root
    out = Path(out)
    cache = Path(cache) if cache else out / ".cache"
    names = [f"student-{i:02d}" for i in range(1, students + 1)]
    truth: dict = {"seed": seed, "students": students, "labs": {}}
    for lab_id in labs:
        try:
            lab = manifest.lab(lab_id)
        except KitError as exc:
            raise SampleClassError(str(exc)) from None
        chip_path = root / "shared" / "msda_labs" / "chips" / f"{lab.id}.py"
        chip = chip_path.read_text()
        starter = (root / lab.folder / f"{lab.id}.py").read_text()
        library = {m.id: m for m in load_mutants(lab.id, mutants)}
        rng = random.Random(f"{seed}/{lab.id}")

        def both_named(a: Mutant, b: Mutant, lab_id: str = lab.id, chip: str = chip) -> bool:
            graded = _grade(lab_id, plant(chip, [a, b]), cache, root)
            feedback = " ".join(t["message"] for ex in graded["exercises"] for t in ex["tests"])
            return a.expect in feedback and b.expect in feedback

        plan = _assign(lab.id, names, list(library.values()), chip, planted, rng, both_named)
        sources = {}
        for student, given in plan.items():
            if given == ["starter"]:
                sources[student] = starter
            else:
                sources[student] = plant(chip, [library[m] for m in given])
        distinct = sorted(set(sources.values()))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            graded = dict(zip(distinct, pool.map(
                _grade, [lab.id] * len(distinct), distinct, [cache] * len(distinct),
                [root] * len(distinct))))
        entries, rows = [], []
        for student in names:
            result = GradeResult.from_dict(graded[sources[student]])
            result.submission = f"{student}/{lab.id}.py"
            entries.append({"student": student, "lab": lab.id, "commit": "", "note": "",
                            "result": result.to_dict()})
            rows.append(GradebookRow(student, lab.id, result.score, result.max_score, "clean",
                                     "", result=result))
        folder = out / lab.id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "regrade.json").write_text(json.dumps(entries, indent=1) + "\n")
        write_gradebook(rows, folder / "gradebook.csv")
        counts: dict[str, int] = {}
        for given in plan.values():
            for mutant_id in given:
                if mutant_id != "starter":
                    counts[mutant_id] = counts.get(mutant_id, 0) + 1
        truth["labs"][lab.id] = {
            "distinct_submissions": len(distinct),
            "given": {s: plan[s] for s in names},
            "mistakes": [{"mutant": m, "expect": library[m].expect, "why": library[m].why,
                          "students": counts[m],
                          "crashes": _crashes(graded.get(plant(chip, [library[m]])))}
                         for m in sorted(counts, key=lambda k: (-counts[k], k))],
        }
        if progress is not None:
            progress(f"{lab.id}: {students} students, {len(distinct)} distinct submissions "
                     f"graded or cached")
    (out / "planted.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m msda_labs.classroom.sample_class",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=60, help="class size (default 60)")
    parser.add_argument("--out", required=True, metavar="DIR", help="the folder to write")
    parser.add_argument("--labs", nargs="+", default=["lab01"], metavar="LAB",
                        help="lab ids (default lab01)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the class (default 0)")
    parser.add_argument("--mutants", metavar="DIR",
                        help="folder of labNN.yaml mutant files (default: the kit's tests/mutants)")
    parser.add_argument("--planted", type=int, default=5, metavar="K",
                        help="named mistakes planted per lab (default 5)")
    parser.add_argument("--cache", metavar="DIR",
                        help="graded distinct submissions, by hash (default DIR/.cache)")
    parser.add_argument("--jobs", type=int, default=1, help="gradings run at once (default 1)")
    ns = parser.parse_args(argv)
    try:
        make_class(ns.students, Path(ns.out), ns.labs, seed=ns.seed,
                   mutants=Path(ns.mutants) if ns.mutants else None, planted=ns.planted,
                   cache=Path(ns.cache) if ns.cache else None, jobs=ns.jobs, progress=print)
    except KitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {ns.out}/planted.json and one regrade.json and gradebook.csv per lab")
    return 0


if __name__ == "__main__":
    sys.exit(main())
