"""Single source: each committed starter is its chip with the solution blocks stripped."""

import pytest
from kit import chip_path, lab_ids, starter_path

from msda_labs.authoring.fences import strip


@pytest.mark.parametrize("lab", lab_ids())
def test_starter_is_stripped_chip(lab):
    expected = strip(chip_path(lab).read_text(), f"{lab} chip")
    actual = starter_path(lab).read_text()
    assert actual == expected, (f"{starter_path(lab)} drifted from its chip; regenerate it with "
                                f"`python -m msda_labs sync`")


@pytest.mark.parametrize("lab", lab_ids())
def test_every_task_has_a_stub(lab):
    text = starter_path(lab).read_text()
    assert "raise NotImplementedError(\"Task" in text


@pytest.mark.parametrize("lab", lab_ids())
def test_handout_tasks_table_is_current(lab):
    from kit import MANIFEST, ROOT

    from msda_labs.authoring.handout import sync_lab

    folder = ROOT / MANIFEST.lab(lab).folder
    assert (folder / "README.md").is_file(), f"{lab} has no handout"
    drift = sync_lab(folder, lab, chip_path(lab), check=True)
    assert not drift, f"out of date: {drift}; run `python -m msda_labs sync {lab}`"
