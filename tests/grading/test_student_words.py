"""The student's language: no grader-internal names, balanced brackets, every cut marked, and a
label never cut inside brackets (generated attacks with Hypothesis, the same examples each run)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from msda_labs.grading.judge.diagnosis import clip, label_of, student_words

_WORDS = st.lists(st.sampled_from(["mask", "offs_c", "<", "C", "(offs_r", "< R)", "[:, None]",
                                   "&", "{x}", "row:", "stride", "tail:", "(a", "b)", "[i]"]),
                  min_size=1, max_size=40).map(" ".join)


def _balanced(text: str) -> bool:
    stack = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in text:
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack


@settings(max_examples=300, derandomize=True, deadline=None)
@given(_WORDS, st.integers(min_value=10, max_value=120))
def test_a_cut_is_marked_and_leaves_no_bracket_open(text, limit):
    out = clip(text, limit)
    if len(text) <= limit:
        assert out == text
    else:
        assert "…" in out and len(out) <= limit + 2 + text.count("(") + text.count("[") \
            + text.count("{")
        if _balanced(text):
            assert _balanced(out)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(_WORDS)
def test_a_label_ends_at_a_colon_outside_brackets(sentence):
    label = label_of(sentence)
    if _balanced(sentence):
        assert _balanced(label)
    if "…" not in label:  # not cut: the sentence up to its first colon outside brackets
        whole = sentence.strip()
        assert whole.startswith(label)
        assert whole[len(label):].lstrip()[:1] in ("", ":")


def test_grader_internal_names_read_as_the_students():
    text = ("TypeError: msda_labs.grading.judge.spies.KernelLaunches._wrap.<locals>.wrapper() got "
            "multiple values for argument 'BLOCK_Q'")
    assert student_words(text) == "TypeError: wrapper() got multiple values for argument " \
                                  "'BLOCK_Q'"
    assert student_words("triton.runtime.jit.JITFunction.run() failed") == "run() failed"
    assert student_words("your copy2d_kernel(x, y) failed") == "your copy2d_kernel(x, y) failed"
