"""The similarity check on a fake class of lab 01: a copied pair (names changed, functions
reordered) and copies of the kit's code are flagged; independent solutions are not.

The class: ``ada`` hands in the chip (the answer key), ``bea`` and ``dan`` two solutions written
by hand, each unlike the chip and unlike each other (tests/classroom/data/similarity), ``cal``
bea's file with every local name changed and the two functions swapped, ``eve`` the truth's
float64 reference as the lab 01 template ships it, under the lab's function names, ``fay`` the
starter.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import keyword
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
from classroom_kit import clean_env
from hypothesis import given, settings
from hypothesis import strategies as st
from kit import ROOT

from msda_labs.classroom.similarity import compare_class, compare_files_of
from msda_labs.truth import reference

pytest.importorskip("copydetect")

DATA = Path(__file__).resolve().parent / "data" / "similarity"
LAB = ROOT / "lab-01-the-spec"
STARTER = (LAB / "lab01.py").read_text()
CHIP = (ROOT / "shared" / "msda_labs" / "chips" / "lab01.py").read_text()
HONEST_A = (DATA / "honest_a.py").read_text()
HONEST_B = (DATA / "honest_b.py").read_text()
KEEP = {"math", "torch", "img", "x", "y", "value", "spatial_shapes", "sampling_locations",
        "attention_weights", "bilinear_sample", "msda_naive_student", "range", "enumerate",
        "tuple", "int", "float", "slice", "B", "S", "M", "D", "Q", "L", "K", "H", "W", "_",
        "__name__", "run_lab", "globals", "msda_labs", "student", "check", "NotImplementedError",
        "Tensor", "tolist", "new_zeros", "reshape", "append"}


def renamed(source: str, names: dict[str, str]) -> str:
    """``source`` with each NAME token in ``names`` replaced (attributes and keywords kept)."""
    tokens = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and tok.string in names:
            tok = tok._replace(string=names[tok.string])
        tokens.append(tok)
    return tokenize.untokenize(tokens)


def local_names(source: str) -> list[str]:
    """The names a student chose: assigned or looped over inside the two functions."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
    return sorted(found - KEEP)


def swapped(source: str) -> str:
    """The two functions of the lab in the other order."""
    lines = source.splitlines(keepends=True)
    defs = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
    first, second = defs[0], defs[1]
    a = "".join(lines[first.lineno - 1:first.end_lineno])
    b = "".join(lines[second.lineno - 1:second.end_lineno])
    between = "".join(lines[first.end_lineno:second.lineno - 1])
    return ("".join(lines[:first.lineno - 1]) + b + between + a
            + "".join(lines[second.end_lineno:]))


def copied(source: str, suffix: str = "_mine") -> str:
    return swapped(renamed(source, {n: n + suffix for n in local_names(source)}))


def truth_pasted() -> str:
    """Shipped code handed in: the truth's float64 MSDA (with the helpers it calls), as the lab 01
    template ships it, under the lab's function names."""
    head = STARTER.partition("\n\ndef bilinear_sample")[0]
    body = "\n\n".join(inspect.getsource(f) for f in (
        reference.level_starts, reference.zero_padding, reference.bilinear_corners,
        reference.read_rows, reference.bilinear_reads, reference.msda_float64))
    body = body.replace("def bilinear_reads(", "def bilinear_sample(").replace(
        "def msda_float64(", "def msda_naive_student(")
    return head + "\n\n" + body


CLASS = {"ada": CHIP, "bea": HONEST_A, "cal": copied(HONEST_A), "dan": HONEST_B,
         "eve": truth_pasted(), "fay": STARTER}


@pytest.fixture(scope="module")
def fake_class(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("class")
    for student, text in CLASS.items():
        (folder / f"lab-01-{student}").mkdir()
        (folder / f"lab-01-{student}" / "lab01.py").write_text(text)
    return folder


@pytest.fixture(scope="module")
def report(fake_class):
    return compare_class(fake_class, prefix="lab-01-")


def test_the_copy_is_a_real_rewrite():
    """The copier's file is not the original's: names and order differ, and it still parses."""
    text = CLASS["cal"]
    ast.parse(text)
    assert text != HONEST_A and "left_mine" in text and "left =" not in text
    assert text.index("def msda_naive_student") < text.index("def bilinear_sample")


def test_copied_pair_flagged_and_independent_pairs_not(report):
    """bea and cal are the copied pair, and no pair of independent work is listed (ada's chip
    and eve's copy of the truth are written differently, so they are no pair)."""
    assert {(p.first, p.second) for p in report.pairs} == {("bea", "cal")}
    pair = next(p for p in report.pairs if p.first == "bea")
    assert pair.share_first > 0.9 and pair.share_second > 0.9
    assert "<mark class='shared'>" in pair.first_html and "<mark" in pair.second_html


def test_copies_of_the_kit_code_flagged_and_honest_work_not(report):
    flagged = {(m.student, m.source.split(" ")[0]) for m in report.shipped}
    assert ("ada", "chips/lab01.py") in flagged
    assert ("eve", "truth/reference.py") in flagged
    assert {m.student for m in report.shipped} == {"ada", "eve"}
    for student in ("dan", "fay"):  # dan: the highest share with anyone or anything is low
        assert report.column(student).startswith("below the thresholds"), report.column(student)
        assert report.highest[student][0] < 0.5
    # the copy, not the kit's code
    assert re.fullmatch(r"FLAGGED: 9\d% with cal", report.column("bea"))
    assert report.column("cal").startswith("FLAGGED") and "with bea" in report.column("cal")


def test_starter_alone_shares_nothing(report):
    assert report.highest["fay"][0] == 0.0


def test_the_typical_share_is_far_below_the_copies(report):
    """The median pair (15 pairs, 2 of them flagged) shares little: the copies stand out."""
    assert 0 < report.typical < 0.25
    assert min(p.share for p in report.pairs) > 2 * report.typical


@settings(max_examples=8, derandomize=True, deadline=None)
@given(suffix=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=6),
       swap=st.booleans(), source=st.sampled_from(["a", "b"]))
def test_any_renaming_and_order_stays_flagged(suffix, swap, source):
    """Whatever names the copier picks, in either order, the pair shares more than the
    threshold; the two honest files stay below it."""
    original = HONEST_A if source == "a" else HONEST_B
    names = {n: n + suffix for n in local_names(original)
             if not keyword.iskeyword(n + suffix)}
    copy = renamed(original, names)
    copy = swapped(copy) if swap else copy
    found = compare_files_of({"orig": original, "copy": copy, "other": HONEST_B
                              if source == "a" else HONEST_A}, "lab01",
                             boilerplate=[LAB / "lab01.py"], sources={})
    assert [(p.first, p.second) for p in found.pairs] == [("copy", "orig")]


def test_command_writes_a_self_contained_page(fake_class, tmp_path):
    out = tmp_path / "similarity.html"
    proc = subprocess.run([sys.executable, "-m", "msda_labs", "similarity", str(fake_class),
                           "--prefix", "lab-01-", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "PAIR    bea" in proc.stdout and "SHIPPED eve" in proc.stdout
    page = out.read_text()
    assert "<mark class='shared'>" in page and "http" not in page.lower().replace(
        "http-equiv", "")
    assert " src=" not in page and "<link" not in page
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["column"]["cal"].startswith("FLAGGED")
    rows = out.with_suffix(".csv").read_text().splitlines()
    assert rows[0] == "student,lab,similarity" and len(rows) == 1 + len(CLASS)


def test_regrade_similarity_beside_the_gradebook_fills_the_course_gradebook_column(
        fake_class, tmp_path, monkeypatch, capsys):
    """``regrade --similarity`` (the grading replaced by a stand-in: 1 point a file), then
    ``gradebook --similarity`` fills the course gradebook's column."""
    import csv

    from msda_labs.classroom import regrade
    from msda_labs.cli import main
    from msda_labs.grading.judge.results import ExerciseResult, GradeResult
    from msda_labs.grading.judge.results import TestResult as Verdict

    def graded(work, lab_id, **kwargs):
        result = GradeResult(lab_id, stages=["cpu"])
        result.exercises = [ExerciseResult("1.1", "t", [Verdict("t", "passed", 1, 1, "",
                                                                 "cpu")])]
        return result

    monkeypatch.setattr(regrade, "_grade_subprocess", graded)
    book = tmp_path / "out" / "lab01.csv"
    assert main(["regrade", str(fake_class), "--gradebook", str(book), "--prefix", "lab-01-",
                 "--similarity", "--no-insight", "--json", str(tmp_path / "lab01.json")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"PAIR    bea \(9\d%\) and cal \(9\d%\)", out), out
    beside = tmp_path / "out" / "similarity.json"
    assert beside.is_file() and (tmp_path / "out" / "similarity.html").is_file()
    course = tmp_path / "course.csv"
    assert main(["gradebook", str(tmp_path / "lab01.json"), "--out", str(course),
                 "--similarity", str(beside)]) == 0
    with open(course, newline="") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    assert re.fullmatch(r"FLAGGED: 9\d% with bea", rows["cal"]["similarity"])
    assert rows["dan"]["similarity"].startswith("below the thresholds")
    assert rows["eve"]["similarity"].startswith("FLAGGED") and "truth/reference.py" in \
        rows["eve"]["similarity"]
