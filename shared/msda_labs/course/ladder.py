"""The rules the ladder teaches, and where each lab grades them: the single source of the audit.

A test that enforces a rule says so with ``@pytest.mark.rule("int64-offsets")`` (several rules:
several markers, or several names in one). The grading plugin refuses a rule name that is not in
:data:`RULES`, as it refuses an unknown task. A cell (rule, lab) is then one of:

* graded: at least one test of the lab carries the rule's marker;
* not applicable: :data:`NOT_APPLICABLE` says why;
* a known gap: :data:`GAPS` says what is missing (shown loudly in the table);

and never two of them, never none. ``python -m msda_labs sync`` writes the table into
``docs/ladder.md`` from the tests' markers; ``sync --check`` and the self-test fail when the file
is stale or a cell breaks the rule above.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

__all__ = ["RULES", "columns", "NOT_APPLICABLE", "GAPS", "DOC", "cell_problems", "render",
           "unknown_rules"]

# rule id -> what the rule says (one line of the table).
RULES: OrderedDict[str, str] = OrderedDict([
    ("int64-offsets", "Offsets in int64: `b * S * M * D` passes 2**31 at real sizes"),
    ("fp32-accumulation", "Compute and accumulate in fp32, cast once where the result is stored"),
    ("mask-query-tail", "The query (row) mask: lanes past `Q` (or `n`) neither read nor write"),
    ("mask-channel-tail", "The channel mask: channels past `D` (non-power-of-two `D`, ragged "
                          "chunks) neither read nor write"),
    ("mask-corners", "The corner masks: a corner outside its level is neither read nor written"),
    ("zero-padding", "Zero padding outside each level, never clamping to the border"),
    ("half-pixel", "The half-pixel shift: `x * W - 0.5`, `y * H - 0.5`"),
    ("floor", "`floor`, not truncation toward zero, for the top-left corner"),
    ("xy-order", "x runs along the width, y along the height; `spatial_shapes` rows are (H, W)"),
    ("level-starts", "Levels in order, each read from its own start along `S`"),
    ("write-once", "Every output element written exactly once (outputs start as garbage)"),
    ("atomics", "Atomic adds where writes collide (lanes or programs that share a pixel)"),
    ("accumulator-switch", "The fp32 gradient-accumulator switch (`fp32_grad_accum`)"),
])


def columns(graded: dict[tuple[str, str], list[str]]) -> tuple[str, ...]:
    """The labs of the audit: every lab that a test's rule marker, a reason why a rule does not
    apply, or a known gap names (labs 00 and 03 teach no kernel rule, so they are none), in
    order. A lab joins the audit by carrying a rule marker: no list here names it."""
    return tuple(sorted({lab for _, lab in (*graded, *NOT_APPLICABLE, *GAPS)}))


_NO_BLOCKS = "no blocks of lanes: the loops or tensor ops visit only elements that exist"
_TORCH_OUT = "the function returns tensors it builds; nothing is allocated to be forgotten"
_TORCH_FP = ("torch on fp32 or fp64 inputs, graded at their own precision: there is no narrower "
             "dtype to accumulate in")
_GATHER = "a gather: each output has one owner, no two writes meet"
_BACKWARD_ONLY = "the switch picks the backward's grad_value buffer (labs 08-10)"
_LAB07_GIVEN = ("the given gather_corners computes the pixel coordinates, the floor, the level "
                "starts and the corner rows; the student's three functions receive its corners")
_LAB09 = "lab 09 compiles and reads the lab 08 chip; the student writes no kernel arithmetic"
_LAB10 = ("lab 10 calls the lab 05 and 08 kernels as loaded; the student writes no kernel "
          "arithmetic (the exam runs them end to end)")


def _each(rules: str, labs: str, why: str) -> dict[tuple[str, str], str]:
    """``why`` for every pair of the space-separated ``rules`` and ``labs``."""
    return {(rule, lab): why for rule in rules.split() for lab in labs.split()}


# The rules of a kernel's own arithmetic and masks: labs 09 and 10 have no student kernel.
_KERNEL_RULES = ("mask-query-tail mask-channel-tail mask-corners zero-padding half-pixel floor "
                 "xy-order")

# (rule, lab) -> why the rule does not apply there.
NOT_APPLICABLE: dict[tuple[str, str], str] = {
    ("int64-offsets", "lab01"): "scalar Python arithmetic on ints, which cannot overflow",
    ("int64-offsets", "lab04"): "lab 04's exercises are single small images and vectors by "
                                "design; the kernel rule is taught with lab 05's Task 5.4",
    ("int64-offsets", "lab07"): _LAB07_GIVEN + " (int64 row indices, which the scatter uses "
                                               "as they are)",
    ("int64-offsets", "lab09"): _LAB09 + " (its signature test checks the int64 level tables)",
    ("mask-corners", "lab01"): "one scalar corner at a time: a corner outside the level is the "
                               "zero-padding rule, there is no memory access to mask",
    ("level-starts", "lab04"): "the bilinear kernel reads one image: there is one level",
    ("atomics", "lab04"): _GATHER + " (Task 4.2 checks the gather is not written as a scatter)",
    ("accumulator-switch", "lab07"): "lab 07 returns fp32 gradients; the switch arrives with "
                                     "the half-precision kernel of lab 08",
    **_each("half-pixel floor level-starts", "lab07", _LAB07_GIVEN),
    **_each("fp32-accumulation", "lab01 lab02 lab07", _TORCH_FP),
    **_each("write-once", "lab01 lab02 lab07", _TORCH_OUT),
    **_each("mask-query-tail mask-channel-tail", "lab01 lab02 lab07", _NO_BLOCKS),
    **_each("atomics", "lab01 lab02 lab05 lab06", _GATHER),
    **_each("accumulator-switch", "lab01 lab02 lab04 lab05 lab06", _BACKWARD_ONLY),
    **_each(f"fp32-accumulation write-once level-starts {_KERNEL_RULES}", "lab09", _LAB09),
    **_each(f"fp32-accumulation write-once atomics {_KERNEL_RULES}", "lab10", _LAB10),
}

# (rule, lab) -> what is missing: the rule applies and no test grades it yet. Shown as GAP.
GAPS: dict[tuple[str, str], str] = {}

DOC = Path("docs") / "ladder.md"
BEGIN, END = "<!-- ladder:begin -->", "<!-- ladder:end -->"


def unknown_rules(names) -> list[str]:
    """The names among ``names`` that are not rules of the ladder."""
    return [name for name in names if name not in RULES]


def cell_problems(graded: dict[tuple[str, str], list[str]]) -> list[str]:
    """What is wrong with the cells, given ``graded`` = {(rule, lab): [test, ...]}."""
    problems = []
    labs = columns(graded)
    for key in sorted(set(NOT_APPLICABLE) | set(GAPS) | set(graded)):
        rule, lab = key
        if rule not in RULES:
            problems.append(f"{lab}: unknown rule {rule!r}")
    for rule in RULES:
        for lab in labs:
            kinds = [name for name, there in (("graded", bool(graded.get((rule, lab)))),
                                              ("not applicable", (rule, lab) in NOT_APPLICABLE),
                                              ("a known gap", (rule, lab) in GAPS)) if there]
            if not kinds:
                problems.append(f"{rule} in {lab}: no test carries the marker and no reason "
                                f"says why the rule does not apply (an empty cell)")
            elif len(kinds) > 1:
                problems.append(f"{rule} in {lab}: both {' and '.join(kinds)}")
    return problems


def _cell(rule: str, lab: str, graded, gpu_tests: set[str]) -> str:
    tests = graded.get((rule, lab))
    if tests:
        return "<br>".join(f"`{t}`" + (" (GPU)" if t in gpu_tests else "") for t in tests)
    if (rule, lab) in NOT_APPLICABLE:
        return f"n/a: {NOT_APPLICABLE[(rule, lab)]}"
    if (rule, lab) in GAPS:
        return f"**GAP**: {GAPS[(rule, lab)]}"
    return "**EMPTY**"


def render(graded: dict[tuple[str, str], list[str]], gpu_tests: set[str] = frozenset()) -> str:
    """The table, one section per rule (a 13 x 9 grid of test names is unreadable as one)."""
    labs = columns(graded)
    lines = ["| rule | " + " | ".join(lab.replace("lab", "lab ") for lab in labs) + " |",
             "|---|" + "---|" * len(labs)]
    for rule in RULES:
        marks = []
        for lab in labs:
            tests = graded.get((rule, lab))
            if tests:
                on_gpu = sum(test in gpu_tests for test in tests)
                counts = [f"{len(tests) - on_gpu}"] if len(tests) > on_gpu else []
                marks.append(" + ".join(counts + ([f"{on_gpu} GPU"] if on_gpu else [])))
            else:
                marks.append("n/a" if (rule, lab) in NOT_APPLICABLE else
                             ("GAP" if (rule, lab) in GAPS else "EMPTY"))
        lines.append(f"| [{rule}](#{rule}) | " + " | ".join(marks) + " |")
    lines.append("")
    lines.append("Numbers count the tests that carry the rule's marker in that lab; \"GPU\" "
                 "ones grade only in the GPU stage.")
    for rule, text in RULES.items():
        lines += ["", f"### {rule}", "", text + ".", "", "| lab | where it is graded |",
                  "|---|---|"]
        for lab in labs:
            lines.append(f"| {lab} | {_cell(rule, lab, graded, gpu_tests)} |")
    return "\n".join(lines)


def splice(text: str, table: str) -> str:
    """``text`` with the part between the ladder markers replaced by ``table``."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"{DOC} lacks the markers {BEGIN} and {END}")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"
