"""The class leaderboard: a ranking of the speed trials a GPU regrade timed on the judge's clock.

Every speed test of the GPU stage keeps its trial in the grade result (``GradeResult.speed``,
written by :mod:`msda_labs.grading.judge.speedjudge`): the time per call of the student's code, and
of the PyTorch reference and the chip beside it, all taken by the judge on fresh inputs with every
output checked. This module ranks those times, one board per lab and trial: each student's time per
call, the spread of its rounds, the speedup over the reference, the ratio to the chip, the rank; the
reference, the chip and the public peer (where the grading machine had it) are drawn as reference
lines at their own times (the median over the class's trials). A trial that was not timed (a wrong
output, a forged checksum, a time below the floor, a crash) is listed under the board, unranked,
with the reason.

:func:`write_leaderboard` writes a self-contained HTML page (no script, no external file) and
the same data as CSV. ``hide_names``: the page shows "student N" in an order drawn at random for
that page (for display in class); the CSV, the instructor's file, always carries the names.
"""

from __future__ import annotations

import csv
import html
import math
import random
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Entry", "Board", "entries_of", "boards_of", "render_html", "write_csv",
           "write_leaderboard", "LINE_NAMES"]

# The baselines a trial may time beside the student's code, as the reference lines say them.
LINE_NAMES = {"reference": "PyTorch reference", "chip": "the course's chip",
              "peer": "public peer"}


@dataclass
class Entry:
    """One student's trial on one board."""

    student: str
    lab: str
    key: str
    status: str  # "timed" or "failed"
    why: str = ""
    time_us: float | None = None
    spread_us: float | None = None
    times_us: dict = field(default_factory=dict)
    device: str = ""
    method: str = ""

    def baseline(self, name: str) -> float | None:
        """The time of a baseline in this trial (the reference's backward alone where its
        forward was timed too)."""
        value = self.times_us.get(name)
        if value is None:
            return None
        if name == "reference" and "reference_forward" in self.times_us:
            value = value - self.times_us["reference_forward"]
        return value if value > 0 else None


@dataclass
class Board:
    lab: str
    key: str
    ranked: list[Entry] = field(default_factory=list)
    unranked: list[Entry] = field(default_factory=list)
    lines: dict = field(default_factory=dict)  # {line name: (median us, trials)}
    device: str = ""

    def speedup(self, entry: Entry) -> float | None:
        ref = entry.baseline("reference")
        return ref / entry.time_us if ref and entry.time_us else None

    def vs_chip(self, entry: Entry) -> float | None:
        chip = entry.baseline("chip")
        return entry.time_us / chip if chip and entry.time_us else None


def entries_of(rows: Iterable) -> list[Entry]:
    """Entries from graded rows: anything with ``student``, ``lab`` and ``result`` (a
    :class:`~msda_labs.grading.judge.results.GradeResult`, or None: left out)."""
    found = []
    for row in rows:
        result = getattr(row, "result", None)
        for record in getattr(result, "speed", None) or []:
            if not isinstance(record, dict) or "key" not in record:
                continue
            times = {str(k): float(v) for k, v in (record.get("times_us") or {}).items()
                     if isinstance(v, (int, float))}
            primary = record.get("primary") or "yours"
            spread = (record.get("spread_us") or {}).get(primary)
            timed = record.get("status") == "timed" and primary in times
            found.append(Entry(
                student=str(row.student), lab=str(row.lab), key=str(record["key"]),
                status="timed" if timed else "failed",
                why="" if timed else str(record.get("why") or "not timed"),
                time_us=times.get(primary) if timed else None,
                spread_us=float(spread) if isinstance(spread, (int, float)) else None,
                times_us=times, device=str(record.get("device", "")),
                method=str(record.get("method", ""))))
    return found


def boards_of(entries: Iterable[Entry]) -> list[Board]:
    """One board per (lab, trial), its timed entries ranked fastest first."""
    boards: dict[tuple[str, str], Board] = {}
    for entry in entries:
        board = boards.setdefault((entry.lab, entry.key), Board(entry.lab, entry.key))
        (board.ranked if entry.status == "timed" else board.unranked).append(entry)
        board.device = board.device or entry.device
    for board in boards.values():
        board.ranked.sort(key=lambda e: (e.time_us, e.student))
        board.unranked.sort(key=lambda e: e.student)
        for name in LINE_NAMES:
            values = [v for v in (e.baseline(name) for e in board.ranked + board.unranked)
                      if v is not None]
            if values:
                board.lines[name] = (statistics.median(values), len(values))
    return sorted(boards.values(), key=lambda b: (b.lab, b.key))


def _names(boards: list[Board], hide: bool) -> dict[str, str]:
    students = sorted({e.student for b in boards for e in b.ranked + b.unranked})
    if not hide:
        return {s: s for s in students}
    order = list(students)
    random.SystemRandom().shuffle(order)
    return {s: f"student {i + 1}" for i, s in enumerate(order)}


def _fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "" if value is None else f"{value:.{digits}f}{suffix}"


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 62rem; color: #1d2330; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.15rem; margin-top: 2.2rem; }
p.how { color: #4a5263; font-size: .92rem; }
table { border-collapse: collapse; width: 100%; font-size: .95rem; }
th, td { padding: .35rem .6rem; border-bottom: 1px solid #e3e6ec; text-align: right; }
th:nth-child(2), td:nth-child(2) { text-align: left; }
td.bar { width: 30%; text-align: left; }
td.bar span { display: inline-block; height: .8rem; background: #3b6fd8; border-radius: 2px; }
tr.line td { color: #7a4b00; font-style: italic; background: #fff8e8; }
tr.line td.bar span { background: #d99a1e; }
tr.first td { font-weight: 600; }
ul.unranked { color: #8a1f1f; font-size: .9rem; }
"""


def render_html(boards: list[Board], *, hide_names: bool = False,
                title: str = "Speed leaderboard") -> str:
    """The page, self-contained."""
    names = _names(boards, hide_names)
    out = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
           f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
           f"<h1>{html.escape(title)}</h1>",
           "<p class='how'>Every time is the judge's: the grading process timed each round trip "
           "to the process running the code, from a fresh seed to the checksums of calls on "
           "input sets drawn from it, and checked the outputs against the ground truth; the "
           "protocol's own cost is subtracted. Times are per call, end to end (what a caller "
           "waits), the median of the rounds; &plusmn; is the spread (interquartile range) of "
           "the rounds. Reference lines: the median of the baselines' times over the class's "
           "trials, timed the same way in the judge. Bars: the time on a log scale.</p>"]
    if not boards:
        out.append("<p>No speed trial was timed on the judge's clock in this regrade (the GPU "
                   "stage's speed tests write them).</p>")
    for board in boards:
        out.append(f"<section data-board='{html.escape(board.lab)}: {html.escape(board.key)}'>")
        out.append(f"<h2>{html.escape(board.lab)}: {html.escape(board.key)}"
                   + (f" &middot; {html.escape(board.device)}" if board.device else "")
                   + "</h2>")
        rows = [("entry", e.time_us, e) for e in board.ranked]
        rows += [("line", us, name) for name, (us, _n) in board.lines.items()]
        rows.sort(key=lambda r: (r[1], r[0] == "entry"))
        # Bars on a log scale: a class spans from the chip's microseconds to a sleeping
        # submission's milliseconds.
        low = min([r[1] for r in rows if r[1] > 0] or [1.0])
        top = max([r[1] for r in rows] or [1.0])
        span = math.log(top / low) if top > low else 1.0
        out.append("<table><thead><tr><th>rank</th><th>student</th><th>time per call (us)"
                   "</th><th>&plusmn;</th><th>speedup over the reference</th>"
                   "<th>vs the chip</th><th class='bar'></th></tr></thead><tbody>")
        rank = 0
        for kind, us, item in rows:
            width = 4.0 + 96.0 * (math.log(max(us, low) / low) / span if top > low else 1.0)
            bar = f"<td class='bar'><span style='width:{width:.1f}%'></span></td>"
            if kind == "line":
                trials = board.lines[item][1]
                out.append(f"<tr class='line'><td></td><td>{html.escape(LINE_NAMES[item])} "
                           f"(median of {trials} trial{'s' if trials != 1 else ''})</td>"
                           f"<td>{us:.1f}</td><td></td><td></td><td></td>{bar}</tr>")
                continue
            rank += 1
            speedup, chip = board.speedup(item), board.vs_chip(item)
            out.append(f"<tr class='entry{' first' if rank == 1 else ''}'><td>{rank}</td>"
                       f"<td>{html.escape(names[item.student])}</td><td>{us:.1f}</td>"
                       f"<td>{_fmt(item.spread_us)}</td><td>{_fmt(speedup, 2, 'x')}</td>"
                       f"<td>{_fmt(chip, 2, 'x')}</td>{bar}</tr>")
        out.append("</tbody></table>")
        if "peer" not in board.lines:
            out.append("<p class='how'>The public peer was not timed: it is not installed on "
                       "the grading machine.</p>")
        if board.unranked:
            out.append("<p>Not ranked (no time was credited):</p><ul class='unranked'>")
            for entry in board.unranked:
                out.append(f"<li>{html.escape(names[entry.student])}: "
                           f"{html.escape(entry.why[:400])}</li>")
            out.append("</ul>")
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


CSV_COLUMNS = ["lab", "trial", "rank", "student", "time_us", "spread_us",
               "speedup_over_reference", "ratio_to_chip", "reference_us", "chip_us", "peer_us",
               "status", "why", "device", "method"]


def write_csv(boards: list[Board], path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for board in boards:
            for rank, entry in enumerate(board.ranked + board.unranked, start=1):
                timed = entry.status == "timed"
                writer.writerow([
                    board.lab, board.key, rank if timed else "", entry.student,
                    _fmt(entry.time_us, 3), _fmt(entry.spread_us, 3),
                    _fmt(board.speedup(entry), 4), _fmt(board.vs_chip(entry), 4),
                    _fmt(entry.baseline("reference"), 3), _fmt(entry.baseline("chip"), 3),
                    _fmt(entry.baseline("peer"), 3), entry.status, entry.why, entry.device,
                    entry.method])
    return path


def write_leaderboard(rows: Iterable, page: Path | str, *, hide_names: bool = False,
                      title: str = "Speed leaderboard") -> tuple[Path, Path, str]:
    """Write the page and its CSV (``page`` with the suffix .csv) from graded rows. Returns
    (page, csv, a line saying what was written)."""
    page = Path(page)
    boards = boards_of(entries_of(rows))
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render_html(boards, hide_names=hide_names, title=title))
    table = write_csv(boards, page.with_suffix(".csv"))
    ranked = sum(len(b.ranked) for b in boards)
    return page, table, (f"leaderboard: {page} and {table} ({len(boards)} board(s), {ranked} "
                         f"timed trial(s){', names hidden on the page' if hide_names else ''})")
