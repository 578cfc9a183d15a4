"""Where a GPU stage can run: local CUDA, Modal with the user's own account, or nowhere.

Standard library only, so that the noxfile can ask before it installs anything (a student
without a GPU and without Modal learns how to enable one in seconds, not after a download of
several hundred megabytes)::

    python shared/msda_labs/gpu/where.py lab06   # "local" or "modal", else the how-to (exit 2)

The choice, in order:

1. ``MSDA_GPU_RUNNER=local|modal`` forces one (``auto``, the default, decides as below);
2. local CUDA when torch sees a device (when torch is not importable, e.g. in the noxfile before
   anything is installed, an NVIDIA driver on this machine counts as a yes);
3. Modal when credentials exist: ``MODAL_TOKEN_ID`` and ``MODAL_TOKEN_SECRET`` in the
   environment, or a token in ``~/.modal.toml`` (``$MODAL_CONFIG_PATH`` when set);
4. otherwise :class:`GpuUnavailable`, whose message says exactly how to enable either.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["GpuUnavailable", "RUNNER_ENV", "modal_credentials", "nvidia_driver", "torch_cuda",
           "route", "how_to_enable"]

RUNNER_ENV = "MSDA_GPU_RUNNER"
MODAL_VERSION = "1.6.4"


class GpuUnavailable(RuntimeError):
    """No CUDA device here and no Modal credentials: the message says how to enable either."""


def _modal_config_path() -> Path:
    return Path(os.environ.get("MODAL_CONFIG_PATH") or Path.home() / ".modal.toml")


def modal_credentials() -> str | None:
    """Where Modal credentials come from (a short description), or None when there are none."""
    if os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET"):
        return "MODAL_TOKEN_ID/MODAL_TOKEN_SECRET"
    path = _modal_config_path()
    try:
        text = path.read_text()
    except OSError:
        return None
    # A profile written by `modal token new` or `modal token set` holds both keys.
    if "token_id" in text and "token_secret" in text:
        return str(path)
    return None


def nvidia_driver() -> bool:
    """True when this machine looks like it has an NVIDIA GPU with a driver (no torch needed)."""
    return (Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidiactl").exists()
            or shutil.which("nvidia-smi") is not None)


def torch_cuda() -> bool | None:
    """Whether torch sees a CUDA device; None when torch is not importable here."""
    try:
        import torch
    except ImportError:
        return None
    return bool(torch.cuda.is_available())


def route(lab: str = "this lab", *, use_torch: bool = True) -> str:
    """``"local"`` or ``"modal"``; raises :class:`GpuUnavailable` when neither is possible.

    With ``use_torch=False`` (the noxfile, before torch is installed) an NVIDIA driver stands in
    for "torch sees a device"."""
    forced = os.environ.get(RUNNER_ENV, "auto").strip().lower() or "auto"
    if forced not in ("auto", "local", "modal"):
        raise GpuUnavailable(f"{RUNNER_ENV}={forced!r} is not one of auto, local, modal")
    cuda = torch_cuda() if use_torch else None
    if cuda is None:
        cuda = nvidia_driver()
    if forced == "local":
        if not cuda:
            raise GpuUnavailable(f"{RUNNER_ENV}=local, but there is no CUDA device here.\n"
                                 + how_to_enable(lab))
        return "local"
    if forced == "auto" and cuda:
        return "local"
    if modal_credentials():
        return "modal"
    if forced == "modal":
        raise GpuUnavailable(f"{RUNNER_ENV}=modal, but no Modal credentials were found.\n"
                             + how_to_enable(lab))
    raise GpuUnavailable(how_to_enable(lab))


def how_to_enable(lab: str = "this lab") -> str:
    """The message for a machine with neither a CUDA device nor Modal credentials."""
    session = f"nox -s {lab}-gpu" if lab.startswith("lab") else "nox -s labNN-gpu"
    config = str(_modal_config_path())
    home = str(Path.home())
    if config.startswith(home + os.sep):
        config = "~" + config[len(home):]
    return f"""\
the GPU stage of {lab} needs a CUDA GPU or a Modal account, and neither is available here:
  - no CUDA device: torch sees none and there is no NVIDIA driver on this machine;
  - no Modal credentials: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are not both set, and {config}
    holds no token.
Enable either one, then run `{session}` again:
  A. a machine with an NVIDIA GPU that Triton supports (compute capability 7.5 or newer; bf16
     tests want 8.0) and its driver: clone your repository there and run `{session}`; it
     installs the CUDA build of torch and runs the GPU tests on that GPU.
  B. Modal, with YOUR OWN account (modal.com; the free Starter plan includes $30 of credit a month;
     one run of a GPU stage costs roughly 5 to 25 cents on an H100):
       pip install modal=={MODAL_VERSION}
       modal token new        # opens the browser once and writes {config}
     or export MODAL_TOKEN_ID=ak-... and MODAL_TOKEN_SECRET=as-... (modal.com > Settings > API
     Tokens) in your shell. The stage then runs in a container on Modal, billed to that account.
Keep the token on your own machine: never commit it, and never add it as a secret of your lab
repository (anyone who can push to a repository can make its workflow print its secrets).
{RUNNER_ENV}=local|modal picks a runner when both are available."""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    labs = [a for a in args if not a.startswith("-")]
    lab = labs[0] if labs else "this lab"
    try:
        print(route(lab, use_torch="--no-torch" not in args))
    except GpuUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
