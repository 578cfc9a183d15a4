"""Grading tests of lab 05's three helpers, each on its own (Tasks 5.1-5.3).

Each test runs the student's ``@triton.jit`` helper inside one of the grader's tiny test kernels
(lab05_steps.py, launched by probes_lab05.py) on a handful of lanes, and compares what comes
back lane by lane (judge_lab05.py). One child run serves all the tests of a step that read the
same tile. The helpers build on each other as the kernel does: sample_point calls gather_corner.
"""

from functools import lru_cache

import judge_lab05 as judge
import probes_lab05 as probes
import pytest
import torch
from judge_lab05 import TASKS  # noqa: F401  (the plugin reads them here)

from msda_labs.grading.judge.probes import shared_run


@lru_cache(maxsize=2)
def _point_step(dtype_name: str) -> judge.PointStep:
    return judge.point_step(getattr(torch, dtype_name))


def _point_tile(submission, dtype_name: str):
    step = _point_step(dtype_name)
    return step, shared_run(submission, ("point", dtype_name), probes.point_probe, *step.args())


# -- Task 5.1: load_point ------------------------------------------------------------------------
@pytest.mark.task("5.1", points=1)
@pytest.mark.parametrize("dtype_name", ["float32", "float16"])
@pytest.mark.rule("half-pixel", "xy-order")
def test_load_point_reads_and_shifts(submission, dtype_name):
    step, res = _point_tile(submission, dtype_name)
    judge.check_point(res, step)


@pytest.mark.task("5.1", points=1)
@pytest.mark.rule("mask-query-tail")
def test_load_point_lanes_off_read_nothing(submission):
    step, res = _point_tile(submission, "float32")
    # The mask earns its point only on a load_point whose lanes on read right (a helper that
    # returns zeros reads nothing anywhere).
    judge.check_point(res, step)
    judge.check_point_lanes_off(res, step)


# -- Task 5.2: gather_corner ---------------------------------------------------------------------
@lru_cache(maxsize=1)
def _corner() -> judge.CornerStep:
    return judge.corner_step()


def _corner_tile(submission):
    return shared_run(submission, "corner", probes.corner_probe, *_corner().args())


@pytest.mark.task("5.2", points=2)
@pytest.mark.rule("level-starts")
def test_gather_corner_reads_the_pixel(submission):
    judge.check_corner_inside(_corner_tile(submission), _corner())


@pytest.mark.task("5.2", points=1)
@pytest.mark.rule("zero-padding", "mask-corners")
def test_gather_corner_is_zero_outside_the_level(submission):
    # Zero outside earns its point only on a gather_corner that reads the pixels inside.
    res = _corner_tile(submission)
    judge.check_corner_inside(res, _corner())
    judge.check_corner_outside(res, _corner())


@pytest.mark.task("5.2", points=1)
@pytest.mark.rule("mask-query-tail", "mask-channel-tail")
def test_gather_corner_reads_nothing_for_lanes_and_channels_off(submission):
    # The masks earn their point only on a gather_corner that reads the pixels inside.
    res = _corner_tile(submission)
    judge.check_corner_inside(res, _corner())
    judge.check_corner_masked(res, _corner())


# -- Task 5.3: sample_point ----------------------------------------------------------------------
@lru_cache(maxsize=1)
def _sample() -> judge.SampleStep:
    return judge.sample_step()


def _sample_tile(submission):
    return shared_run(submission, "sample", probes.sample_probe, *_sample().args())


@pytest.mark.task("5.3", points=1)
@pytest.mark.rule("xy-order")
def test_sample_point_inside(submission):
    step = _sample()
    judge.check_sample(_sample_tile(submission), step, step.inside,
                       "lanes 0-7, all four corners inside the level")


@pytest.mark.task("5.3", points=2)
@pytest.mark.rule("floor", "zero-padding")
def test_sample_point_at_the_border(submission):
    step = _sample()
    judge.check_sample(_sample_tile(submission), step, step.border,
                       "lanes 8-15, corners outside the level, negative coordinates among them")
