"""A GPU stage's kernels, compiled ahead: the child's half (every call at once, in threads, never
graded), the judge's half (its baselines compiled in a thread, waited for before any clock), the
plugin that starts both once a stage, and every GPU lab's declarations of what to compile.

The time this saves is measured on a GPU (docs/gpu.md, "What it costs"); here, what must hold
anywhere: the calls really run at the same time, a failing or hanging call costs nothing but its
own compile, and no timed round starts while the judge is still compiling.
"""

import inspect
import threading
import time
import types
from pathlib import Path

import pytest
import torch
from kit import load_file_module

from msda_labs.grading.judge import plugin, speedjudge
from msda_labs.grading.judge.probes import compile_ahead
from msda_labs.truth.cases import MULTI_LEVEL, Case

ROOT = Path(__file__).resolve().parents[2]
GPU_LABS = {"lab05": ("lab-05-forward-correct", "test_lab05_forward.py"),
            "lab06": ("lab-06-make-it-fast", "test_lab06_fast.py"),
            "lab08": ("lab-08-concurrent-writes", "test_lab08_atomics.py"),
            "lab10": ("lab-10-ship-it", "test_lab10_suite.py")}


# -- the child's half ------------------------------------------------------------------------------
def test_every_call_runs_at_the_same_time_and_failures_are_only_reported():
    module = types.ModuleType("submission")
    together = threading.Barrier(3, timeout=20)  # broken unless three calls are in flight at once
    seen = []

    def meet(mod, tag):
        assert mod is module
        together.wait()
        seen.append(tag)

    def fail(mod):
        raise ValueError("a kernel that does not compile")

    def hang(mod):
        time.sleep(30)

    began = time.monotonic()
    res = compile_ahead(module, [(meet, ("a",)), (meet, ("b",)), (meet, ("c",)), (fail, ()),
                                 (hang, ())], limit_s=2.0)
    assert res == {"0": "ok", "1": "ok", "2": "ok", "3": "ValueError", "4": "unfinished"}
    assert sorted(seen) == ["a", "b", "c"]
    assert time.monotonic() - began < 15  # the hanging call is left behind at the limit


def test_nothing_to_compile_is_nothing_done():
    assert compile_ahead(types.ModuleType("submission"), []) == {}


# -- the judge's half ------------------------------------------------------------------------------
def test_no_timed_round_starts_before_the_judges_compiles_end(monkeypatch):
    finished = threading.Event()

    def slow_compile():
        time.sleep(0.5)
        finished.set()

    thread = threading.Thread(target=slow_compile, daemon=True)
    thread.start()
    monkeypatch.setattr(speedjudge, "_WARMING", [thread])

    class Started(Exception):
        pass

    def server(*args, **kwargs):
        assert finished.is_set(), "the clean server started while the judge was compiling"
        raise Started

    monkeypatch.setattr(speedjudge, "_CleanServer", server)
    spec = speedjudge.forward_spec(MULTI_LEVEL, "float32", fn="msda_forward", n=2)
    with pytest.raises(Started):
        speedjudge._measure(None, spec, None, {}, 1, 5.0)
    assert speedjudge._WARMING == []


def test_the_judge_calls_each_baseline_once_on_a_trial_input_set(monkeypatch):
    monkeypatch.setattr(speedjudge, "_WARMING", [])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(speedjudge, "_device", lambda: torch.device("cpu"))
    calls = []

    def chip(value, shapes, starts, loc, attn, grad):
        calls.append((tuple(value.shape), tuple(grad.shape)))
        raise RuntimeError("a baseline that fails here fails again in its trial")

    speedjudge.warm_baselines(MULTI_LEVEL, "float32", "backward",
                              {"chip": chip, "absent": None, "reference": lambda *a: calls})
    speedjudge._wait_for_warming()
    c = MULTI_LEVEL
    assert calls == [((c.B, sum(h * w for h, w in c.shapes), c.M, c.D), (c.B, c.Q, c.M * c.D))]


def test_without_cuda_the_judge_compiles_nothing(monkeypatch):
    monkeypatch.setattr(speedjudge, "_WARMING", [])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    speedjudge.warm_baselines(MULTI_LEVEL, "float32", "forward",
                              {"chip": lambda *a: pytest.fail("called")})
    assert speedjudge._WARMING == []


# -- the plugin: once a stage, both halves -------------------------------------------------------
def _module(**names):
    module = types.ModuleType("test_labxx")
    module.__dict__.update(names)
    return module


def _session(items, runs, timeout=120.0):
    session = plugin.GradingSession.__new__(plugin.GradingSession)
    session.items, session.timeout = items, timeout

    class Executor:
        def run(self, probe, *args, **kwargs):
            runs.append((probe, args, kwargs))

    session.executor = lambda: Executor()
    return session


def test_the_plugin_compiles_every_gpu_modules_declarations_once(monkeypatch):
    def probe(module, n):
        return n

    factory = lambda: {"chip": None}  # noqa: E731
    first = _module(COMPILE_AHEAD=[(probe, (1,)), (probe, (2,))],
                    JUDGE_COMPILE_AHEAD=[(MULTI_LEVEL, "float16", "forward", factory)])
    second = _module(COMPILE_AHEAD=[(probe, (3,))])
    cpu_only = _module(COMPILE_AHEAD=[(probe, (4,))])
    items = [types.SimpleNamespace(module=m, gpu=m is not cpu_only)
             for m in (first, first, second, cpu_only)]
    monkeypatch.setattr(plugin, "is_gpu_test", lambda item: item.gpu)
    warmed, runs = [], []
    monkeypatch.setattr(speedjudge, "warm_baselines", lambda *a: warmed.append(a))
    _session(items, runs)._compile_ahead()
    assert warmed == [(MULTI_LEVEL, "float16", "forward", {"chip": None})]
    ((fn, args, kwargs),) = runs
    assert fn is compile_ahead and kwargs == {"mode": "gpu", "timeout": 120.0}
    assert args == ([(probe, (1,)), (probe, (2,)), (probe, (3,))], 105.0)


def test_a_stage_without_declarations_starts_no_child(monkeypatch):
    monkeypatch.setattr(plugin, "is_gpu_test", lambda item: True)
    runs = []
    _session([types.SimpleNamespace(module=_module())], runs)._compile_ahead()
    assert runs == []


# -- every GPU lab's declarations ------------------------------------------------------------------
@pytest.fixture(scope="module", params=sorted(GPU_LABS))
def lab_tests(request):
    folder, name = GPU_LABS[request.param]
    path = ROOT / folder / "tests" / name
    return request.param, load_file_module(path, f"_ahead_{path.stem}", beside=True)


def test_each_declared_call_is_a_probe_of_the_lab_with_arguments_it_takes(lab_tests):
    lab, tests = lab_tests
    assert tests.COMPILE_AHEAD, f"{lab} declares nothing to compile ahead"
    for probe, args in tests.COMPILE_AHEAD:
        assert probe.__module__ == f"probes_{lab}", probe  # runs in the child, as the tests do
        inspect.signature(probe).bind(types.ModuleType("submission"), *args)


def test_each_judge_declaration_is_a_speed_trial_of_the_lab(lab_tests):
    lab, tests = lab_tests
    ((case, dtype_name, call, baselines),) = tests.JUDGE_COMPILE_AHEAD
    assert isinstance(case, Case) and case == tests.SPEED_CASE
    assert dtype_name == tests.SPEED_DTYPE and call in ("forward", "backward", "autograd")
    made = baselines()
    assert made and all(fn is None or callable(fn) for fn in made.values())
