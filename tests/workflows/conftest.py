"""Fixtures of the act workflow harness: the tools act needs, or a skip that says why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import act_env  # noqa: E402


@pytest.fixture(scope="session")
def act_setup() -> act_env.ActSetup:
    """act's tools, and its cache server seeded with the exported workflow's grading
    environment (one cold run per machine and set of pins; every later run restores it)."""
    try:
        setup = act_env.setup()
    except act_env.Unavailable as exc:
        pytest.skip(f"act cannot run the workflows here: {exc}")
    from harness import ensure_env_cache
    from kit import MANIFEST

    from msda_labs.classroom.export import export_lab

    ensure_env_cache(setup, lambda out: export_lab(MANIFEST, MANIFEST.lab("lab01"), out,
                                                   git=True))
    return setup
