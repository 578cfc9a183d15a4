"""The handouts' sample failures are the grader's own words (msda_labs.authoring.samples).

``test_handout_tasks_table_is_current`` (test_starters.py) already runs ``sync --check`` on every
handout, samples included; here: every handout has a sample, a block edited by hand
is caught without grading, and a stale one is graded again for real and comes back word for word
(lab 03, the cheapest lab to grade: about 5 s).
"""

import pytest
from kit import MANIFEST, ROOT, chip_path, lab_ids

from msda_labs.authoring import samples


def _readme(lab):
    return ROOT / MANIFEST.lab(lab).folder / "README.md"


@pytest.mark.parametrize("lab", lab_ids())
def test_every_handout_has_a_generated_sample(lab):
    found = samples.find_samples(_readme(lab).read_text())
    assert found, f"{_readme(lab)} has no <!-- sample: ... --> block"
    for sample in found:
        assert sample.body.strip().startswith("Task ") and "FAILED: " in sample.body, sample.body
        assert samples.digest(sample.body) == sample.out


def _current(lab, text):
    """``text`` (a handout) with every sample's inputs hash as it is now: the handouts record it
    at the last `sync`, and any later change to the grader makes it stale (then `sync --check`
    grades the sample again, which these tests must not depend on)."""
    folder = ROOT / MANIFEST.lab(lab).folder
    for sample in samples.find_samples(text):
        submission = samples.planted_source(folder.parent, lab, chip_path(lab).read_text(),
                                            sample.mutant)
        now = samples.inputs_hash(folder, submission,
                                  f"{sample.mutant} {sample.task} {sample.test}")
        text = text.replace(f"inputs={sample.inputs} ", f"inputs={now} ")
    return text


def _copy_with(tmp_path, lab, edit):
    text = _current(lab, _readme(lab).read_text())
    copy = tmp_path / "README.md"
    copy.write_text(edit(text))
    return copy


def test_a_hand_edited_sample_is_drift_without_grading(tmp_path, monkeypatch):
    def no_grading(*args, **kwargs):
        raise AssertionError("a current sample must not be graded again")

    monkeypatch.setattr(samples, "_grade", no_grading)
    lab = "lab04"
    folder = ROOT / MANIFEST.lab(lab).folder
    body = samples.find_samples(_readme(lab).read_text())[0].body
    copy = _copy_with(tmp_path, lab, lambda t: t.replace(body, body.replace("1/5", "2/5")))
    drift = samples.sync_samples(folder, lab, chip_path(lab).read_text(), copy, check=True)
    assert drift and "copy_no_column_mask" in drift[0]
    current = _copy_with(tmp_path, lab, lambda t: t)
    assert samples.sync_samples(folder, lab, chip_path(lab).read_text(), current,
                                check=True) == []


def test_a_stale_sample_is_graded_again_and_rewritten_word_for_word(tmp_path):
    lab = "lab03"
    folder = ROOT / MANIFEST.lab(lab).folder
    original = _current(lab, _readme(lab).read_text())
    sample = samples.find_samples(original)[0]
    stale = original.replace(f"inputs={sample.inputs}", "inputs=0").replace(
        sample.body, sample.body.replace("expected 11", "expected 12"))
    copy = tmp_path / "README.md"
    copy.write_text(stale)
    drift = samples.sync_samples(folder, lab, chip_path(lab).read_text(), copy, check=False)
    assert drift, "a stale, wrong sample must be reported"
    assert copy.read_text() == original, "sync must write back exactly what the grader reports"


def test_a_sample_naming_an_unknown_mutant_is_an_error(tmp_path):
    lab = "lab04"
    folder = ROOT / MANIFEST.lab(lab).folder
    copy = _copy_with(tmp_path, lab, lambda t: t.replace("mutant=copy_no_column_mask",
                                                         "mutant=no_such_bug"))
    with pytest.raises(ValueError, match="no_such_bug"):
        samples.sync_samples(folder, lab, chip_path(lab).read_text(), copy, check=True)
