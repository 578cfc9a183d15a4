import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say which labs the act workflow harness (tests/workflows) ran, when it was collected."""
    args = " ".join(str(a) for a in config.args)
    if "workflows" in args or args.rstrip("/").endswith("tests"):
        sys.path.insert(0, str(Path(__file__).resolve().parent / "workflows"))
        from selection import describe

        terminalreporter.write_line(describe())
