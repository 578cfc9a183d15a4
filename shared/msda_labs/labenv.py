"""The one environment every lab session of a checkout shares: ``.venv`` at its root.

``nox -s lab05``, ``nox -s lab01`` and ``nox -s progress`` all grade with the same virtualenv:
built by the first of them (the pinned torch, CPU build, and triton; ``pip install -e shared``),
reused by every later run. pip runs again only when what it installed changed: the key of the
environment (the hash of ``requirements.txt``, of ``shared/pyproject.toml``, of the extra
packages and of the Python version) is kept in ``.venv/msda-env.json``. A warm session therefore
costs nox's start and this check, a fraction of a second, on top of the grader's own time.

The same ``.venv`` is what editors pick up and what runs a lab by hand::

    nox -s lab05                      # builds .venv once, then grades
    .venv/bin/python lab-05-forward-correct/lab05.py      # or: source .venv/bin/activate

Standard library only: the noxfiles load this file by its path before anything is installed (as
they load :mod:`msda_labs.gpu.where`).
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["ENV_DIR", "STAMP", "environment_key", "python_of", "ensure"]

ENV_DIR = ".venv"
STAMP = "msda-env.json"


def python_of(env: Path) -> Path:
    """The interpreter of the virtualenv ``env``."""
    if platform.system() == "Windows":
        return Path(env) / "Scripts" / "python.exe"
    return Path(env) / "bin" / "python"


def environment_key(root: Path, extras: Sequence[str] = ()) -> str:
    """What the environment depends on: the pins, the package's metadata, the extras, Python."""
    h = hashlib.sha256()
    for name in ("requirements.txt", "shared/pyproject.toml"):
        path = Path(root) / name
        h.update(name.encode())
        h.update(path.read_bytes() if path.is_file() else b"(absent)")
    h.update("\n".join(extras).encode())
    h.update(f"{sys.version_info.major}.{sys.version_info.minor} {platform.machine()}".encode())
    return h.hexdigest()[:20]


def _stamp(env: Path) -> dict:
    try:
        return json.loads((Path(env) / STAMP).read_text())
    except (OSError, ValueError):
        return {}


def ensure(root: Path, run: Callable[[list[str]], object], *, extras: Sequence[str] = (),
           index_args: Callable[[], list[str]] = list, log: Callable[[str], object] = print,
           base_python: str = sys.executable) -> Path:
    """The interpreter of ``root/.venv``, built or brought up to date only when needed.

    Args:
        root: the checkout (holds requirements.txt and shared/).
        run: runs one command (a list of strings); raises when it fails (nox's
            ``session.run(*cmd, external=True)``).
        extras: more pinned packages for this environment (every lab session passes the same).
        index_args: pip's extra index arguments, asked for only when pip is about to run (it
            may probe the network).
        log: where to say what happens.
        base_python: the interpreter that creates the virtualenv.
    """
    env = Path(root) / ENV_DIR
    python = python_of(env)
    key = environment_key(root, extras)
    if python.exists() and _stamp(env).get("key") == key:
        return python
    if not python.exists():
        log(f"building the lab environment {env} (once for every lab of this checkout)")
        run([base_python, "-m", "venv", str(env)])
    else:
        log(f"the pins changed since {env} was built: installing them")
    run([str(python), "-m", "pip", "install", "--disable-pip-version-check", *index_args(),
         "-r", str(Path(root) / "requirements.txt"), *extras])
    run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-e",
         str(Path(root) / "shared")])
    (env / STAMP).write_text(json.dumps({"key": key, "extras": list(extras)}) + "\n")
    return python
