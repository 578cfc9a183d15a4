import contextlib
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# How many of the slowest test files the summary lists (MSDA_SLOWEST_FILES=0: none).
SLOWEST_FILES = int(os.environ.get("MSDA_SLOWEST_FILES", "15"))

# Tests that take minutes on their own: act running whole workflows, a template repository's
# nox session building a fresh virtualenv with torch, a class of 27 hostile students regraded one
# after another, and the degenerate answers of each lab (lab 10's alone about 40 s). They are
# collected first, so that under xdist's work stealing (the selftest session's ``--dist
# worksteal``) they start at once and overlap with the rest, instead of being left to the end
# with the other workers idle.
LONG_FIRST = ("tests/workflows/", "::test_fresh_virtualenv_nox_session",
              "::test_attacks_score_zero_under_the_separated_regrade",
              "::test_degenerate_answers_score_zero")


def pytest_collection_modifyitems(session, config, items):
    """Put the long tests first (a stable sort: the order is otherwise unchanged)."""
    items.sort(key=lambda item: 0 if any(mark in item.nodeid for mark in LONG_FIRST) else 1)


# Zygotes forked from warm stems (msda_labs.grading.isolation.stem): every grading run of this
# process saves the 2.4 s a zygote takes to import torch and triton. MSDA_COLD_ZYGOTES=1 starts
# every zygote cold, as a single grading run does.
COLD_ZYGOTES = os.environ.get("MSDA_COLD_ZYGOTES", "") not in ("", "0")


def pytest_configure(config):
    """Give this process (each xdist worker) a folder of its own for zygote stems."""
    from msda_labs.grading.isolation import stem

    if not COLD_ZYGOTES and not os.environ.get(stem.STEMS_ENV):
        os.environ[stem.STEMS_ENV] = tempfile.mkdtemp(prefix="msda-stems-")  # mode 0700
        config._msda_stems = os.environ[stem.STEMS_ENV]
        config._msda_stems_held = contextlib.ExitStack()  # a worker killed outright: stems end
        config._msda_stems_held.enter_context(stem.held(config._msda_stems))


def pytest_unconfigure(config):
    """Close this process's warm grading server (tests/gradeserver.py), if one was started, and
    wait for it, so that its time is counted with the run's; end this process's stems."""
    server = sys.modules.get("gradeserver")
    if server is not None:
        server.stop()
    folder = getattr(config, "_msda_stems", None)
    if folder:
        from msda_labs.grading.isolation import stem

        stem.stop_all(folder)
        config._msda_stems_held.close()
        shutil.rmtree(folder, ignore_errors=True)


def _file_seconds(terminalreporter) -> dict[str, float]:
    """Seconds spent per test file: setup, call and teardown of every test, summed (with xdist
    the workers' reports reach the controller with their durations)."""
    seconds: dict[str, float] = defaultdict(float)
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid = getattr(report, "nodeid", "")
            duration = getattr(report, "duration", None)
            if nodeid and isinstance(duration, float):
                seconds[nodeid.split("::")[0]] += duration
    return seconds


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say which labs the act workflow harness (tests/workflows) ran, when it was collected; and
    list the test files that took longest, so that a slow file shows in CI's output."""
    args = " ".join(str(a) for a in config.args)
    if "workflows" in args or args.rstrip("/").endswith("tests"):
        sys.path.insert(0, str(Path(__file__).resolve().parent / "workflows"))
        from selection import describe

        terminalreporter.write_line(describe())
    seconds = _file_seconds(terminalreporter)
    if SLOWEST_FILES <= 0 or len(seconds) < 2:
        return
    total = sum(seconds.values())
    terminalreporter.write_sep("=", f"slowest {min(SLOWEST_FILES, len(seconds))} test files "
                               f"(test seconds, summed over workers: {total:.0f} s in all)")
    for path, secs in sorted(seconds.items(), key=lambda kv: -kv[1])[:SLOWEST_FILES]:
        terminalreporter.write_line(f"{secs:8.1f} s  {100 * secs / total:5.1f}%  {path}")
