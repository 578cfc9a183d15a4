"""The grader: the grading flow (session), one stage of one lab here (stage_run), isolation
(executor, zygote), the pytest plugin and what a test sees of a submission, comparisons,
results, renderers, the integrity of a lab's grading files.

Lab tests import the comparisons from here::

    from msda_labs.grading import expect_close, expect_equal

They load on first use (the comparisons import torch; the command line, the exporter and the
results writers do not need it).
"""

from __future__ import annotations

import importlib

__all__ = ["expect_close", "expect_equal", "expect_tensor", "describe_value"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("msda_labs.grading.judge.compare"), name)
    raise AttributeError(f"module 'msda_labs.grading' has no attribute {name!r}")
