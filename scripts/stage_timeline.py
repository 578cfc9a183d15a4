"""Grade once with a timeline of where the judge's time goes.

    python scripts/stage_timeline.py LOG -- grade LAB --submission FILE --stage gpu [...]

Runs ``python -m msda_labs`` with the given arguments in this process, with timers around the
steps a GPU stage spends its time in: each test, each probe run and conversation in a child
(``Executor.run`` / ``converse``), the zygote's readiness, the phases of a judge's-clock trial
(the clean server's rounds, the clean child's no-op, the student's rounds, each check of a
timed output), the judge's own baseline races, the judge's Triton compiles and its CUDA
initialization. LOG receives one line per start (``>``) and end (``<``, with the seconds), each
stamped with the seconds since the start and the thread. What runs inside a child (its
compiles, its tuning) shows as the time of the probe run that waited for it.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        raise SystemExit(__doc__)
    out = open(argv[0], "w", buffering=1)  # noqa: SIM115 - kept open for the whole run
    start = time.perf_counter()

    def log(message: str) -> None:
        out.write(f"{time.perf_counter() - start:8.2f} "
                  f"[{threading.current_thread().name[:12]}] {message}\n")

    def wrap(owner, name: str, label: str = "", show=None) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            what = f"{label or name} {show(args, kwargs) if show else ''}".strip()
            began = time.perf_counter()
            log(f"> {what}")
            try:
                return fn(*args, **kwargs)
            finally:
                log(f"< {what} {time.perf_counter() - began:.2f}s")

        setattr(owner, name, timed)

    sys.path.insert(0, str(ROOT / "shared"))
    import _pytest.runner
    import torch.cuda
    import triton.compiler.compiler

    from msda_labs.grading.isolation import executor
    from msda_labs.grading.judge import baseline, speedjudge

    def probe(args, kwargs):
        fn = args[1] if len(args) > 1 else kwargs.get("probe")
        return getattr(fn, "__name__", str(fn))

    wrap(executor.Executor, "run", "child.run", probe)
    ran = executor.Executor.run

    @functools.wraps(ran)
    def run_and_say(self, fn, *args, **kwargs):  # what compiling ahead did, call by call
        outcome = ran(self, fn, *args, **kwargs)
        if getattr(fn, "__name__", "") == "compile_ahead":
            log(f"  compile_ahead: {outcome.kind} {outcome.value or outcome.message}")
        return outcome

    executor.Executor.run = run_and_say
    wrap(executor.Executor, "converse", "child.converse", probe)
    wrap(executor.Executor, "_ready", "zygote.ready")
    wrap(speedjudge, "_measure")
    wrap(speedjudge, "_clean_rounds", show=lambda args, kwargs: f"rounds={args[2]}")
    wrap(speedjudge, "_clean_child_rounds")
    wrap(speedjudge, "_student_rounds")
    wrap(speedjudge._Checker, "check")
    wrap(speedjudge, "device_bandwidth_gbs")
    wrap(baseline, "with_baselines")
    wrap(triton.compiler.compiler, "compile", "triton.compile (judge)")
    wrap(torch.cuda, "_lazy_init", "cuda init")
    wrap(_pytest.runner, "runtestprotocol", "test", lambda args, kwargs: args[0].name)

    from msda_labs.cli import main as cli

    log("start")
    code = cli(argv[2:])
    log(f"end, exit status {code}")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
