"""Mistakes named in prose: the reader of a message that names a mistake in words.

The grader keeps its evidence as data (:class:`~msda_labs.grading.judge.results.Evidence`); this
module reads prose only where none was kept: a test that still explains itself in a message
(read once, by the plugin, when its result is recorded) and grade.json written before tests kept
evidence (the class page, :func:`read_old_messages`). The diagnosis itself never reads a
message. The catalogues need torch; where it is not installed (the regrade workflow's gradebook
job) only the grader's phrases name mistakes.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import TYPE_CHECKING

from msda_labs.grading.judge.diagnosis import FAILING, label_of

if TYPE_CHECKING:
    from msda_labs.grading.judge.results import GradeResult

__all__ = ["catalogue_sentences", "named_mistakes", "read_old_messages"]

_EXACT = re.compile(r"this is exactly the output of (?P<text>[^;]+)")
_THIS_IS = re.compile(r"this is an? (?P<label>[^:;]{3,80}): (?P<meaning>[^;]+)")
# A rule the submission breaks (grading.judge.rules, a test's own rule): "rule: X must ...; why".
_RULE = re.compile(r"^(?P<label>rules?: [^;(]{3,120}?)\s*(?:[;(]\s*(?P<meaning>[^;]*))?(?:;|$)")
# The worker's "... (line 150 of lab05.py)": where in the student's file an error came from.
_LINE = re.compile(r"\(line (?P<line>\d+) of [^)\s]+\)")


@functools.cache
def catalogue_sentences() -> tuple[tuple[str, str, str], ...]:
    """``(key, label, sentence)`` for every sentence of every mistake catalogue (empty where
    torch is not installed)."""
    try:
        from msda_labs.mistakes import (
            forward,
            gradients,
            grid_sample,
            layers,
            memory,
            plumbing,
            pointers,
            submissions,
        )
        from msda_labs.mistakes.registry import Catalogue
    except ImportError:
        return ()
    sentences = []
    for module in (forward, gradients, grid_sample, layers, memory, plumbing, pointers,
                   submissions):
        for value in vars(module).values():
            if not isinstance(value, Catalogue):
                continue
            for mistake in value.entries():
                whys = mistake.why.values() if isinstance(mistake.why, dict) else [mistake.why]
                for why in whys:
                    if isinstance(why, str) and len(why) > 12:
                        sentences.append((f"{value.kind}/{mistake.name}", label_of(why), why))
    return tuple(sentences)


def named_mistakes(message: str, catalogue=None) -> list[tuple[str, str]]:
    """The known mistakes a message written in prose names, as ``(label, meaning)`` pairs.

    Only for a test that keeps no evidence (read once, when its result is recorded) and for
    grade.json written before evidence: a catalogue sentence in the message names its mistake;
    otherwise "this is exactly the output of X", "this is a/an X: why" and a broken rule
    ("rule: X must ...; why") name X.
    """
    if catalogue is None:
        catalogue = catalogue_sentences()
    found: dict[str, str] = {}
    for _key, label, sentence in catalogue:
        if sentence in message and label not in found:
            found[label] = sentence
    if found:
        return list(found.items())
    match = _EXACT.search(message)
    if match:
        text = match.group("text").strip()
        return [(label_of(text), text)]
    match = _THIS_IS.search(message)
    if match:
        return [(match.group("label").strip(), match.group("meaning").strip())]
    match = _RULE.match(message.strip())
    if match:
        label = match.group("label").strip()
        why = (match.group("meaning") or "").strip().removesuffix(")").strip()
        return [(label, f"{label}: {why}" if why else label)]
    return []


# How an earlier kit's comparison said that values were wrong: "3 of 8 elements differ".
_DIFFER = re.compile(r"(?P<wrong>\d+) of (?P<total>\d+) elements? differ")


def read_old_messages(result: GradeResult, catalogue=None) -> GradeResult:
    """A copy of ``result`` whose tests, where written before tests kept their evidence, have it
    filled from their messages the way the plugin reads a test that explains itself in prose: the
    one mistake a message names, an error's line. A test that has evidence is left alone, and
    ``result`` itself is never changed (a regrade's rows are sealed with a digest of it)."""
    result = copy.deepcopy(result)
    for ex in result.exercises:
        for test in ex.tests:
            ev = test.evidence
            if str(test.status) not in FAILING or any(
                    (ev.named, ev.matched, ev.error, ev.first_wrong, ev.case)):
                continue
            match = _LINE.search(test.message) if str(test.status) == "error" else None
            if match is not None:
                ev.line = int(match.group("line"))
                ev.error = test.message[:match.start()].strip().removeprefix(
                    "while importing your module: ")
                continue
            names = named_mistakes(test.message, catalogue)
            if len(names) == 1:
                label, meaning = names[0]
                ev.named = meaning if meaning.startswith(label) else f"{label}: {meaning}"
            counted = _DIFFER.search(test.message)
            if counted is not None:  # "3 of 8 elements differ": the code ran and went wrong
                ev.wrong, ev.total = int(counted.group("wrong")), int(counted.group("total"))
    return result
