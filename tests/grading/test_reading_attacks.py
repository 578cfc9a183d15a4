"""Attacks on the judge's reading of the submission (tests/attacks/reading/), graded whole.

Each file there is a lab's chip with a block that breaks one of the lab's rules read off the
source, hidden from a reading that is not the compiler's:

* a ``# -*- coding: utf-7 -*-`` first line (``encoding: utf-7``): read as UTF-8 the block is one
  comment line, compiled as Python compiles the file it is code. The judge decodes the bytes once
  (``grading.isolation.source``) and refuses any encoding but UTF-8, with a message that says so, on
  every test; the child compiles the judge's text, never the bytes again.
* a def nested in a block (``if True:``): the rules find every def bound to a name, wherever it
  stands (``SourceInfo.definitions``).

Each must lose the rule's points (every instance of each ``rule-tests`` test scores 0). A chip
saved with a byte-order mark and CRLF line ends, as some editors write UTF-8, keeps full marks in
every lab (tests/labs/test_chips_and_starters_grade.py). The generated forms of both families are
tried, at the level of the functions the judge calls, in test_reading_properties.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kit import all_tests, chip_path, run_grade

READING = Path(__file__).resolve().parents[1] / "attacks" / "reading"
ATTACKS = sorted(READING.glob("lab[0-9][0-9]_*.py"))


def header(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        match = re.match(r"#\s*(attack|lab|task|rule-tests|encoding|hidden):\s*(.*)$", line)
        if match:  # a key may run over several lines: its values add up
            found[match.group(1)] = f"{found.get(match.group(1), '')} {match.group(2)}".strip()
    return found


def plus_free(text: str) -> str:
    """``text`` with every augmented ``x += y`` written ``x = x + (y)``: the same program, whose
    ``+`` can each be spelled ``+-`` in UTF-7 and still parse when read as UTF-8 (``a +- b``)."""
    return re.sub(r"^(\s*)(\S.*?) \+= (.+)$", r"\1\2 = \2 + (\3)", text, flags=re.M)


def coding_smuggle(visible: str, hidden: str) -> bytes:
    """A file that declares UTF-7: read as UTF-8 it is ``visible`` and one comment line; read as
    UTF-7 (as Python compiles it) it is ``visible`` followed by ``hidden``. In UTF-7 a ``+`` is
    spelled ``+-`` and ``+AAo-`` is a line break."""
    visible = plus_free(visible)
    comment = "# " + ("\n" + hidden).replace("+", "+-").replace("\n", "+AAo-")
    head = "# -*- coding: utf-7 -*-\n"
    data = (head + visible.replace("+", "+-") + "\n" + comment + "\n").encode("ascii")
    assert data.decode("utf-7") == f"{head}{visible}\n# \n{hidden}\n"
    return data


def attack_module(path: Path, folder: Path) -> tuple[dict, Path]:
    """The attack's header and the module it grades (the lab's chip with the block)."""
    head = header(path)
    module = folder / f"{head['lab']}.py"
    chip = chip_path(head["lab"]).read_text()
    block = (path.parent / head["hidden"]).read_text() if "hidden" in head else path.read_text()
    if head.get("encoding") == "utf-7":
        module.write_bytes(coding_smuggle(chip, block))
    else:
        module.write_text(chip + "\n\n" + block)
    return head, module


@pytest.mark.parametrize("path", ATTACKS, ids=lambda p: p.stem)
def test_reading_attack_loses_the_rule(path, tmp_path):
    head, module = attack_module(path, tmp_path)
    result = run_grade(head["lab"], submission=module, tasks=tuple(head["task"].split()))
    tests = list(all_tests(result))
    for name in head["rule-tests"].split():
        found = [t for _, t in tests if t["name"].split("[")[0] == name]
        assert found, f"{path.name}: no test {name} in {[t['name'] for _, t in tests]}"
        for test in found:
            assert test["score"] == 0, \
                f"{path.name}: {test['name']} kept {test['score']} points: {test['message']}"
    if head.get("encoding"):  # refused with a message that says what to change, on every test
        for _, test in tests:
            assert test["status"] == "error" and "UTF-8" in test["message"] \
                and "utf-7" in test["message"], test
