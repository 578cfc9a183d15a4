"""Kernel isolation: a Triton kernel that writes far out of bounds loses only the tests that ran it.

The interpreter has no bounds checks, so a wild store either kills the process running it
(SIGSEGV) or silently scribbles over its heap. Either way, only that test's forked child may be
affected: the rest of the report must be intact, with every other task at full marks.
"""

import pytest
from kit import MANIFEST, all_tests, chip_path, run_grade

LAB = "lab04"

# (why, old, new, the task it breaks): each replacement must occur exactly once in the chip.
BROKEN = {
    "store_far_past_the_end": (
        "the copy stores 2**40 elements past its output: an unmapped address",
        "tl.store(out_ptr + offs, tile, mask=mask)",
        "tl.store(out_ptr + offs + (1 << 40), tile, mask=mask)",
        "4.1",
    ),
    "store_far_before_the_start": (
        "the gather stores 2**40 elements before its output",
        "tl.store(out_ptr + offs, vals, mask=mask)",
        "tl.store(out_ptr + offs - (1 << 40), vals, mask=mask)",
        "4.2",
    ),
    "heap_scribble": (
        "the bilinear kernel (the last task graded) stores 2**16 elements past its output: into "
        "the heap of the process, which may or may not die of it",
        "tl.store(out_ptr + out_offs, res.to(out_ptr.dtype.element_ty), mask=mask_q[:, None] & "
        "d_ok)",
        "tl.store(out_ptr + out_offs + (1 << 16), res.to(out_ptr.dtype.element_ty), "
        "mask=mask_q[:, None] & d_ok)",
        "4.3",
    ),
}


def _built() -> bool:
    return any(lab.id == LAB for lab in MANIFEST.labs if lab.built)


@pytest.fixture(scope="module")
def chip_result():
    return run_grade(LAB, solution=True)


@pytest.mark.skipif(not _built(), reason=f"{LAB} is not built yet")
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_wild_store_costs_only_its_own_tests(name, chip_result, tmp_path):
    why, old, new, broken_task = BROKEN[name]
    source = chip_path(LAB).read_text()
    assert source.count(old) == 1, f"{name}: {old!r} must occur exactly once in the {LAB} chip"
    path = tmp_path / f"{LAB}.py"
    path.write_text(source.replace(old, new))
    result = run_grade(LAB, submission=path)

    # The report is whole: every test of the chip's report is there, in the same order.
    names = [(ex["id"], t["name"]) for ex, t in all_tests(result)]
    assert names == [(ex["id"], t["name"]) for ex, t in all_tests(chip_result)], \
        f"{name} ({why}): the report lost or reordered tests"

    for ex, test in all_tests(result):
        if ex["id"] == broken_task:
            assert test["status"] in ("crashed", "failed"), \
                f"{name} ({why}): {test['name']} is {test['status']}: {test['message']}"
            assert test["score"] == 0
        else:
            assert test["status"] == "passed", (
                f"{name} ({why}) cost {test['name']} of Task {ex['id']}, which never ran the "
                f"broken kernel: {test['status']}: {test['message']}")
    if name.startswith("store_far"):
        crashed = [t for ex, t in all_tests(result) if t["status"] == "crashed"]
        assert crashed, f"{name}: a store 2**40 elements away should kill its process"
    assert result["score"] == chip_result["score"] - sum(
        ex["max_score"] for ex in result["exercises"] if ex["id"] == broken_task)
