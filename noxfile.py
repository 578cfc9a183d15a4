"""Sessions of the MSDA Triton course kit.

    nox -s lab05          grade lab 05 in place (CPU stages: plain torch, interpreter, AOT)
    nox -s lab05-gpu      the GPU stage of lab 05 (local CUDA, else Modal with your account);
                          only the labs with a GPU stage in classroom.yml have one
    nox -s progress       where you stand across the whole ladder of this checkout
    nox -s selftest       the kit's own tests: every lab's grader proven on chips and mutants
    nox -s quick          the self-test's quick tier (under 3 minutes): sync, imports, units,
                          one lab per stage kind; reuses the selftest session's environment
    nox -s export -- DIR  one template repository per lab (classroom.yml drives it)
    nox -s regrade -- P   regrade a student's checkout with pristine grading files
    nox -s lint           ruff, and starters / task tables in step with chips and tests
    nox -s bench          the shipped operator vs the reference (and --peer ...) on a CUDA GPU
    nox -s workflows      every shipped workflow end to end under act (a real Actions runner)
    nox -s shipped        the audit that no template ships its own lab's answer (slow)

Arguments after ``--`` go to the grader, e.g. ``nox -s lab05 -- --task 5.2``.

Every lab session and ``progress`` share one environment, ``.venv`` at the root (built once;
pip runs again only when requirements.txt or shared/pyproject.toml change, see
shared/msda_labs/labenv.py). It is also the environment that runs a lab by hand:
``.venv/bin/python lab-05-forward-correct/lab05.py`` (or ``source .venv/bin/activate``).
"""

# The sessions are made from classroom.yml, read by the kit's own manifest loader, which needs
# these (nox installs them into an environment of its own first when they are missing; see
# nox's script mode):
# /// script
# dependencies = ["nox>=2025.2.9", "pyyaml==6.0.4", "jsonschema==4.26.0"]
# ///

from __future__ import annotations

import os
import platform
import socket
import sys
from pathlib import Path

import nox

nox.options.reuse_venv = "yes"
nox.options.sessions = ["selftest"]

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT / "shared"))
from msda_labs.course.manifest import load_manifest  # noqa: E402  (the package, not installed)

MANIFEST = load_manifest(ROOT / "classroom.yml")  # the one list of labs
LABS = [lab.id for lab in MANIFEST.labs if lab.built]
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def _torch_index_args() -> list[str]:
    """On Linux, prefer torch's CPU build (a few hundred MB instead of several GB).

    MSDA_TORCH_INDEX overrides: a URL to use as an extra index, or "pypi" for plain PyPI.
    Without it we use the CPU index when it answers within 3 s.
    """
    choice = os.environ.get("MSDA_TORCH_INDEX", "")
    if choice == "pypi" or platform.system() != "Linux":
        return []
    if choice:
        return ["--extra-index-url", choice]
    try:
        socket.create_connection(("download.pytorch.org", 443), timeout=3).close()
    except OSError:
        return []
    return ["--extra-index-url", CPU_TORCH_INDEX]


def _install(session: nox.Session, requirements: str = "requirements.txt") -> None:
    session.install(*_torch_index_args(), "-r", str(ROOT / requirements))
    session.install("-e", str(ROOT / "shared"))


def _load_by_path(name: str, relative: str):
    """A standard-library module of the package, loaded by its path (nothing is installed yet)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "shared" / "msda_labs" / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The lab sessions' one environment also serves `progress` (its HTML page needs jinja2).
LAB_EXTRAS = ("jinja2==3.1.6",)


def _lab_python(session: nox.Session) -> str:
    """The shared lab environment's interpreter (``.venv``): built on first use, pip only when
    the pins changed (shared/msda_labs/labenv.py)."""
    labenv = _load_by_path("_msda_labenv", "labenv.py")
    python = labenv.ensure(ROOT, lambda cmd: session.run(*cmd, external=True),
                           extras=LAB_EXTRAS, index_args=_torch_index_args, log=session.log)
    return str(python)


def _gpu_runner(lab: str) -> str:
    """Decide "local" or "modal" before anything is installed (where.py needs only the standard
    library); with neither, print the how-to-enable message and exit with status 2 at once."""
    import sys

    where = _load_by_path("_msda_gpu_where", "gpu/where.py")
    try:
        return where.route(lab, use_torch=False)
    except where.GpuUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _install_cuda(session: nox.Session) -> None:
    """PyPI's default torch (its CUDA build) with the triton it pins, not the CPU grading pins."""
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    path = Path(session.create_tmp()) / "requirements-cuda.txt"
    path.write_text("\n".join(x for x in lines if not x.strip().startswith("triton")) + "\n")
    session.install("-r", str(path))
    session.install("-e", str(ROOT / "shared"))


def _grade_gpu(session: nox.Session, lab: str) -> None:
    """The GPU stage, in a nox virtualenv of its own: local CUDA needs PyPI's CUDA build of
    torch, not the CPU build the lab environment holds."""
    if _gpu_runner(lab) == "local":
        _install_cuda(session)
    else:
        _install(session)
    session.install("modal==1.6.4", "matplotlib==3.11.2")
    session.run("python", "-m", "msda_labs", "grade", lab, "--stage", "gpu",
                "--json", str(ROOT / f"{lab}-gpu.grade.json"), *session.posargs)


def _make_lab_sessions(lab: str, has_gpu: bool) -> None:
    @nox.session(name=lab, default=False, venv_backend="none")
    def grade_cpu(session: nox.Session) -> None:
        session.run(_lab_python(session), "-m", "msda_labs", "grade", lab, "--stage", "cpu",
                    "--json", str(ROOT / f"{lab}.grade.json"), *session.posargs, external=True)

    grade_cpu.__doc__ = f"Grade {lab} (the stages that need no GPU), in the shared .venv."
    if not has_gpu:
        return

    @nox.session(name=f"{lab}-gpu", default=False)
    def grade_gpu(session: nox.Session) -> None:
        _grade_gpu(session, lab)

    grade_gpu.__doc__ = f"Grade the GPU stage of {lab} (local CUDA, else Modal)."


for _lab in MANIFEST.labs:
    if _lab.built:
        _make_lab_sessions(_lab.id, _lab.has_gpu)


@nox.session
def selftest(session: nox.Session) -> None:
    """The kit's own tests: graders, chips, mutants, adversarial submissions, exports."""
    _install(session, "requirements-dev.txt")
    workers = os.environ.get("MSDA_SELFTEST_WORKERS", "auto")
    # `nox -s selftest -- tests/grading -k x`: the paths given replace the whole tests/ folder.
    named = any(Path(arg.split("::")[0]).exists() for arg in session.posargs)
    paths = [] if named else [str(ROOT / "tests")]
    # --dist worksteal: a worker that runs out of tests takes the queued ones of another, so the
    # minutes-long tests (collected first, tests/conftest.py) overlap with everything else.
    # --durations=20: the twenty slowest tests in the output (tests/conftest.py adds the slowest
    # files), so that a test that grows slow shows in CI before the total does.
    session.run("python", "-m", "pytest", *paths, "-n", workers, "--dist", "worksteal", "-q",
                "-p", "no:cacheprovider", "--durations=20", *session.posargs)


# The quick tier: what a developer runs before pushing. The starter / manifest sync check, the
# import contracts, the unit tests of the grading core, mistakes, authoring and classroom
# helpers, and the chip and the untouched starter of one lab per stage kind (lab01 cpu, lab04
# interpret, lab09 aot). The exports, every mutant, the attack suites, the GPU-stage harness and
# act runs are left to the full self-test.
QUICK_TESTS = [
    "tests/test_manifest.py", "tests/test_ladder.py", "tests/test_memsim.py", "tests/test_ptx.py",
    "tests/test_plain_names.py", "tests/test_import_layers.py",
    "tests/grading", "tests/mistakes", "tests/authoring",
    "tests/classroom/test_regrade_units.py", "tests/classroom/test_annotations.py",
    "tests/labs/test_chips_and_starters_grade.py",
]
QUICK_LABS = "not test_chips_and_starters_grade or lab01 or lab04 or lab09"


def _selftest_python(session: nox.Session) -> str:
    """The selftest session's interpreter, built first (``--install-only``) when missing, so
    that the quick tier needs no second copy of torch and triton."""
    import sys

    envdir = session.env_dir.parent / "selftest"
    bindir = "Scripts" if platform.system() == "Windows" else "bin"
    python = envdir / bindir / ("python.exe" if platform.system() == "Windows" else "python")
    if not python.exists():
        session.log(f"no selftest environment at {envdir}: building it (once)")
        session.run(sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s",
                    "selftest", "--install-only", "--envdir", str(envdir.parent),
                    external=True)
    return str(python)


@nox.session(default=False, venv_backend="none")
def quick(session: nox.Session) -> None:
    """The self-test's quick tier, under 3 minutes: sync check, import rules, unit tests and one
    lab per stage kind, in the selftest session's environment (``-- -x`` etc. go to pytest)."""
    python = _selftest_python(session)
    session.run(python, "-m", "msda_labs", "sync", "--check", external=True)
    workers = os.environ.get("MSDA_SELFTEST_WORKERS", "auto")
    session.run(python, "-m", "pytest", *[str(ROOT / path) for path in QUICK_TESTS],
                "-k", QUICK_LABS, "-n", workers, "-q", "-p", "no:cacheprovider",
                "--durations=10", *session.posargs, external=True)


@nox.session(default=False, venv_backend="none")
def shipped(session: nox.Session) -> None:
    """The audit that no template ships the answer to its own lab: every function a lab's export
    ships, graded as the answer to each of its tasks (minutes per lab; ``-- -k lab01`` for one),
    in the selftest session's environment."""
    python = _selftest_python(session)
    session.run(python, "-m", "pytest", str(ROOT / "tests/classroom/test_no_shipped_answer.py"),
                "-k", "no_shipped_code", "-n", "0", "-q", "-p", "no:cacheprovider",
                *session.posargs, env={"MSDA_SHIPPED_AUDIT": "all"}, external=True)


@nox.session(default=False)
def lint(session: nox.Session) -> None:
    """ruff, the direction of imports, and starters / task tables in step with their chips."""
    session.install("ruff==0.17.6", "import-linter==2.17", "grimp==3.20")
    session.run("ruff", "check", str(ROOT))
    _install(session)
    session.run("lint-imports", "--no-cache")  # the contracts in pyproject.toml
    session.run("python", "-m", "msda_labs", "sync", "--check")


@nox.session(default=False)
def export(session: nox.Session) -> None:
    """Write one template repository per lab: nox -s export -- OUT_DIR [LAB]."""
    _install(session)
    out = session.posargs[0] if session.posargs else str(ROOT / "out" / "templates")
    labs = session.posargs[1:] or ["all"]
    for lab in labs:
        session.run("python", "-m", "msda_labs", "export", lab, "--out", out)


@nox.session(default=False)
def regrade(session: nox.Session) -> None:
    """Regrade a student's checkout with pristine grading files: nox -s regrade -- PATH [...]."""
    _install(session)
    # the class's insight page (jinja2, matplotlib) and --similarity (copydetect), at the pins
    # of requirements-dev.txt
    pins = {line.split("==")[0]: line.strip() for line in
            (ROOT / "requirements-dev.txt").read_text().splitlines() if "==" in line}
    session.install(*(pins[name] for name in ("jinja2", "matplotlib", "copydetect")))
    session.run("python", "-m", "msda_labs", "regrade", *session.posargs)


# -- nox -s bench: the shipped operator against the reference and any peers ---------
@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Time the shipped operator, the PyTorch reference and any --peer module:function side by
    side on a CUDA GPU; writes bench.md, bench.json and bench.png (``-- --out DIR``)."""
    import shutil
    import sys

    # Decide before installing anything: without an NVIDIA driver there is nothing to measure,
    # and a failing status keeps a script from mistaking an empty run for a result.
    if shutil.which("nvidia-smi") is None:
        print("no GPU: nothing measured. `nox -s bench` times CUDA kernels and needs an NVIDIA "
              "GPU with its driver (nvidia-smi not found); no table, JSON or chart was written.",
              file=sys.stderr)
        raise SystemExit(2)
    _install_cuda(session)
    session.install("matplotlib==3.11.2")
    args = session.posargs or []
    if "--out" not in args:
        args = [*args, "--out", str(ROOT / "bench-results")]
    session.run("python", "-m", "msda_labs.gpu.opbench", *args)


# ---- workflows: every shipped workflow under act, a real Actions runner -------------
@nox.session(default=False)
def workflows(session: nox.Session) -> None:
    """Run every shipped workflow end to end under act on this host (all 11 labs, the kit's
    ci.yml and regrade.yml, the Gradescope and Classroom 50 layouts): nox -s workflows.

    MSDA_ACT_LABS=subset|all|lab01,lab05 picks the labs (default here: all; the self-test runs
    the subset); MSDA_ACTIONS_DIR the released actions (default ../shared/actions). act, Node 24
    and the tool-cache Python are installed on first use under ~/.cache/msda-act (as root:
    /var/tmp/msda-act).
    """
    _install(session, "requirements-dev.txt")
    env = {"MSDA_ACT_LABS": os.environ.get("MSDA_ACT_LABS", "all")}
    workers = os.environ.get("MSDA_SELFTEST_WORKERS", "2")
    session.run("python", "-m", "pytest", str(ROOT / "tests" / "workflows"), "-n", workers,
                "-q", "-p", "no:cacheprovider", "-rs", *session.posargs, env=env)


# ---- progress: one learner's ladder in one checkout ---------------------------------
@nox.session(default=False, venv_backend="none")
def progress(session: nox.Session) -> None:
    """Where you stand across the labs of this checkout: score, status, next task and what each
    lab runs on; unchanged labs come from the cache in .progress/ (``-- --html progress.html``,
    ``-- --refresh``, ``-- lab04``). Runs in the labs' shared .venv."""
    session.run(_lab_python(session), "-m", "msda_labs", "progress", *session.posargs,
                external=True)
