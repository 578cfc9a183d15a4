"""``python labNN.py``: the self-check every starter ends with (msda_labs.student.check).

For every lab, the module's ``__main__`` block runs three times, as a student runs it: on the
untouched starter (it must say in one line which task to start with), on the chip (every
function agrees with the student-facing spec, guard bands clean) and on a planted bug from the
mutant library (the report names the first wrong element). Labs of one mode share one
subprocess: three in all, about 25 s of wall time together on one core.

Also here: the grader's import rule keeps the self-check and the spec out of graded code.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from kit import ROOT, chip_path, lab_ids, mutants, starter_path

from msda_labs.grading.judge.rules import SourceInfo, forbidden_imports
from msda_labs.student.selfcheck import steps

DRIVER = Path(__file__).with_name("selfcheck_run.py")

# The planted bug each lab's check must catch, and what its report must say about it: a tensor
# lab names the first wrong element (index, yours vs spec), a lab of plain values the first wrong
# value.
FIRST_WRONG = r"WRONG: \d+ of \d+ elements of \w+ differ, max \|yours - spec\| = \S+; first at " \
              r"\w+\[[\d, ]+\]: yours \S+, spec \S+"
PLANTED = {
    "lab00": ("grid_without_half_pixel", FIRST_WRONG),
    "lab01": ("missing_half_pixel", FIRST_WRONG),
    "lab02": ("missing_half_pixel", FIRST_WRONG),
    "lab03": ("one_sector_per_lane", r"WRONG: sectors_touched\(strided x3\) is 100, the spec "
                                     r"says 38"),
    "lab04": ("bilinear_missing_half", FIRST_WRONG),
    "lab05": ("missing_half", FIRST_WRONG),
    "lab06": ("missing_half_pixel", FIRST_WRONG),
    "lab07": ("missing_wh_factor", FIRST_WRONG),
    "lab08": ("missing_half_pixel", FIRST_WRONG),
    "lab09": ("switch_compares_minor_too", r"WRONG: bfloat16 on SM 8\.9 is False, the spec says "
                                           r"True"),
    "lab10": ("validation_checks_only_the_device",
              r"WRONG: attention_weights \(B, Q, M, L, 1\) is accepted, the spec says ValueError "
              r"naming attention_weights"),
}
FINDINGS = ("WRONG", "CRASH", "OUT OF BOUNDS", "UNWRITTEN", "NaN:", "not found", "Start with",
            "Next Task")


def _has_main_block(path: Path) -> bool:
    return re.search(r'^if __name__ == "__main__":\n(    .*\n|\n)*?    run_lab\(',
                     path.read_text(), flags=re.M) is not None


# Labs that share a mode share one process (imports are most of the cost).
GROUPS = {
    "plain torch": ("lab00", "lab01", "lab02", "lab03", "lab07"),
    "interpreter": ("lab04", "lab05", "lab06", "lab08", "lab10"),
    "ahead of time": ("lab09",),
}


def _run(group: str, jobs: list) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "MSDA_STAGE")}
    if group == "interpreter":  # lab 09 compiles ahead of time; the others need no Triton
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "shared"), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "jobs.json"
        spec_file.write_text(json.dumps(jobs))
        proc = subprocess.run([sys.executable, str(DRIVER), str(spec_file)], capture_output=True,
                              text=True, timeout=900, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("SELFCHECK-JSON ")), None)
    assert proc.returncode == 0 and line, f"{group}: the driver failed:\n{proc.stdout[-3000:]}\n" \
                                          f"{proc.stderr[-3000:]}"
    return json.loads(line.split(" ", 1)[1])


def _first_task(starter: Path) -> str:
    """The lowest task id among the starter's stubs: where a student starts."""
    ids = re.findall(r'raise NotImplementedError\("Task (\d+)\.(\d+)', starter.read_text())
    return "{}.{}".format(*min((int(a), int(b)) for a, b in ids))


def _problems(lab: str, runs: dict) -> list[str]:
    """What is wrong with the three runs of one lab (empty when all is as it should be)."""
    problems = []
    n_steps = len(steps(int(lab[3:])))
    first = _first_task(starter_path(lab))
    lines = [x for x in runs["starter"]["stdout"].splitlines() if x.strip()]
    if len(lines) != 1 or not lines[0].startswith(f"Start with Task {first}: ") \
            or "NotImplementedError" not in lines[0]:
        problems.append(f"{lab} starter: expected one line 'Start with Task {first}: ...', got:\n"
                        + "\n".join(lines))
    chip = runs["chip"]["stdout"]
    # At least every registered step agrees (a lab module may run steps of its own first).
    if chip.count("  OK: agrees with ") < n_steps or any(w in chip for w in FINDINGS):
        problems.append(f"{lab} chip: expected {n_steps} agreements and no finding:\n{chip}")
    mutant_id, expected = PLANTED[lab]
    if not re.search(expected, runs["planted"]["stdout"]):
        problems.append(f"{lab} with {mutant_id}: no {expected!r} in:\n{runs['planted']['stdout']}")
    return problems


@pytest.mark.parametrize("group", GROUPS)
def test_starter_chip_and_planted_bug(group, tmp_path):
    jobs = []
    for lab in GROUPS[group]:
        mutant_id = PLANTED[lab][0]
        mutant = next(m for m in mutants(lab) if m.id == mutant_id)
        planted = tmp_path / f"{lab}-{mutant_id}.py"
        planted.write_text(mutant.apply(chip_path(lab).read_text()))
        direct = not _has_main_block(chip_path(lab))
        jobs += [[lab, "starter", str(starter_path(lab)), direct],
                 [lab, "chip", str(chip_path(lab)), direct], [lab, "planted", str(planted), direct]]
    results = _run(group, jobs)
    problems = [p for lab in GROUPS[group] for p in _problems(lab, results[lab])]
    assert not problems, "\n\n".join(problems)


def test_groups_cover_every_lab():
    assert sorted(lab for labs in GROUPS.values() for lab in labs) == sorted(lab_ids())


@pytest.mark.parametrize("lab", lab_ids())
def test_starter_ends_with_the_self_check(lab):
    """Every starter runs its check from ``__main__`` (lab 05's block is helper lab05's)."""
    if lab == "lab05" and not _has_main_block(chip_path(lab)):
        pytest.xfail("lab 05's __main__ block lands with lab 05's graded steps")
    assert _has_main_block(starter_path(lab)), f"{starter_path(lab)} has no run_lab block"
    info = SourceInfo.read(starter_path(lab))
    assert forbidden_imports(info, int(lab[3:])) == []


GRADED_USE = {
    "at the top": "from msda_labs.student.spec import msda\n",
    "in a function": "def f(*a):\n    from msda_labs.student import spec\n"
                     "    return spec.msda(*a)\n",
    "by name": "import importlib\n\ndef f(*a):\n    m = importlib.import_module("
               "'msda_labs.student.spec')\n    return m.msda(*a)\n",
    "the check": "import msda_labs.student.check as c\n",
    "the examples' home": "from msda_labs.student.selfcheck import small_inputs\n",
    "in an else": 'if __name__ == "__main__":\n    pass\nelse:\n'
                  '    import msda_labs.student.spec\n',
    "nested": 'def f():\n    if __name__ == "__main__":\n        import msda_labs.student.spec\n',
    "renamed module": '__name__ = "__main__"\nif __name__ == "__main__":\n'
                      '    from msda_labs.student import spec\n',
    "renamed by globals": 'globals()["__name__"] = "__main__"\nif __name__ == "__main__":\n'
                          '    from msda_labs.student.spec import msda\n',
    "renamed by update": 'globals().update(__name__="__main__")\nif __name__ == "__main__":\n'
                         '    from msda_labs.student.spec import msda\n',
    "renamed by setattr": 'import sys\nsetattr(sys.modules[__name__], "__name__", "__main__")\n'
                          'if __name__ == "__main__":\n'
                          '    from msda_labs.student.spec import msda\n',
}


@pytest.mark.parametrize("where", GRADED_USE)
def test_graded_code_may_not_use_the_spec_or_the_check(where):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lab02.py"
        path.write_text(GRADED_USE[where])
        found = forbidden_imports(SourceInfo.read(path), 2)
    assert found and all('outside `if __name__ == "__main__":`' in f for f in found), found


def test_the_main_block_may_use_them():
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lab02.py"
        path.write_text('import torch\n\nif __name__ == "__main__":\n'
                        '    from msda_labs.student import spec\n'
                        '    from msda_labs.student.check import case, check, run_lab\n'
                        '    run_lab(2, globals())\n')
        assert forbidden_imports(SourceInfo.read(path), 2) == []


def test_reading_a_name_keeps_the_main_block_exempt():
    """Reading ``__name__`` (a function's, or the module's through its globals) rebinds nothing:
    right work that does so keeps its run-by-hand block (the whole-submission mutants of
    ``gpu.prove`` and students' helpers alike)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lab10.py"
        path.write_text('def names(fns):\n    return [getattr(f, "__name__") for f in fns]\n\n\n'
                        'def mine(space):\n    return space["__name__"]\n\n\n'
                        'if __name__ == "__main__":\n'
                        '    from msda_labs.student.check import run_lab\n'
                        '    run_lab(10, globals())\n')
        assert forbidden_imports(SourceInfo.read(path), 10) == []


def test_an_exported_lab_carries_what_its_check_needs(tmp_path):
    """Lab 09's export (the check compiles lab 08's kernel, from the lab 08 chip the export
    carries): its chip, dropped in as lab09.py, runs the whole self-check there, with nothing of
    the kit but the export's own shared/ on the path. About 6 s."""
    from kit import MANIFEST

    from msda_labs.classroom.export import export_lab

    root = export_lab(MANIFEST, MANIFEST.lab("lab09"), tmp_path / "out")
    (root / "lab09.py").write_text(chip_path("lab09").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "MSDA_STAGE")}
    env["PYTHONPATH"] = str(root / "shared")
    proc = subprocess.run([sys.executable, "lab09.py"], cwd=root, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("  OK: agrees with ") == len(steps(9)), proc.stdout + proc.stderr
    assert "chip (msda_labs.chips.lab08)" in proc.stdout


def test_check_and_case_work_from_a_notebook():
    """``check(fn, case(lab, name))`` in-process, as in a notebook: right, wrong, and a stub."""
    from kit import load_file_module

    from msda_labs.student.check import case, check

    chip = load_file_module(chip_path("lab03"), "selfcheck_nb_lab03")
    assert check(chip.sectors_touched, case(3, "sectors_touched"), show=False).status == "ok"
    wrong = check(lambda pattern: 7, case(3, "sectors_touched"), show=False)
    assert wrong.status == "wrong" and "the spec says" in str(wrong)
    starter = load_file_module(starter_path("lab03"), "selfcheck_nb_lab03_starter")
    stub = check(starter.tiling_speedup, case(3, "tiling_speedup"), show=False)
    assert stub.status == "todo" and stub.task == "3.3"
    lab07 = load_file_module(chip_path("lab07"), "selfcheck_nb_lab07")
    report = check(lab07.scatter_grad_value, case(7, "scatter_grad_value", lab07), show=False)
    assert report.status == "ok", str(report)


def test_big_runs_size_and_precision_in_an_exported_lab(tmp_path):
    """``python lab05.py --big`` in lab 05's template (the spec's answers recorded, not computed):
    the chip agrees on every case and its guard bands stay clean; int32 offsets fail only the
    case past 2**31, and its twin on a small level says the size is the cause; an fp16
    accumulator fails only the half-precision case. Lab 03 has no such case
    and says so. About 25 s."""
    from kit import MANIFEST

    from msda_labs.classroom.export import export_lab
    from msda_labs.student.selfcheck import has_big

    assert has_big(5) and has_big(6) and has_big(8) and not has_big(3)
    root = export_lab(MANIFEST, MANIFEST.lab("lab05"), tmp_path / "out")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "MSDA_STAGE")}
    env.update(PYTHONPATH=str(root / "shared"), TRITON_INTERPRET="1")
    chip = chip_path("lab05").read_text()
    versions = {"chip": chip, **{m.id: m.apply(chip) for m in mutants("lab05")
                                 if m.id in ("int32_offsets", "accumulator_in_input_dtype")}}
    out = {}
    for name, text in versions.items():
        (root / "lab05.py").write_text(text)
        proc = subprocess.run([sys.executable, "lab05.py", "--big"], cwd=root, capture_output=True,
                              text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out[name] = proc.stdout
    n_steps = len(steps(5, big=True))
    assert out["chip"].count("  OK: agrees with ") == n_steps, out["chip"]
    assert not any(w in out["chip"] for w in FINDINGS), out["chip"]
    assert "recorded for this example" in out["chip"]  # the template's spec states no answer

    def verdicts(text: str) -> dict:
        """{step: 'ok' or the first finding} of one run."""
        found, step = {}, None
        for line in text.splitlines():
            if not line.startswith(" ") and " on " in line:
                step = line.split(" on ", 1)[0]
                found[step] = "ok"
            elif line.startswith("msda_forward_kernel (past 2**31): CRASH"):
                found["msda_forward_kernel (past 2**31)"] = "CRASH"
            elif step and line.strip().startswith(("WRONG", "OUT OF BOUNDS", "UNWRITTEN")):
                found[step] = line.strip().split(":")[0]
        return found

    offsets = verdicts(out["int32_offsets"])
    accumulator = verdicts(out["accumulator_in_input_dtype"])
    assert offsets["msda_forward_kernel"] == offsets["msda_forward_kernel (half precision)"] == "ok"
    assert offsets["msda_forward_kernel (past 2**31)"] != "ok", out["int32_offsets"]
    # the evidence for the wrap: the same samples on a small level come out right
    assert "come out right: the size alone breaks it" in out["int32_offsets"]
    assert "32x32 level" not in out["chip"] + out["accumulator_in_input_dtype"]
    assert accumulator["msda_forward_kernel"] == "ok"
    assert accumulator["msda_forward_kernel (past 2**31)"] == "ok"
    assert accumulator["msda_forward_kernel (half precision)"] == "WRONG", accumulator

    (root / "lab03.py").write_text(chip_path("lab03").read_text())
    proc = subprocess.run([sys.executable, "-c", "import sys, lab03\n"
                           "from msda_labs.student.check import run_lab\n"
                           "run_lab(3, vars(lab03), big=True)"], cwd=root, capture_output=True,
                          text=True, timeout=600, env=env)
    assert "lab 03 has no case of size or precision" in proc.stdout, proc.stdout + proc.stderr
