"""Code similarity across a class: pairs of submissions that share too much, and submissions that
share too much with the code the kit ships.

    python -m msda_labs similarity FOLDER [--lab LAB] [--prefix P] [--out similarity.html]
                                          [--threshold 0.5] [--shipped-threshold 0.5]
    python -m msda_labs regrade FOLDER --gradebook gradebook.csv --similarity

The comparison is copydetect's (winnowing over k-grams of tokens, the method of MOSS): each
``labNN.py`` is tokenized and filtered (every variable name becomes ``V``, every function name
``F``, every string ``S``; comments and spacing are dropped), cut into k-grams of ``noise``
characters of that filtered text, and two files share the k-grams they have in common. The
share of a file is the fraction of its own fingerprinted text found in the other, after the
boilerplate is removed: the lab's starter and the template's tests (what every student starts
from) match nobody.

Two lists come out:

* **pairs**: two students whose files share more than ``threshold`` of either file;
* **shipped**: a student whose file shares more than ``shipped_threshold`` of itself with code
  the kit ships in the template (the chips of earlier labs, the truth, the student-facing spec
  and shipped kernels) or with the lab's own chip (the answer key, which does not ship but may
  leak).

What it cannot catch is in docs/instructors.md (section *Similarity*): a rewrite by hand, a
solution from outside the class, a copy of a small part below the thresholds. A flag is a
reason to read two files side by side (the page shows the shared regions), never a verdict.
"""

from __future__ import annotations

import csv
import html
import json
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from msda_labs.errors import KitError

__all__ = ["SimilarityError", "PairMatch", "ShippedMatch", "SimilarityReport", "compare_class",
           "compare_files_of", "shipped_sources", "write_similarity", "similarity_column",
           "read_similarity_column", "NOISE", "THRESHOLD", "SHIPPED_THRESHOLD"]

NOISE = 25              # characters of filtered code in one k-gram (copydetect's default)
THRESHOLD = 0.5         # share of either file of a pair
SHIPPED_THRESHOLD = 0.5  # share of the student's file found in one shipped file
_KIT_FOLDERS = ("truth", "student")  # of msda_labs: shipped in every template


class SimilarityError(KitError, ValueError):
    """The class cannot be compared (no submissions, copydetect missing...)."""


@dataclass
class PairMatch:
    first: str
    second: str
    share_first: float          # of the first's file found in the second's
    share_second: float
    first_html: str = ""        # the file, escaped, the shared regions marked
    second_html: str = ""

    @property
    def share(self) -> float:
        return max(self.share_first, self.share_second)


@dataclass
class ShippedMatch:
    student: str
    source: str                 # e.g. "chips/lab00.py (shipped)"
    share_student: float        # of the student's file found in the source
    share_source: float
    student_html: str = ""
    source_html: str = ""


@dataclass
class SimilarityReport:
    lab: str
    students: list[str]
    threshold: float
    shipped_threshold: float
    pairs: list[PairMatch] = field(default_factory=list)
    shipped: list[ShippedMatch] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    not_compared: dict[str, str] = field(default_factory=dict)  # student -> why
    highest: dict[str, tuple[float, str]] = field(default_factory=dict)  # student -> (share, with)
    typical: float = 0.0        # the median pair's share: what this lab's solutions share anyway

    def column(self, student: str) -> str:
        """The gradebook's similarity cell of ``student``: the flags, or the highest share."""
        if student in self.not_compared:
            return f"not compared: {self.not_compared[student]}"
        flags = [f"{_pct(p.share)} with {p.second if p.first == student else p.first}"
                 for p in self.pairs if student in (p.first, p.second)]
        flags += [f"{_pct(m.share_student)} of it in {m.source}"
                  for m in self.shipped if m.student == student]
        if flags:
            return "FLAGGED: " + "; ".join(flags)
        share, other = self.highest.get(student, (0.0, ""))
        return f"below the thresholds (highest {_pct(share)}{' with ' + other if other else ''})"

    def to_dict(self) -> dict:
        return {"lab": self.lab, "threshold": self.threshold, "typical": round(self.typical, 4),
                "shipped_threshold": self.shipped_threshold, "sources": self.sources,
                "pairs": [{"first": p.first, "second": p.second,
                           "share_first": round(p.share_first, 4),
                           "share_second": round(p.share_second, 4)} for p in self.pairs],
                "shipped": [{"student": m.student, "source": m.source,
                             "share_student": round(m.share_student, 4),
                             "share_source": round(m.share_source, 4)} for m in self.shipped],
                "not_compared": self.not_compared,
                "column": {s: self.column(s) for s in self.students}}


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def _copydetect():
    try:
        import copydetect
    except ImportError:
        raise SimilarityError("the similarity check needs copydetect (pip install -r "
                              "requirements-dev.txt, or nox -s regrade)") from None
    return copydetect


def shipped_sources(lab_id: str, kit_package: Path) -> dict[str, Path]:
    """{label: file} of the code a student of ``lab_id`` can read in the template, and the
    lab's own chip: the chips of earlier labs, the truth and the student-facing modules of
    ``kit_package`` (an ``msda_labs`` folder: the kit's, or an export's ``shared/msda_labs``)."""
    number = int(lab_id[3:5])
    sources = {}
    for chip in sorted((kit_package / "chips").glob("lab[0-9][0-9].py")):
        mine = int(chip.stem[3:5])
        if mine < number:
            sources[f"chips/{chip.name} (shipped)"] = chip
        elif mine == number:
            sources[f"chips/{chip.name} (the answer key; not shipped)"] = chip
    for folder in _KIT_FOLDERS:
        for path in sorted((kit_package / folder).glob("*.py")):
            if path.name != "__init__.py":
                sources[f"{folder}/{path.name} (shipped)"] = path
    return sources


def _boilerplate(lab_folder: Path, lab_id: str) -> list[Path]:
    """The starter and the template's tests: what every student starts from."""
    files = [lab_folder / f"{lab_id}.py"]
    files += sorted((lab_folder / "tests").rglob("*.py")) if (lab_folder / "tests").is_dir() \
        else []
    return [f for f in files if f.is_file()]


def _marked(code: str, slices, mark: str) -> str:
    from copydetect import utils

    if slices is None or len(slices) == 0 or slices.shape[-1] == 0:
        return html.escape(code)
    text, _ = utils.highlight_overlap(code, slices, f"<mark class='{mark}'>", "</mark>",
                                      escape_html=True)
    return text


def compare_files_of(submissions: dict[str, str], lab_id: str, *, boilerplate: list[Path],
                     sources: dict[str, Path], threshold: float = THRESHOLD,
                     shipped_threshold: float = SHIPPED_THRESHOLD,
                     noise: int = NOISE) -> SimilarityReport:
    """Compare ``submissions`` ({student: the text of their labNN.py}) with one another and with
    ``sources``; ``boilerplate`` files match nobody."""
    copydetect = _copydetect()
    if not 0 < threshold <= 1 or not 0 < shipped_threshold <= 1:
        raise SimilarityError("thresholds are shares of a file: between 0 and 1 (e.g. 0.5)")
    report = SimilarityReport(lab_id, sorted(submissions), threshold, shipped_threshold,
                              sources=sorted(sources))
    if not submissions:
        return report  # nothing to compare (every checkout lacked a readable module)
    with tempfile.TemporaryDirectory(prefix="msda-similarity-") as tmp:
        stage = Path(tmp)
        detector = copydetect.CopyDetector(extensions=["py"], noise_t=noise, guarantee_t=noise,
                                           display_t=0.0, autoopen=False, silent=True,
                                           force_language="python")
        student_file, source_file = {}, {}
        for i, student in enumerate(sorted(submissions)):
            path = stage / "students" / f"{i:05d}" / f"{lab_id}.py"
            path.parent.mkdir(parents=True)
            path.write_text(submissions[student], encoding="utf-8")
            student_file[student] = str(path)
            detector.add_file(str(path), "testref")
        for i, (label, source) in enumerate(sorted(sources.items())):
            path = stage / "sources" / f"{i:05d}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(Path(source).read_text(encoding="utf-8", errors="replace"),
                            encoding="utf-8")
            source_file[label] = str(path)
            detector.add_file(str(path), "ref")
        for path in boilerplate:
            detector.add_file(str(path), "boilerplate")
        detector.run()
        tests, refs = detector.test_files, detector.ref_files
        t_index = {f: i for i, f in enumerate(tests)}
        r_index = {f: j for j, f in enumerate(refs)}
        matrix = detector.similarity_matrix

        def shares(a: str, b: str) -> tuple[float, float]:
            if len(matrix) == 0:
                return 0.0, 0.0
            s1, s2 = matrix[t_index[a], r_index[b]]
            return max(float(s1), 0.0), max(float(s2), 0.0)

        def slices(a: str, b: str):
            if (a, b) in detector.slice_matrix:
                return detector.slice_matrix[(a, b)]
            if (b, a) in detector.slice_matrix:
                first, second = detector.slice_matrix[(b, a)]
                return second, first
            return None, None

        def code(path: str) -> str:
            data = detector.file_data.get(path)
            return data.raw_code if data is not None else Path(path).read_text()

        names = sorted(submissions)
        everyone = []
        for x, first in enumerate(names):
            for second in names[x + 1:]:
                a, b = student_file[first], student_file[second]
                s1, s2 = shares(a, b)
                everyone.append(max(s1, s2))
                for me, other, share in ((first, second, s1), (second, first, s2)):
                    if share > report.highest.get(me, (-1.0, ""))[0]:
                        report.highest[me] = (share, other)
                if max(s1, s2) > threshold:
                    sa, sb = slices(a, b)
                    report.pairs.append(PairMatch(first, second, s1, s2,
                                                  _marked(code(a), sa, "shared"),
                                                  _marked(code(b), sb, "shared")))
        for student in names:
            a = student_file[student]
            for label in sorted(source_file):
                b = source_file[label]
                s1, s2 = shares(a, b)
                if s1 > report.highest.get(student, (-1.0, ""))[0]:
                    report.highest[student] = (s1, label)
                if s1 > shipped_threshold:
                    sa, sb = slices(a, b)
                    report.shipped.append(ShippedMatch(student, label, s1, s2,
                                                       _marked(code(a), sa, "shared"),
                                                       _marked(code(b), sb, "shared")))
        report.typical = statistics.median(everyone) if everyone else 0.0
    report.pairs.sort(key=lambda p: (-p.share, p.first, p.second))
    report.shipped.sort(key=lambda m: (-m.share_student, m.student, m.source))
    return report


def _submissions(folder: Path, lab: str | None, prefix: str | None,
                 ) -> tuple[str, dict[str, str], dict[str, str]]:
    from msda_labs.classroom.regrade import (
        RegradeError,
        _student,
        detect_lab,
        student_module,
    )

    found, missing, labs = {}, {}, set()
    for checkout in sorted(p for p in Path(folder).iterdir()
                           if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")):
        student = _student(checkout.name, prefix)
        try:
            lab_id = detect_lab(checkout, lab)
        except RegradeError as exc:
            missing[student] = str(exc)
            continue
        labs.add(lab_id)
        data, why = student_module(checkout, lab_id)
        if data is None:
            missing[student] = why
        else:
            found[student] = data.decode("utf-8", errors="replace")
    if len(labs) > 1:
        raise SimilarityError(f"{folder} holds checkouts of several labs ({', '.join(sorted(labs))}"
                              f"): pass --lab LAB")
    if not labs:
        raise SimilarityError(f"{folder} holds no checkouts (sub-folders with a labNN.py)")
    return labs.pop(), found, missing


def compare_class(folder: Path, *, lab: str | None = None, prefix: str | None = None,
                  pristine: Path | None = None, threshold: float = THRESHOLD,
                  shipped_threshold: float = SHIPPED_THRESHOLD) -> SimilarityReport:
    """Compare every checkout of ``folder`` (sub-folders holding a labNN.py, as ``regrade``
    reads them): the starter and tests of the lab (the kit's, or the export ``pristine``) are
    boilerplate; the kit's shipped code and the lab's chip are the sources."""
    from msda_labs.course.manifest import find_manifest, load_manifest

    lab_id, found, missing = _submissions(Path(folder), lab, prefix)
    kit_package = Path(__file__).resolve().parents[1]
    if pristine is not None:
        lab_folder = Path(pristine)
        package = lab_folder / "shared" / "msda_labs"
        sources = shipped_sources(lab_id, package if package.is_dir() else kit_package)
        answer = shipped_sources(lab_id, kit_package)
        sources.update({k: v for k, v in answer.items() if "answer key" in k})
    else:
        manifest = load_manifest(find_manifest())
        lab_folder = manifest.root / manifest.lab(lab_id).folder
        sources = shipped_sources(lab_id, kit_package)
    report = compare_files_of(found, lab_id, boilerplate=_boilerplate(lab_folder, lab_id),
                              sources=sources, threshold=threshold,
                              shipped_threshold=shipped_threshold)
    report.not_compared = missing
    report.students = sorted({*found, *missing})
    return report


_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}
.side{display:grid;grid-template-columns:1fr 1fr;gap:1em}
pre{background:#f7f7f7;padding:.5em;overflow-x:auto;font-size:12px;border:1px solid #ddd}
mark.shared{background:#ffd7a8}
details{margin:1em 0}summary{cursor:pointer;font-weight:600}
.note{color:#555}
"""


def _page(report: SimilarityReport) -> str:
    e = html.escape
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>Similarity: {e(report.lab)}"
           f"</title><style>{_STYLE}</style></head><body>",
           f"<h1>Similarity of the {len(report.students)} submission(s) of {e(report.lab)}</h1>",
           f"<p class='note'>Shares of each file's code (names, strings, comments and spacing "
           f"ignored; the starter and the tests removed) found in another file, by winnowing "
           f"(copydetect). A pair is listed above {_pct(report.threshold)} of either file; a "
           f"match with the kit's code above {_pct(report.shipped_threshold)} of the "
           f"student's file. The median pair of this class shares {_pct(report.typical)}: what "
           f"solutions of this lab share anyway. A flag is a reason to read both files, not a "
           f"verdict: see docs/instructors.md, <em>Similarity</em>.</p>"]
    out.append(f"<h2>Pairs of students ({len(report.pairs)})</h2>")
    if report.pairs:
        out.append("<table><tr><th>first</th><th>share of it</th><th>second</th>"
                   "<th>share of it</th></tr>")
        for i, p in enumerate(report.pairs):
            out.append(f"<tr><td><a href='#pair-{i}'>{e(p.first)}</a></td>"
                       f"<td>{_pct(p.share_first)}</td><td>{e(p.second)}</td>"
                       f"<td>{_pct(p.share_second)}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p>None above the threshold.</p>")
    out.append(f"<h2>Matches with the kit's code ({len(report.shipped)})</h2>")
    if report.shipped:
        out.append("<table><tr><th>student</th><th>share of their file</th><th>source</th>"
                   "</tr>")
        for i, m in enumerate(report.shipped):
            out.append(f"<tr><td><a href='#shipped-{i}'>{e(m.student)}</a></td>"
                       f"<td>{_pct(m.share_student)}</td><td>{e(m.source)}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p>None above the threshold.</p>")
    for i, p in enumerate(report.pairs):
        out.append(f"<details id='pair-{i}' open><summary>{e(p.first)} "
                   f"({_pct(p.share_first)}) and {e(p.second)} ({_pct(p.share_second)})"
                   f"</summary><div class='side'><div><h3>{e(p.first)}</h3><pre>"
                   f"{p.first_html}</pre></div><div><h3>{e(p.second)}</h3><pre>"
                   f"{p.second_html}</pre></div></div></details>")
    for i, m in enumerate(report.shipped):
        out.append(f"<details id='shipped-{i}' open><summary>{e(m.student)} "
                   f"({_pct(m.share_student)} of it) and {e(m.source)}</summary>"
                   f"<div class='side'><div><h3>{e(m.student)}</h3><pre>{m.student_html}</pre>"
                   f"</div><div><h3>{e(m.source)}</h3><pre>{m.source_html}</pre></div></div>"
                   f"</details>")
    out.append("<h2>Every student</h2><table><tr><th>student</th><th>similarity</th></tr>")
    for student in report.students:
        out.append(f"<tr><td>{e(student)}</td><td>{e(report.column(student))}</td></tr>")
    out.append("</table>")
    out.append("<h2>Sources compared</h2><ul>"
               + "".join(f"<li>{e(s)}</li>" for s in report.sources) + "</ul></body></html>")
    return "\n".join(out)


def write_similarity(report: SimilarityReport, page: Path) -> list[Path]:
    """The side-by-side page ``page`` (self-contained), and beside it ``<stem>.csv`` (one row
    per student: the similarity column) and ``<stem>.json`` (every flag)."""
    page = Path(page)
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(_page(report), encoding="utf-8")
    table = page.with_suffix(".csv")
    with open(table, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", "lab", "similarity"])
        for student in report.students:
            writer.writerow([student, report.lab, report.column(student)])
    data = page.with_suffix(".json")
    data.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    return [page, table, data]


def similarity_column(report: SimilarityReport) -> dict[tuple[str, str], str]:
    return {(s, report.lab): report.column(s) for s in report.students}


def read_similarity_column(paths: list[Path]) -> dict[tuple[str, str], str]:
    """{(student, lab): cell} from the ``similarity.json`` files ``write_similarity`` wrote."""
    cells = {}
    for path in map(Path, paths):
        try:
            data = json.loads(path.read_text())
            for student, cell in data["column"].items():
                cells[student, data["lab"]] = cell
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SimilarityError(f"{path}: not a similarity.json of `similarity` "
                                  f"({type(exc).__name__}: {exc})") from None
    return cells
