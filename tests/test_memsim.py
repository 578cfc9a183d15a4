"""The paper GPU of lab 03 (msda_labs.student.memsim): its
generators, and the exact counts lab 03 grades
against, recounted here independently (a set of sectors per warp, no numpy tricks)."""

from pathlib import Path

import numpy as np
import pytest
from kit import load_file_module

from msda_labs.student import memsim
from msda_labs.student.memsim import SECTOR_BYTES, WARP_SIZE
from msda_labs.truth import memory as memory_truth

ROOT = Path(__file__).resolve().parents[1]


def _count(pattern) -> int:
    return sum(len({int(a) // SECTOR_BYTES for a in warp}) for warp in pattern.warps)


def _lab03_tests():
    path = ROOT / "lab-03-the-machine" / "tests" / "test_lab03_machine.py"
    return load_file_module(path, "kit_lab03_grading_tests", beside=True)


def test_constants():
    assert (SECTOR_BYTES, WARP_SIZE) == (32, 32)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 100, 1024])
def test_contiguous_cuts_lanes_into_warps(n):
    p = memsim.contiguous(n, itemsize=4)
    assert [len(w) for w in p.warps] == [32] * (n // 32) + ([n % 32] if n % 32 else [])
    assert all(w.dtype == np.int64 for w in p.warps)
    assert np.array_equal(np.concatenate(p.warps), 4 * np.arange(n))
    assert p.lanes == n and p.useful_bytes == 4 * n


def test_strided_and_base():
    p = memsim.strided(3, n=5, itemsize=2, base=6)
    assert p.name == "strided x3"
    assert p.warps[0].tolist() == [6, 12, 18, 24, 30]


def test_random_gather_is_seeded_and_in_span():
    a, b = memsim.random_gather(seed=4), memsim.random_gather(seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a.warps, b.warps))
    every = np.concatenate(a.warps)
    assert every.min() >= 0 and every.max() < 64 << 20 and (every % 4 == 0).all()


@pytest.mark.parametrize("n_queries, D, itemsize", [(256, 32, 2), (300, 40, 2), (70, 8, 4),
                                                    (33, 65, 2)])
def test_tilings_read_the_same_bytes(n_queries, D, itemsize):
    block = memsim.msda_query_block(n_queries, D, itemsize, seed=2)
    point = memsim.msda_point_parallel(n_queries, D, itemsize, seed=2)
    assert block.useful_bytes == point.useful_bytes == n_queries * D * itemsize
    assert sorted(np.concatenate(block.warps).tolist()) == \
        sorted(np.concatenate(point.warps).tolist())
    assert all(0 < len(w) <= WARP_SIZE for w in block.warps + point.warps)
    # lanes across channels: a query's warp reads consecutive channels of one row
    assert np.all(np.diff(block.warps[0]) == itemsize)


def test_default_tiling_counts():
    block, point = memsim.msda_query_block(), memsim.msda_point_parallel()
    assert (_count(block), _count(point)) == (512, 8192)
    assert _count(memsim.msda_point_parallel(1024)) == 32736


def test_lab03_expected_counts_are_right():
    tests = _lab03_tests()
    for pid, (build, expected) in tests.PATTERNS.items():
        assert _count(build()) == expected, pid


def test_lab03_reference_helpers_agree():
    assert memory_truth.tiling_speedup() == 16.0
    assert memory_truth.tiling_speedup(itemsize=4) == 8.0
    assert sum(memory_truth.forward_bytes(**memory_truth.DEFAULT_SIZES)) == 40_857_600
