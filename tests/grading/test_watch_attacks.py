"""Attacks on the watches of the student's process (tests/attacks/watch/): each is a lab's chip
with a block appended that breaks a rule watched in the child and switches the watch off or
forges its record (the block uses the chip's names, hence its `ruff: noqa: F821`). Each must
lose that rule's points, since the judge reads in the source that the module can reach the
watch (msda_labs.grading.judge.rules.tamper_uses), and, where the attack keeps the other tests of
the task right, still earn those: the rule's points are what it loses.

Also a reading of the scan itself on small sources: what it flags and what it lets through.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from kit import all_tests, chip_path, lab_ids, run_grade, starter_path

from msda_labs.grading.judge.rules import SourceInfo, tamper_uses, watch_untouched

WATCH = Path(__file__).resolve().parents[1] / "attacks" / "watch"


def _header(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        match = re.match(r"#\s*(attack|lab|task|rule-tests|others-pass):\s*(.*)$", line)
        if match:  # a key may run over several lines: its values add up
            found[match.group(1)] = f"{found.get(match.group(1), '')} {match.group(2)}".strip()
    return found


ATTACKS = sorted(WATCH.glob("lab[0-9][0-9]_*.py"))


def attack_module(path: Path, folder: Path) -> tuple[dict, Path]:
    """The attack's header and the module it grades: the lab's chip with the attack appended
    (the chip's solution markers left as they are)."""
    head = _header(path)
    module = folder / f"{head['lab']}.py"
    module.write_text(chip_path(head["lab"]).read_text() + "\n\n" + path.read_text())
    return head, module


@pytest.mark.parametrize("path", ATTACKS, ids=lambda p: p.stem)
def test_watch_attack_loses_the_rule(path, tmp_path):
    head, module = attack_module(path, tmp_path)
    tasks = tuple(head["task"].split())
    result = run_grade(head["lab"], submission=module, tasks=tasks)
    tests = {t["name"].split("[")[0]: t for _, t in all_tests(result)}
    scored = {name: t["score"] for name, t in tests.items()}
    for name in head["rule-tests"].split():
        assert name in tests, f"{path.name}: no test {name} in {sorted(tests)}"
        assert tests[name]["score"] == 0, \
            f"{path.name}: {name} kept {tests[name]['score']} points: {tests[name]['message']}"
    for name in head.get("others-pass", "").split():
        assert tests[name]["status"] == "passed", \
            f"{path.name}: the attack is meant to be right but for its rule; {name}: " \
            f"{tests[name]['message']}\n{scored}"


def _uses(text: str) -> list[str]:
    path_text = textwrap.dedent(text)
    info = SourceInfo(Path("m.py"), path_text, __import__("ast").parse(path_text))
    return [what for _, what in tamper_uses(info)]


@pytest.mark.parametrize("text, flagged", [
    ("import threading\n", "import threading"),
    ("import torch\nwith torch._C.DisableTorchFunction():\n    pass\n", "torch._C"),
    ("from torch._C import DisableTorchFunction\n", "from torch._C import ..."),
    ("import torch\ntorch.grid_sampler = len\n", "a write to torch.grid_sampler"),
    ("import torch as T\nk = T.nn\nk.functional = None\n", "a write to k.functional"),
    ("import os\nos.sys.settrace(None)\n", ".sys"),
    ("import msda_labs.student.ptx as p\np.compile_ptx = len\n", "a write to p.compile_ptx"),
    ("from triton.runtime.interpreter import InterpretedFunction\n",
     "from triton.runtime.interpreter import ..."),
    ("import torch\nf = torch.compile(len)\n", "torch.compile"),
    ("from torch.overrides import TorchFunctionMode\n", "from torch.overrides import ..."),
    ("class A:\n    def f(self):\n        self.x = 1\nA.f(len)\n", "A.f (a method reached "
                                                                "through its class)"),
    ("class A:\n    def f(self, m):\n        self = m\n        self.x = 1\n", "self rebound"),
    ("def f(t):\n    t.__class__ = int\n", ".__class__"),
    ("class T:\n    def __torch_function__(self, *a):\n        pass\n",
     "def __torch_function__"),
    ("x = eval('1')\n", "eval"),
    ("import functools\nimport torch\nfunctools.update_wrapper(torch.nn.functional, len)\n",
     ".update_wrapper"),
    ("from unittest import mock\n", "from unittest import ..."),
    ("import torch\nloader = torch.utils.data.DataLoader([], num_workers=2)\n",
     "torch.utils.data.DataLoader"),
])
def test_the_scan_names_each_reach(text, flagged):
    assert flagged in _uses(text), _uses(text)


def test_the_scan_lets_plain_lab_code_through():
    text = '''
    from __future__ import annotations
    import math
    import weakref
    import torch
    import triton
    import triton.language as tl
    from torch import nn


    class Layer(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.proj = nn.Linear(n, n)
            self.proj.weight.data.zero_()


    class Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, flag):
            ctx.flag = bool(flag)
            ctx.save_for_backward(x)
            return x * 2


    @triton.jit
    def kernel(x_ptr, n: tl.constexpr):
        pass


    def check(x):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"expected a tensor, got {type(x).__name__}")
        torch._assert_async(x.numel() > 0)
        return math.prod(x.shape), weakref.ref(x), Op.apply(x, True)


    if __name__ == "__main__":
        import sys
        sys.settrace(None)
    '''
    assert _uses(text) == []


def test_watch_untouched_names_the_line():
    info = SourceInfo(Path("m.py"), "import torch\ntorch.equal = len\n",
                      __import__("ast").parse("import torch\ntorch.equal = len\n"))
    with pytest.raises(AssertionError, match=r"the loop rule is watched .* line 2 .*torch\.equal"):
        watch_untouched(info, "the loop rule")


def _launcher_uses(text: str) -> list[str]:
    import ast
    import sys

    folder = str(Path(__file__).resolve().parents[2] / "lab-10-ship-it" / "tests")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import judge_lab10

    info = SourceInfo(Path("m.py"), text, ast.parse(text))
    return [what for _, what in judge_lab10.launcher_uses(info)]


@pytest.mark.parametrize("text, flagged", [
    ("def msda_forward(*a):\n    pass\n", "def msda_forward"),
    ("f = msda_forward\n", "msda_forward used but not called"),
    ("def g(f=msda_backward):\n    pass\n", "msda_backward used but not called"),
    ("from msda_labs.student.shipped import msda_forward as f\n", "import msda_forward"),
    ("from msda_labs.student import shipped\nshipped.msda_forward(1)\n",
     "shipped.msda_forward (a launcher reached past its global name)"),
    ("def g():\n    global msda_forward\n    msda_forward = len\n", "global msda_forward"),
])
def test_lab10_launchers_are_bound_and_called_as_the_starter_does(text, flagged):
    assert flagged in _launcher_uses(text), _launcher_uses(text)


def test_lab10_starter_lines_and_plain_loads_pass():
    text = textwrap.dedent('''
    from msda_labs.student import shipped
    from msda_labs.student.earlier import load
    if FLAG:
        msda_forward, FORWARD_SOURCE = load(6, "msda_forward_autotuned")
        msda_backward, BACKWARD_SOURCE = load(8, "msda_backward")
    else:
        msda_forward, FORWARD_SOURCE = shipped.msda_forward, "shipped"
        msda_backward, BACKWARD_SOURCE = shipped.msda_backward, "shipped"
    switch = load(9, "use_fp32_grad_accum").obj


    def run(x):
        return msda_forward(x), msda_backward(x, fp32_grad_accum=True)
    ''')
    assert _launcher_uses(text) == []
    for lab_file in (chip_path("lab10"), Path(__file__).resolve().parents[2] / "lab-10-ship-it"
                     / "lab10.py"):
        assert _launcher_uses(lab_file.read_text()) == [], lab_file


@pytest.mark.parametrize("lab", lab_ids())
def test_every_chip_and_starter_passes_the_scan(lab):
    # A finding here would cost right work the watched rules' points.
    for path in (chip_path(lab), starter_path(lab)):
        assert tamper_uses(SourceInfo.read(path)) == [], path


def test_a_lab_may_allow_reading_a_part_but_never_writing_it():
    import ast

    text = ("import triton\nfrom triton.compiler import ASTSource\nsrc = ASTSource\n"
            "triton.compiler.x = 1\n")
    info = SourceInfo(Path("m.py"), text, ast.parse(text))
    allowed = [what for _, what in tamper_uses(info, allow=("triton.compiler",))]
    assert allowed == ["a write to triton.compiler.x"], allowed
    assert "from triton.compiler import ..." in [what for _, what in tamper_uses(info)]
