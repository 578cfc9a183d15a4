"""classroom.yml: the course manifest validates, and a bad key is named."""

from pathlib import Path

import pytest
import yaml

from msda_labs.course.manifest import ManifestError, load_manifest

ROOT = Path(__file__).resolve().parents[1]


def test_the_course_manifest_is_valid_and_complete():
    manifest = load_manifest(ROOT / "classroom.yml")
    assert [lab.id for lab in manifest.labs] == [f"lab{n:02d}" for n in range(11)]
    for lab in manifest.labs:
        if lab.built:
            assert (ROOT / lab.folder / f"{lab.id}.py").is_file(), lab.id
            assert (ROOT / lab.folder / "tests").is_dir(), lab.id
    assert {lab.id for lab in manifest.labs if lab.has_gpu} == {"lab05", "lab06", "lab08", "lab10"}


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["labs"][0].__setitem__("stages", [{"name": "interpreted"}]),
     r"labs\[0\]\.stages\[0\]\.name: 'interpreted' is not one of"),
    (lambda d: d["labs"][1].__setitem__("colour", "red"),
     r"labs\[1\]: Additional properties are not allowed \('colour'"),
    (lambda d: d["course"].__setitem__("gpu", "GTX1080"), r"course\.gpu: 'GTX1080' is not one of"),
    (lambda d: d["labs"][2].pop("title"), r"labs\[2\]: 'title' is a required property"),
    (lambda d: d["labs"][3].__setitem__("folder", "lab-07-oops"), "must start with lab-03-"),
])
def test_a_bad_key_is_named(tmp_path, mutate, message):
    data = yaml.safe_load((ROOT / "classroom.yml").read_text())
    mutate(data)
    path = tmp_path / "classroom.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ManifestError, match=message):
        load_manifest(path)
