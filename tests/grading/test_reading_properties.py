"""Generated attacks on the judge's reading of a submission, at the level of the functions the
judge calls (the whole grade of a few of them: test_reading_attacks.py).

Two families, each from a generator (Hypothesis, ``derandomize=True``: the same examples on
every run):

* ``utf8_forms`` (max_examples=40): a CPU lab's chip (labs 00, 01, 02) in the forms a UTF-8 file
  takes in an editor: a byte-order mark, CRLF or CR line ends, a ``coding:`` declaration that
  says UTF-8 (every spelling Python accepts, on line 1 or after a ``#!`` line), tabs for
  indentation, form feeds between statements, non-ASCII names and strings. The judge's one
  reading (``grading.isolation.source.decode_submission``) must accept it and be the program the
  compiler runs from the bytes (equal code objects), the lines ``linecache`` holds must be the
  compiler's lines, and the rules must read the same findings as on the chip.
* ``foreign_files`` (max_examples=40): the same chip with a declaration of any other encoding
  Python knows (or one it does not, or one that contradicts a byte-order mark), or with bytes
  that are not UTF-8: the judge must refuse it with a message that says to save the file as
  UTF-8, and never read a tree from it.
* ``nested_violations`` (max_examples=60): for each rule read off the source (lab 00's loop rules,
  lab 01's and 02's interpolation bans, lab 07's autograd ban, lab 08's "predict without
  running"), a def that breaks it, appended to the chip, wrapped in a generated stack of up to
  three blocks (``if``/``else``/``try``/``except``/``finally``/``with``/``for``/``while``/
  ``match``) and bound as a plain def, a decorated def, a class's method, a closure's result, a
  ``global`` from a function, or a lambda. The module, run, must bind the violating function
  (the attack is real), and the lab's own rule must fail on it. The chip's honest def moved into
  the same blocks must still pass the rule.
"""

from __future__ import annotations

import ast
import codecs
import encodings.aliases
import functools
import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit import ROOT, chip_path

from msda_labs.grading.isolation.source import SourceRefused, decode_submission, source_lines
from msda_labs.grading.judge.rules import (
    NotAPlainDef,
    SourceInfo,
    forbidden_imports,
    indirect_uses,
    tamper_uses,
)

SETTINGS = dict(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

CPU_LABS = ("lab00", "lab01", "lab02")


def _lab_module(folder: str, name: str):
    tests = str(ROOT / folder / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return importlib.import_module(name)


# == utf8_forms and foreign_files ================================================================
UTF8_DECLARATIONS = ("# -*- coding: utf-8 -*-", "# coding=utf8", "# coding: UTF-8",
                     "# vim: set fileencoding=utf-8 :", "# -*- coding: utf_8 -*-",
                     "# coding: utf-8-sig")


def _with_tabs(text: str) -> str:
    """Each leading group of four spaces a tab (a consistent indentation, which Python takes)."""
    out = []
    for line in text.split("\n"):
        stripped = line.lstrip(" ")
        depth = len(line) - len(stripped)
        out.append("\t" * (depth // 4) + " " * (depth % 4) + stripped)
    return "\n".join(out)


def _with_form_feeds(text: str) -> str:
    """A form feed before each top-level def and class (Python ignores it there)."""
    return "\n".join("\f" + line if line.startswith(("def ", "class ")) else line
                     for line in text.split("\n"))


NON_ASCII = ('\n\ngröße_übung = "Größe ✓ ∑ 変形"\n\n\ndef _naïve(δ):\n    """é"""\n'
             '    return δ\n')


@st.composite
def utf8_forms(draw):
    """(lab, bytes of a UTF-8 form of its chip, what was done)."""
    lab = draw(st.sampled_from(CPU_LABS))
    text = chip_path(lab).read_text()
    done = []
    if draw(st.booleans()):
        text, _ = _with_tabs(text), done.append("tabs")
    if draw(st.booleans()):
        text, _ = _with_form_feeds(text), done.append("form feeds")
    if draw(st.booleans()):
        text, _ = text + NON_ASCII, done.append("non-ASCII")
    declaration = draw(st.sampled_from((None, *UTF8_DECLARATIONS)))
    if declaration:
        shebang = draw(st.booleans())
        text = ("#!/usr/bin/env python3\n" if shebang else "") + declaration + "\n" + text
        done.append(f"{declaration!r}" + (" after #!" if shebang else ""))
    newline = draw(st.sampled_from(("\n", "\r\n", "\r")))
    text = text.replace("\n", newline)
    data = text.encode("utf-8")
    if draw(st.booleans()):
        data, _ = codecs.BOM_UTF8 + data, done.append("BOM")
    done.append(repr(newline))
    return lab, data, done


@functools.cache
def _chip(lab: str) -> SourceInfo:
    return SourceInfo.read(chip_path(lab))


@functools.cache
def _chip_findings(lab: str) -> tuple:
    chip = _chip(lab)
    return _findings(chip, lab), [len(chip.loops(target)) for target in TARGETS[lab]]


def _findings(info: SourceInfo, lab: str) -> tuple:
    """What the rules read, without line numbers (a form may move lines)."""
    return (sorted(what for _, what in tamper_uses(info)),
            sorted(what for _, what in indirect_uses(info, ("grid_sample",))),
            len(forbidden_imports(info, int(lab[3:]))))


@settings(max_examples=40, **SETTINGS)
@given(utf8_forms())
def test_every_utf8_form_is_one_program_read_as_the_chip(form):
    lab, data, done = form
    name = f"/submission/{lab}.py"
    try:
        compiled = compile(data, name, "exec", dont_inherit=True)
    except SyntaxError:  # Python itself refuses it (a BOM with `coding=utf8`): so does the judge
        with pytest.raises(SourceRefused, match="save .* as UTF-8"):
            decode_submission(data, f"{lab}.py")
        return
    text = decode_submission(data, f"{lab}.py")
    # One reading: the text the judge reads compiles to the program Python runs from the bytes.
    assert compile(text, name, "exec", dont_inherit=True) == compiled, done
    info = SourceInfo.parse(Path(name), text)
    assert info.tree is not None, (done, info.syntax_error)
    # linecache's lines (what tracebacks and inspect.getsource show) are the compiler's.
    lines = source_lines(text)
    for node in ast.walk(info.tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            assert lines[node.lineno - 1].lstrip(" \t\f").startswith(
                ("def " if isinstance(node, ast.FunctionDef) else "class ") + node.name), done
    assert (_findings(info, lab), [len(info.loops(target)) for target in TARGETS[lab]]) \
        == _chip_findings(lab), done


def _codec(name: str) -> str | None:
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


FOREIGN = sorted({c for c in map(_codec, set(encodings.aliases.aliases.values())) if c}
                 - {"utf-8", "utf-8-sig"} | {"utf-7", "latin-1", "cp1252", "ascii"})


@st.composite
def foreign_files(draw):
    """(lab, bytes that are not a UTF-8 source, what was done)."""
    lab = draw(st.sampled_from(CPU_LABS))
    body = chip_path(lab).read_bytes()
    kind = draw(st.sampled_from(("declared", "unknown", "bom-against", "bad-bytes")))
    if kind == "bad-bytes":
        bad = draw(st.sampled_from((b"\xff", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80",
                                    b"\x80abc", b"\xf8\x88\x80\x80\x80")))
        at = draw(st.integers(0, body.count(b"\n") - 1))
        lines = body.split(b"\n")
        lines[at] += b"  # " + bad
        return lab, b"\n".join(lines), f"{bad!r} on line {at + 1}"
    encoding = {"declared": draw(st.sampled_from(FOREIGN)), "unknown": "no-such-codec",
                "bom-against": draw(st.sampled_from(FOREIGN))}[kind]
    form = draw(st.sampled_from(("# -*- coding: {} -*-", "# coding={}",
                                 "# vim: set fileencoding={} :")))
    head = ("#!/usr/bin/env python3\n" if draw(st.booleans()) else "") + form.format(encoding)
    data = (head + "\n").encode("ascii") + body
    if kind == "bom-against":
        data = codecs.BOM_UTF8 + data
    return lab, data, f"{kind} {head!r}"


@settings(max_examples=40, **SETTINGS)
@given(form=foreign_files())
def test_every_other_encoding_is_refused_with_what_to_do(form, tmp_path_factory):
    lab, data, done = form
    with pytest.raises(SourceRefused, match=rf"{lab}\.py .*save {lab}\.py as UTF-8"):
        decode_submission(data, f"{lab}.py")
    path = tmp_path_factory.mktemp("foreign") / f"{lab}.py"
    path.write_bytes(data)
    info = SourceInfo.read(path)
    assert info.tree is None and not info.readable and "UTF-8" in info.unreadable, done


def test_what_a_refusal_says():
    data = b"# -*- coding: utf-7 -*-\nx = 1\n"
    with pytest.raises(SourceRefused) as refused:
        decode_submission(data, "lab02.py")
    assert str(refused.value).startswith("lab02.py declares the encoding 'utf-7'")
    assert "remove that line" in str(refused.value)


# == nested_violations ===========================================================================
def _loop_rule(info, name):  # lab 00's rule, as its test states it
    loops = info.loops(name, graded_apart=("bilinear_sample", "deform_attend"))
    if loops:
        raise AssertionError(f"rule: {name} must not loop; line {loops[0].lineno}")


def _lab01_rule(info, name):
    _lab_module("lab-01-the-spec", "test_lab01_spec")._check_rules(SimpleNamespace(source=info),
                                                                    name)


def _lab02_rule(info, name):
    _lab_module("lab-02-pointers", "test_lab02_pointers")._check_banned(
        SimpleNamespace(source=info))


def _lab07_rule(info, name):
    module = _lab_module("lab-07-the-other-direction", "test_lab07_gradients")
    which = {v: k for k, v in module.FUNCTION.items()}[name]
    module._check_rules(SimpleNamespace(source=info), which)


def _lab08_rule(info, name):
    _lab_module("lab-08-concurrent-writes", "judge_lab08").rule_no_kernels(
        SimpleNamespace(source=info))


# (lab, the function the rule reads, the rule as the lab's tests call it, a def that breaks it)
RULES = [
    ("lab00", "bilinear_sample", _loop_rule,
     "def bilinear_sample(img, points):\n    for _ in range(1):\n        pass\n    return img\n"),
    ("lab00", "deform_attend", _loop_rule,
     "def deform_attend(value, points, weights):\n    return [v for v in value]\n"),
    ("lab01", "bilinear_sample", _lab01_rule,
     "def bilinear_sample(img, x, y):\n    return F.grid_sample(img, x)\n"),
    ("lab01", "msda_naive_student", _lab01_rule,
     "def msda_naive_student(*args):\n    return torch.nn.functional.grid_sample(*args)\n"),
    ("lab02", "flat_msda", _lab02_rule,
     "def flat_msda(value, *args):\n    return F.interpolate(value)\n"),
    ("lab07", "grad_attention_weights", _lab07_rule,
     "def grad_attention_weights(out, *args):\n    return torch.autograd.grad(out, args)\n"),
    ("lab07", "grad_sampling_locations", _lab07_rule,
     "def grad_sampling_locations(out, *args):\n    out.backward()\n    return args\n"),
    ("lab07", "scatter_grad_value", _lab07_rule,
     "def scatter_grad_value(out, *args):\n    return torch.func.vjp(out, *args)\n"),
    ("lab08", "predict_racy_histogram", _lab08_rule,
     "def predict_racy_histogram(idx, n_bins, BLOCK):\n"
     "    return histogram_racy(idx, n_bins, BLOCK)\n"),
]
TARGETS = {lab: [name for lab_, name, _, _ in RULES if lab_ == lab] for lab in CPU_LABS}

# Blocks a def can stand in: (the lines before the body, the lines after it), at one level.
BLOCKS = {
    "if": (["if True:"], []),
    "else": (["if False:", "    pass", "else:"], []),
    "try": (["try:"], ["except Exception:", "    pass"]),
    "except": (["try:", "    raise ValueError", "except ValueError:"], []),
    "try-else": (["try:", "    pass", "except Exception:", "    pass", "else:"], []),
    "finally": (["try:", "    pass", "finally:"], []),
    "with": (["with memoryview(b''):"], []),
    "for": (["for _ in range(1):"], []),
    "while": (["while True:"], ["    break"]),
    "match": (["match 0:", "    case _:"], []),
}


def _indent(lines: list[str], depth: int = 1) -> list[str]:
    return [("    " * depth + line) if line else line for line in lines]


def _bind(form: str, name: str, body: str) -> list[str]:
    """``body`` (a def of ``name``) bound to the module's ``name`` by ``form``."""
    lines = body.rstrip("\n").split("\n")
    if form == "def":
        return lines
    if form == "decorated":
        return ["@(lambda f: f)", *lines]
    if form == "class":
        return ["class _Holder:", *_indent(["@staticmethod", *lines]),
                f"{name} = _Holder.{name}"]
    if form == "closure":
        return ["def _make():", *_indent(lines), f"    return {name}", f"{name} = _make()"]
    if form == "global":
        return ["def _install():", f"    global {name}", *_indent(lines), "_install()"]
    if form == "lambda":
        return [*[line.replace(f"def {name}(", "def _impl(", 1) for line in lines],
                f"{name} = lambda *a, **k: _impl(*a, **k)"]
    raise AssertionError(form)


def _wrap(blocks: list[str], lines: list[str]) -> list[str]:
    for block in reversed(blocks):
        before, after = BLOCKS[block]
        if block == "match":
            lines = before + _indent(lines, 2) + after
        else:
            lines = before + _indent(lines) + after
    return lines


@st.composite
def nested_violations(draw):
    """(rule, how it is bound, the blocks around it, the module's text)."""
    rule = draw(st.sampled_from(RULES))
    form = draw(st.sampled_from(("def", "def", "decorated", "class", "closure", "global",
                                 "lambda")))
    blocks = draw(st.lists(st.sampled_from(sorted(BLOCKS)), max_size=3))
    lab, name, _, body = rule
    block = "\n".join(_wrap(blocks, _bind(form, name, body)))
    return rule, form, blocks, chip_path(lab).read_text() + "\n\n" + block + "\n"


def _bound_in_block(text: str, chip_lines: int, name: str) -> bool:
    """Whether the module, run, binds ``name`` to a function of the appended block."""
    scope = {"__name__": "graded_module"}
    exec(compile(text, "graded_module.py", "exec", dont_inherit=True), scope)  # noqa: S102
    code = getattr(scope[name], "__code__", None)
    return code is not None and code.co_firstlineno > chip_lines


@settings(max_examples=60, **SETTINGS)
@given(nested_violations())
def test_every_nesting_of_a_violation_loses_the_rule(case):
    (lab, name, rule, _), form, blocks, text = case
    chip_lines = chip_path(lab).read_text().count("\n") + 2
    assert _bound_in_block(text, chip_lines, name), (form, blocks)  # the attack is real
    info = SourceInfo.parse(Path(f"{lab}.py"), text)
    with pytest.raises(AssertionError, match=r"rule: ") as failed:
        rule(info, name)
    if form != "def":  # a binding the judge cannot read fails closed, saying what to write
        assert failed.type is NotAPlainDef and "plain `def`" in str(failed.value), \
            (form, blocks, str(failed.value))


@settings(max_examples=30, **SETTINGS)
@given(st.sampled_from(RULES), st.lists(st.sampled_from(sorted(BLOCKS)), min_size=1, max_size=3))
def test_an_honest_def_in_any_block_keeps_the_rule(rule, blocks):
    """The chip's own def of the rule's function, moved into generated blocks, still passes
    (max_examples=30): a rule that sees the whole tree takes nothing from right work."""
    lab, name, check, _ = rule
    chip = chip_path(lab).read_text()
    node = SourceInfo.parse(Path("chip.py"), chip).definitions(name, follow=False)[0]
    lines = chip.split("\n")
    start, end = node.lineno - 1, node.end_lineno
    moved = lines[:start] + _wrap(blocks, lines[start:end]) + lines[end:]
    info = SourceInfo.parse(Path(f"{lab}.py"), "\n".join(moved))
    assert info.tree is not None, info.syntax_error
    check(info, name)
    check(_chip(lab), name)


@pytest.mark.parametrize("text, how", [
    ("bilinear_sample = len\n", "an assignment"),
    ("from math import floor as bilinear_sample\n", "an import"),
    ("import os\nos.bilinear_sample = 1\ndef bilinear_sample(i, p):\n    return i\n",
     "an attribute written"),
    ("x = 1\n", "has no def"),
    ("for bilinear_sample in ():\n    pass\n", "an assignment"),
    ("try:\n    pass\nexcept Exception as bilinear_sample:\n    pass\n", "an except clause"),
])
def test_a_target_not_bound_as_a_plain_def_fails_closed(text, how):
    info = SourceInfo.parse(Path("lab00.py"), text)
    with pytest.raises(NotAPlainDef, match=how):
        info.loops("bilinear_sample")


def test_every_binding_is_read_and_helpers_are_followed():
    text = ("if flag:\n    def f(x):\n        return x\nelse:\n    def f(x):\n"
            "        return [y for y in x]\n\n"
            "def g(x):\n    return helper(x)\n\ndef helper(x):\n    while x:\n        x -= 1\n")
    info = SourceInfo.parse(Path("m.py"), text)
    assert [loop.lineno for loop in info.loops("f")] == [6]
    assert [loop.lineno for loop in info.loops("g")] == [12]  # in the helper g calls
    assert [node.name for node in info.definitions("g", follow=False)] == ["g"]
    assert info.loops("g", graded_apart=("helper",)) == []  # a function graded on its own
