"""Fixtures of the act workflow harness: the tools act needs, or a skip that says why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import act_env  # noqa: E402


@pytest.fixture(scope="session")
def act_setup() -> act_env.ActSetup:
    try:
        return act_env.setup()
    except act_env.Unavailable as exc:
        pytest.skip(f"act cannot run the workflows here: {exc}")
