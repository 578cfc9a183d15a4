import pytest

from msda_labs.authoring.fences import FenceError, solution_blocks, strip

CHIP = '''def f(x):
    # TODO(Task 1.1): double it (about 1 line)
    # BEGIN SOLUTION
    return 2 * x
    # STARTER
    # raise NotImplementedError("Task 1.1: f")
    # END SOLUTION
'''


def test_strip_keeps_outside_and_uncomments_starter():
    assert strip(CHIP) == ('def f(x):\n    # TODO(Task 1.1): double it (about 1 line)\n'
                           '    raise NotImplementedError("Task 1.1: f")\n')


@pytest.mark.parametrize("text, where", [
    ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n", ":2: BEGIN SOLUTION inside"),
    ("# END SOLUTION\n", ":1: END SOLUTION without"),
    ("# STARTER\n", ":1: STARTER outside"),
    ("x = 1\n# BEGIN SOLUTION\ny = 2\n", "opened at line 2 is never closed"),
    ("# BEGIN SOLUTION\n# STARTER\nraise X\n# END SOLUTION\n", ":3: a STARTER line must be"),
])
def test_malformed_fences_fail_loudly(text, where):
    with pytest.raises(FenceError, match=where):
        strip(text, "chip")


def test_solution_blocks_are_the_answers_only():
    chip = CHIP.replace("    return 2 * x\n", "    y = x\n    y = y + x\n\n    return y\n")
    assert solution_blocks(chip) == ["y = x\ny = y + x\nreturn y"]  # stripped, no blank lines
    assert solution_blocks(CHIP) == []  # one line is too common to call a leak
    assert solution_blocks(CHIP, min_lines=1) == ["return 2 * x"]


def test_solution_blocks_share_the_strict_parser():
    with pytest.raises(FenceError, match=":1: END SOLUTION without"):
        solution_blocks("# END SOLUTION\n", name="chip")
