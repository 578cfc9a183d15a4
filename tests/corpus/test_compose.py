"""compose: an attempt's definitions replace the chip's of the same name, and nothing else does.

Generated chips and attempts (Hypothesis, 60 examples, the same each run): every function of the
composed module returns the attempt's value where the attempt defines it and the chip's
elsewhere; new definitions are added, before the ``__main__`` block."""

from compose import compose
from hypothesis import given, settings
from hypothesis import strategies as st

NAMES = st.sets(st.sampled_from(["alpha", "beta", "gamma", "delta", "eps"]), min_size=1)


def _module(names, tag, *, decorated=False, main=False):
    lines = ['"""doc"""', "import math", ""]
    for name in sorted(names):
        if decorated:
            lines.append("@staticmethod.__func__ if False else (lambda f: f)")
        lines += [f"def {name}():", "    # a comment", f"    return ({tag!r}, {name!r})", ""]
    if main:
        lines += ['if __name__ == "__main__":', "    pass"]
    return "\n".join(lines) + "\n"


@settings(max_examples=60, derandomize=True, deadline=None)
@given(chip_names=NAMES, attempt_names=NAMES, decorated=st.booleans())
def test_attempt_definitions_replace_the_chips(chip_names, attempt_names, decorated):
    chip = _module(chip_names, "chip", main=True)
    attempt = _module(attempt_names, "attempt", decorated=decorated)
    namespace = {"__name__": "composed"}
    exec(compile(compose(chip, attempt), "composed.py", "exec"), namespace)
    for name in chip_names | attempt_names:
        expected = "attempt" if name in attempt_names else "chip"
        assert namespace[name]() == (expected, name)


def test_a_replaced_definition_leaves_no_trace():
    chip = _module({"alpha", "beta"}, "chip", main=True)
    out = compose(chip, "import os\n\n\ndef alpha():\n    return os.sep\n")
    assert out.count("def alpha") == 1 and "('chip', 'alpha')" not in out
    assert out.index("import os") < out.index("def alpha") < out.index("__main__")
