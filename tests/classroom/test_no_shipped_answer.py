"""No template repository ships the answer to its own lab.

The full audit (``shipped_answers.audit``) tries every function, kernel and class that a lab's
export ships (outside ``labNN.py``) as the answer to each task of that lab whose signature it
fits: pasted into the chip in the task function's place with everything it needs, screened by
the lab's own self-check example, and the survivors graded with ``--task`` in a copy of the
export, as a student would. Every task must earn 0. It grades for minutes per lab, so it runs
when ``MSDA_SHIPPED_AUDIT`` names labs (``all``, or ids such as ``lab01,lab07``; the ``nox -s
shipped`` session sets ``all``); docs/security.md holds its table.

Always run, in seconds: the construction that the audit's result rests on.

* labs 00, 03 and 08, whose ground truth is written the way the lab teaches (lab 08's is the
  racy histogram's rule, which Task 8.1 asks for): the template carries neither that truth nor
  the modules built on it, only what it gave on the public cases
  (``tests/truth_labNN.pt``, looked up by ``tests/truth_labNN.py``), and the judge's copy puts
  it back without changing what a checkout is compared with;

* the exported spec of lab NN keeps none of the functions that lab NN's self-check runs (nor
  what calls them), and its recording holds what the kit's spec gives on each example;
* ``python labNN.py`` in the export, with the chip as the student's module, agrees with the
  recording (CPU labs; the kernel labs run the same code path in the interpreter for minutes);
* the shipped ground truth reads every pixel through nearest-neighbour ``grid_sample`` and still
  agrees exactly with plain indexing (Hypothesis: 40 generated tables and indices);
* :func:`~msda_labs.classroom.export.without_definitions` leaves no definition that uses a
  removed one (Hypothesis: 40 generated modules).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from classroom_kit import clean_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit import MANIFEST, built_labs, chip_path

from msda_labs.classroom.export import without_definitions
from msda_labs.grading.judge import owntruth
from msda_labs.student import selfcheck
from msda_labs.truth.reference import read_rows

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import shipped_answers  # noqa: E402

READY = [lab.id for lab in built_labs()]
CPU_LABS = [lab.id for lab in built_labs() if all(s.name == "cpu" for s in lab.stages)]
SPEC = Path("shared/msda_labs/student/spec.py")
SETTINGS = settings(max_examples=40, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _audited() -> list[str]:
    wanted = os.environ.get("MSDA_SHIPPED_AUDIT", "").strip()
    if wanted == "all":
        return READY
    return [x.strip() for x in wanted.split(",") if x.strip()]


OWN_TRUTH = [lab.id for lab in built_labs()
             if (MANIFEST.root / lab.folder / "tests" / f"truth_{lab.id}.py").is_file()]


def _declared(path: Path, name: str):
    tree = ast.parse(path.read_text())
    return next(ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name
                                                        for t in node.targets))


def _imported(path: Path) -> set[str]:
    """Every kit module a file imports, at any depth (``from a.b import c``: a.b and a.b.c)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def _spec_functions(text: str) -> set[str]:
    return {n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}


# ------------------------------------------------------------------------- the construction

@pytest.mark.parametrize("lab_id", READY)
def test_export_leaves_out_its_own_spec_and_records_it(exports, lab_id):
    lab = MANIFEST.lab(lab_id)
    root = exports[lab_id]
    chip = __import__(f"msda_labs.chips.{lab_id}", fromlist=["_"])
    live = selfcheck.record(lab.number, vars(chip))
    used = set(live.pop("__spec_used__"))
    kept = _spec_functions((root / SPEC).read_text())
    recording = root / "shared" / "msda_labs" / "student" / "selfcheck" / "recorded" / \
        f"{lab_id}.pt"
    if not used:  # lab 09: its self-check compares with its own table, not the spec
        assert not recording.exists()
        return
    assert not used & kept, f"{lab_id}'s template states its own answers: {used & kept}"
    kit_spec = (MANIFEST.root / SPEC).read_text()
    for name in kept:  # what is left uses nothing that was left out
        node = next(n for n in ast.parse(kit_spec).body
                    if isinstance(n, ast.FunctionDef) and n.name == name)
        assert not {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & used, name
    recorded = torch.load(recording, weights_only=True)
    assert set(recorded) == set(live)
    for name, want in live.items():
        assert _same(recorded[name], want), name


@pytest.mark.parametrize("lab_id", OWN_TRUTH)
def test_template_carries_its_own_truth_recorded_only(exports, lab_id):
    """Labs 00, 03 and 08: the modules that answer the lab (and those built on them) are not in the
    template; its ``tests/truth_labNN.py`` defines nothing (it looks values up in the recording,
    which holds every function the kit's module offers); nothing of the lab's tests, nor any
    module left in the package at its top level, imports what was left out."""
    lab = MANIFEST.lab(lab_id)
    root = exports[lab_id]
    kit_truth = MANIFEST.root / lab.folder / "tests" / f"truth_{lab_id}.py"
    answering = _declared(kit_truth, "ANSWERING_MODULES")  # lab 08: none, the rule is its own
    shipped = {".".join(p.relative_to(root / "shared").with_suffix("").parts)
               for p in (root / "shared").rglob("*.py")}
    kit = {".".join(p.relative_to(MANIFEST.root / "shared").with_suffix("").parts)
           for p in (MANIFEST.root / "shared" / "msda_labs").rglob("*.py")}
    gone = kit - shipped
    for rel in answering:
        assert ".".join(Path(rel).with_suffix("").parts) in gone, rel
    for path in sorted((root / "tests").glob("*.py")):
        assert not _imported(path) & gone, f"tests/{path.name} imports {_imported(path) & gone}"
    for path in sorted((root / "shared").rglob("*.py")):
        top = ast.parse(path.read_text()).body
        names = {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module} | {
            a.name for n in top if isinstance(n, ast.Import) for a in n.names}
        assert not names & gone, f"{path.relative_to(root)} imports {names & gone}"
    template_truth = root / "tests" / kit_truth.name
    tree = ast.parse(template_truth.read_text())
    assert not [n for n in ast.walk(tree)
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                  ast.Lambda))]
    names = _declared(kit_truth, "__all__")
    assert _declared(template_truth, "__all__") == names
    recorded = torch.load(template_truth.with_suffix(".pt"), weights_only=True)
    args = recorded.pop(owntruth.ARGS)  # each call's arguments, beside its value
    assert set(recorded) == set(names) and all(recorded.values())
    assert {name: set(calls) for name, calls in args.items()} == \
        {name: set(calls) for name, calls in recorded.items()}


@pytest.mark.parametrize("lab_id", OWN_TRUTH)
def test_the_labs_own_test_files_answer_nothing(exports, lab_id):
    """What labs 00, 03 and 08 ship beside the package (``tests/``: probes with the grader's
    stand-ins, judge helpers, the recorded truth's lookup) goes through the audit as a whole:
    every definition that fits a task, pasted and screened, and each survivor graded (lab 00:
    3 graded, 75 s; lab 03: about 10, minutes on two shared cores: with the audit switch)."""
    if lab_id not in _audited():
        pytest.skip(f"grades for a minute or more: set MSDA_SHIPPED_AUDIT={lab_id} (or all)")
    lab = MANIFEST.lab(lab_id)
    findings = shipped_answers.audit(exports[lab_id], lab_id, lab.number, chip_path(lab_id),
                                     clean_env(), under="tests/")
    assert findings, "the stand-ins at least answer with the right form"  # the audit ran
    earning = [f"{f.task} {f.function} <- {f.candidate}: {f.points}/{f.max_points}"
               for f in findings if f.points]
    assert not earning, f"{lab_id}'s tests/ ship answers:\n  " + "\n  ".join(earning)


def test_judge_copy_holds_the_truth_and_compares_checkouts_with_the_template(exports,
                                                                            tmp_path):
    """The judge's copy of lab 03 (regrade, Gradescope, Classroom 50) computes its truth with
    the kit's module, and an untouched checkout of the template compares clean against it."""
    from msda_labs.classroom.export import export_lab
    from msda_labs.grading.judge import integrity

    lab = MANIFEST.lab("lab03")
    judge = export_lab(MANIFEST, lab, tmp_path / "judge", judge=True)
    kit_truth = MANIFEST.root / lab.folder / "tests" / "truth_lab03.py"
    assert (judge / "tests" / kit_truth.name).read_text() == kit_truth.read_text()
    assert (judge / "shared/msda_labs/truth/memory.py").is_file()
    assert integrity.check_folder(judge)["modified"] == []
    report = integrity.compare_trees(exports["lab03"], judge)
    assert report["modified"] == [], report
    assert (judge / integrity.TEMPLATE_DIGESTS_PATH).read_text() == \
        (exports["lab03"] / integrity.MANIFEST_PATH).read_text()


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) \
            and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("lab_id", CPU_LABS)
def test_quick_run_in_the_export_compares_with_the_recording(exports, tmp_path, lab_id):
    root = tmp_path / lab_id
    shutil.copytree(exports[lab_id], root)
    env = clean_env(PYTHONPATH=str(root / "shared"))

    def run() -> str:
        proc = subprocess.run([sys.executable, f"{lab_id}.py"], cwd=root, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return proc.stdout

    assert "Start with Task" in run()  # the starter
    shutil.copy2(chip_path(lab_id), root / f"{lab_id}.py")
    out = run()
    assert "WRONG" not in out and "CRASH" not in out, out[-3000:]
    steps = selfcheck.steps(MANIFEST.lab(lab_id).number)
    assert out.count("OK: agrees with") == len(steps), out[-3000:]
    if (root / "shared/msda_labs/student/selfcheck/recorded" / f"{lab_id}.pt").exists():
        assert out.count("the spec's outputs recorded for this example") == len(steps)
    # a wrong answer is still told apart: the chip with one sign flipped in its first task
    first = steps[0].name
    wrong = (root / f"{lab_id}.py").read_text() + (
        f"\n\nimport torch\n\n_right_{first} = {first}\n\n\ndef {first}(*args, **kwargs):\n"
        f"    out = _right_{first}(*args, **kwargs)\n"
        f"    return -out if isinstance(out, torch.Tensor) else out + 1\n")
    (root / f"{lab_id}.py").write_text(wrong.replace('\nif __name__ == "__main__":', "\nif 0:")
                                       + '\n\nif __name__ == "__main__":\n'
                                       + "    from msda_labs.student.check import run_lab\n\n"
                                       + f"    run_lab({MANIFEST.lab(lab_id).number}, "
                                       + "globals())\n")
    assert "WRONG" in run()


@SETTINGS
@given(st.integers(1, 3), st.integers(1, 40), st.integers(1, 4), st.integers(0, 30),
       st.integers(0, 2**31 - 1))
def test_ground_truth_reads_are_exact(n, s, c, p, seed):
    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(n, s, c, generator=gen, dtype=torch.float64) * 10.0 ** torch.randint(
        -300, 300, (n, s, 1), generator=gen).double()
    index = torch.randint(0, s, (n, p), generator=gen)
    want = torch.stack([table[i, index[i]] for i in range(n)])
    assert torch.equal(read_rows(table, index), want)


_NAMES = [f"f{i}" for i in range(8)]


@SETTINGS
@given(st.lists(st.sets(st.sampled_from(_NAMES), max_size=3), min_size=8, max_size=8),
       st.sets(st.sampled_from(_NAMES), max_size=3))
def test_without_definitions_leaves_nothing_that_needs_a_removed_one(calls, removed):
    source = '"""m."""\n\n__all__ = ' + repr(_NAMES).replace("'", '"') + "\n\n\n" + "\n\n\n".join(
        f"def {name}(x):\n    return " + " + ".join([*(f"{c}(x)" for c in sorted(called)), "x"])
        for i, (name, called) in enumerate(zip(_NAMES, calls))
        for called in [called & set(_NAMES[:i])]) + "\n"  # f_i calls only f_0..f_(i-1)
    text, gone = without_definitions(source, removed)
    tree = ast.parse(text)
    left = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert removed <= gone and not gone & set(left)
    for node in left.values():
        assert not {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & gone
    exported = next(n for n in tree.body if isinstance(n, ast.Assign))
    assert [e.value for e in exported.value.elts] == [n for n in _NAMES if n in left]
    namespace: dict = {}
    exec(compile(text, "m", "exec"), namespace)  # noqa: S102 - generated here, from names above
    assert all(namespace[name](1) >= 1 for name in left)


# ------------------------------------------------------------------------------ the audit

@pytest.mark.parametrize("lab_id", _audited() or ["(none)"])
def test_no_shipped_code_earns_a_point_in_its_own_lab(exports, lab_id):
    if lab_id == "(none)":
        pytest.skip("the audit grades for minutes per lab: set MSDA_SHIPPED_AUDIT=all (or lab "
                    "ids) to run it (`nox -s shipped`)")
    lab = MANIFEST.lab(lab_id)
    env = clean_env()
    findings = shipped_answers.audit(exports[lab_id], lab_id, lab.number, chip_path(lab_id), env)
    earning = [f"{f.task} {f.function} <- {f.candidate}: {f.points}/{f.max_points}"
               for f in findings if f.points]
    assert not earning, f"{lab_id}'s template ships answers:\n  " + "\n  ".join(earning)
