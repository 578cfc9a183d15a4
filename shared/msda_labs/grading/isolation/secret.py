"""The instructor's secret seed, and the per-submission salt that the children get instead.

The secret comes from ``--seed`` (grade, regrade), ``$MSDA_GRADE_SEED`` or a file named by
``--seed-file`` / ``$MSDA_GRADE_SEED_FILE`` (the last two keep it off command lines, which every
user of the machine can read in ``/proc/<pid>/cmdline``). The judge derives::

    salt = HMAC-SHA256(key=secret, message=SHA-256(submission bytes))  ->  first 8 bytes, big
                                                                          endian, top bit cleared

and hands it to the grading job, which draws the judge's cases with it and gives it to its
workers as ``$MSDA_CASE_SALT``; the case generator mixes it into every seed (0 = the published
cases). The secret itself never reaches a worker
(:mod:`msda_labs.grading.isolation.executor` drops every variable named like a seed). A student who
prints their inputs learns the cases of that one file only: any other file gets other cases.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from msda_labs.errors import KitError

__all__ = ["SEED_ENV", "SEED_FILE_ENV", "SALT_ENV", "read_secret", "case_salt"]

SEED_ENV = "MSDA_GRADE_SEED"
SEED_FILE_ENV = "MSDA_GRADE_SEED_FILE"
SALT_ENV = "MSDA_CASE_SALT"
_INT63 = (1 << 63) - 1


def read_secret(seed: int | str | None = None, seed_file: str | Path | None = None) -> str | None:
    """The secret: ``seed`` if given, else the contents of ``seed_file``, else
    ``$MSDA_GRADE_SEED``, else the file ``$MSDA_GRADE_SEED_FILE``; None when there is none."""
    if seed is not None and str(seed).strip():
        return str(seed).strip()
    path = seed_file or None
    if path is None:
        env = os.environ.get(SEED_ENV, "").strip()
        if env:
            return env
        path = os.environ.get(SEED_FILE_ENV, "").strip() or None
    if path is None:
        return None
    try:
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise KitError(f"cannot read the seed file {path}: {exc.strerror or exc}") from None
    if not text:
        raise KitError(f"the seed file {path} is empty: put the secret seed in it (one line)")
    return text


def case_salt(secret: str | None, submission: bytes) -> int:
    """The salt of one submission: 0 without a secret, else a non-negative int63 that changes
    with every byte of the submission and with the secret."""
    if not secret:
        return 0
    digest = hmac.new(secret.encode(), hashlib.sha256(submission).digest(), hashlib.sha256)
    return int.from_bytes(digest.digest()[:8], "big") & _INT63
