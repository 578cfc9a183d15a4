"""The handouts' pictures cannot drift: every one is drawn again here (matplotlib Agg, the facts
measured by running the course's kernels) and must equal the checked-in PNG, and every handout
shows its picture with its alt text. About 5 s of CPU, most of it the two fact subprocesses."""

import math

import pytest
from kit import MANIFEST, ROOT

from msda_labs.authoring import pictures
from msda_labs.authoring.pictures import facts as fact_runs
from msda_labs.authoring.pictures import ptx

FOLDERS = {lab.id: lab.folder for lab in MANIFEST.labs}


@pytest.fixture(scope="module")
def facts():
    return fact_runs.measure_all()


def test_every_picture_is_what_the_code_draws_now(facts):
    drawn = pictures.render(pictures.PICTURES, facts)
    stale = []
    for picture in pictures.PICTURES:
        path = picture.path(ROOT, FOLDERS[picture.lab])
        assert path.is_file(), f"{path} is missing: run `python -m msda_labs pictures`"
        why = pictures.compare_png(path.read_bytes(), drawn[picture.name])
        if why:
            stale.append(f"{path.relative_to(ROOT)}: {why}")
    assert not stale, "pictures out of date (run `python -m msda_labs pictures`):\n  " + \
        "\n  ".join(stale)


def test_every_handout_shows_its_picture_with_alt_text():
    for picture in pictures.PICTURES:
        handout = ROOT / FOLDERS[picture.lab] / "README.md"
        assert pictures.image_line(picture) in handout.read_text(), \
            f"{handout} does not show img/{picture.name}.png with its alt text"
        assert len(picture.alt) > 80, f"{picture.name}: the alt text should describe the picture"


def test_pictures_are_small():
    for picture in pictures.PICTURES:
        size = picture.path(ROOT, FOLDERS[picture.lab]).stat().st_size
        assert size < 250_000, f"{picture.name}.png is {size:,} bytes"


def test_the_lab05_picture_draws_the_grid_the_handout_states(facts):
    launch = facts["lab05"]["launches"][0]
    case, meta = facts["lab05"]["case"], launch["meta"]
    assert launch["grid"] == [math.ceil(case["Q"] / case["BLOCK_Q"]), case["B"] * case["M"]]
    assert meta["BLOCK_D"] == 1 << (case["D"] - 1).bit_length()


def test_the_lab08_picture_shows_lost_updates(facts):
    record = facts["lab08"]
    assert sum(record["expected"]) == record["case"]["n"]
    assert all(g <= e for g, e in zip(record["got"], record["expected"]))
    assert sum(record["got"]) < sum(record["expected"]), "the racy kernel lost nothing here"


def test_the_lab09_excerpts_are_a_cas_loop_and_a_reduction(facts):
    loop, n_cas = ptx.cas_loop(facts["lab09"]["sm_80"])
    native, n_red = ptx.reduction(facts["lab09"]["sm_90"])
    assert n_cas > 0 and n_red > 0
    assert loop[0].startswith("ld.") and ".cas." in " ".join(loop) and "bra" in loop[-1]
    label = next(line for line in loop if line.endswith(":"))
    assert loop[-1].endswith(label[:-1] + ";"), "the excerpt must end with the branch back"
    assert "red." in native[-1] and "add" in native[-1]
    assert ".cas." not in facts["lab09"]["sm_90"]


PTX = """
\tld.relaxed.gpu.global.b32 \t%r1, [%rd1];
$L__BB0_2:                              // %atomicrmw.start
\t.loc\t1 265 13
\tfma.rn.bf16 \t%rs3, %rs1, %rs2, %rs0;
\tatom.relaxed.gpu.global.cas.b32 \t%r2, [%rd1], %r1, %r3;
\tsetp.ne.b32 \t%p1, %r2, %r1;
\t@%p1 bra \t$L__BB0_2;
"""


def test_cas_loop_cuts_from_the_read_to_the_branch_back():
    loop, count = ptx.cas_loop(PTX)
    assert count == 1
    assert loop == ["ld.relaxed.gpu.global.b32 %r1, [%rd1];", "$L__BB0_2:",
                    "fma.rn.bf16 %rs3, %rs1, %rs2, %rs0;",
                    "atom.relaxed.gpu.global.cas.b32 %r2, [%rd1], %r1, %r3;",
                    "setp.ne.b32 %p1, %r2, %r1;", "@%p1 bra $L__BB0_2;"]


def test_compare_png_sees_a_changed_label_and_forgives_nothing_else():
    from msda_labs.authoring.pictures.canvas import figure, png_bytes

    def draw(text):
        with figure(3, 1) as (fig, ax):
            ax.axis("off")
            ax.text(0.5, 0.5, text, ha="center")
            return png_bytes(fig)

    first, again, other = draw("13.2 us"), draw("13.2 us"), draw("13.3 us")
    assert first == again, "drawing twice gave different bytes"
    assert pictures.compare_png(first, again) is None
    assert pictures.compare_png(first, other) is not None
    with figure(3, 1.2) as (fig, _):
        taller = png_bytes(fig)
    assert "size" in pictures.compare_png(first, taller)


def test_the_lab04_picture_records_every_lane_of_copy2d(facts):
    from msda_labs.authoring.pictures import memory

    record = facts["lab04"]
    R, C = record["case"]["R"], record["case"]["C"]
    assert record["equal"], "the chip's copy2d did not copy"
    for kind, tensor in (("load", "x"), ("store", "out")):
        cells = memory.lanes_by_cell(record, kind, tensor)
        touched = sorted(element for _, active, element in cells.values() if active)
        assert touched == list(range(R * C)), f"{kind}: each element exactly once"
        assert all(not active for (r, c), (_, active, _) in cells.items() if r >= R or c >= C)


def test_lanes_by_cell_sees_an_active_lane_outside_the_tensor():
    from msda_labs.authoring.pictures import memory

    record = {"case": {"R": 1, "C": 2, "BLOCK": 2},
              "tensors": {"x": {"base": 1000, "numel": 2, "itemsize": 4}, "grid": [1, 1]},
              "lanes": [{"kind": "load", "pid": [0, 0], "address": [[1000, 1004], [1008, 1012]],
                         "active": [[True, True], [True, False]]}]}
    cells = memory.lanes_by_cell(record, "load", "x")
    assert cells[0, 0] == ((0, 0), True, 0) and cells[0, 1] == ((0, 0), True, 1)
    assert cells[1, 0] == ((0, 0), True, None), "an unmasked lane past the end is outside"
    assert cells[1, 1][1] is False
