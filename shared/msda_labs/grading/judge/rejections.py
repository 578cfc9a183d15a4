"""Judge side of input validation: did the submission refuse bad input the way the spec says?

A probe calls the submission's validating function on each bad input with
:func:`msda_labs.grading.judge.spies.outcome` and returns ``(exception type name, message)`` pairs;
:func:`expect_rejections` reads them. A refusal passes when it is a ValueError whose message
names what it must: the argument, the shape (or dtype) that was expected and the one that came.
A shape counts as named in any common spelling: ``(2, 3)``, ``[2, 3]``, ``torch.Size([2, 3])``,
with or without spaces.
"""

from __future__ import annotations

from msda_labs.grading.judge.compare import Mismatch
from msda_labs.grading.judge.diagnosis import clip
from msda_labs.grading.judge.results import Evidence

__all__ = ["mentions", "expect_rejections", "LEAVES_OUT"]

# The label of a refusal whose message leaves out what it must name.
LEAVES_OUT = "a ValueError message that leaves something out"


def _shape_forms(shape) -> list[str]:
    inner = ",".join(str(int(s)) for s in shape)
    forms = [f"({inner})", f"[{inner}]"]
    if len(shape) == 1:
        forms.append(f"({inner},)")
    return forms


def _squash(message: str) -> str:
    text = "".join(message.split())
    return text.replace("torch.Size([", "(").replace("])", ")")


def mentions(message: str, item) -> bool:
    """Whether ``message`` names ``item``: a shape tuple (any common spelling), or a word
    (case-insensitive)."""
    if isinstance(item, tuple):
        text = _squash(message)
        return any(form in text for form in _shape_forms(item))
    return str(item).lower() in message.lower()


def expect_rejections(outcomes, cases, entry: str = "validate_inputs") -> None:
    """Every outcome must be a ValueError whose message names each item its case requires.

    Args:
        outcomes: ``(exception type name or "none", message)`` per case, in order.
        cases: ``(label, args, must)`` per case: ``label`` says in words what was wrong with
            the input, ``must`` lists what the message has to name (see :func:`mentions`).
        entry: the name of the function that was called, for the messages.

    Raises:
        AssertionError: for the first case that was accepted, refused with another exception,
            or refused with a message that leaves something out.
    """
    for (label, _args, must), (kind, message) in zip(cases, outcomes):
        if kind == "none":
            raise AssertionError(f"{entry} accepted {label}; it must raise ValueError")
        if kind != "ValueError":
            raise AssertionError(f"{entry} raised {kind} for {label} ({clip(message, 200)}); "
                                 f"raise a ValueError that says what is wrong")
        missing = [item for item in must if not mentions(message, item)]
        if missing:
            shown = ", ".join(str(m) for m in missing)
            # Seen, not guessed: the input was refused the right way, and the message's own
            # text lacks what it must name.
            named = (f"{LEAVES_OUT}: the ValueError for {label} must name the argument, what was "
                     f"expected and what came; {clip(message, 200)!r} does not mention {shown}")
            raise Mismatch(f"the ValueError for {label} must name the argument, what was "
                           f"expected and what came; {message!r} does not mention {shown}",
                           Evidence(function=entry, case=label, named=named))
