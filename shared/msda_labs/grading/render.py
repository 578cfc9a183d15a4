"""Writers of a :class:`GradeResult` for people: the terminal breakdown and Markdown (job summary,
Feedback PR, Release notes). Platform formats live in :mod:`msda_labs.classroom.platforms`."""

from __future__ import annotations

from msda_labs.grading.results import GradeResult

__all__ = ["render_terminal", "render_markdown"]

def _status_word(ex) -> str:
    return {"passed": "", "not_attempted": "  not attempted"}.get(ex.status, "")


def _test_lines(ex) -> list[str]:
    """The terminal's lines under an exercise: each test that did not pass, with its feedback
    (a named mistake when the grader recognised one)."""
    if ex.status == "not_attempted":
        return []
    return [f"{t.status.terminal}: {t.name}: {t.message or t.status}"
            for t in ex.tests if t.status != "passed"]


def render_terminal(result: GradeResult, width: int = 100) -> str:
    title = f"{result.lab}  {result.title}".rstrip()
    lines = [f"== {title} " + "=" * max(0, width - len(title) - 4)]
    if result.submission:
        lines.append(f"submission: {result.submission}")
    for note in result.notes:
        lines.append(f"note: {note}")
    modified = result.integrity.get("modified") or []
    if modified:
        lines.append(f"WARNING: {len(modified)} grading file(s) differ from the published ones: "
                     + ", ".join(modified[:8]) + (" ..." if len(modified) > 8 else ""))
    name_w = max([len(ex.name) for ex in result.exercises] + [10])
    for ex in result.exercises:
        lines.append(f"  Task {ex.id:<5} {ex.name:<{name_w}}  {ex.score:>3}/{ex.max_score:<3}"
                     f"{_status_word(ex)}")
        lines += [f"      {line}" for line in _test_lines(ex)]
    lines.append(f"  {'Total':<{name_w + 12}}{result.score:>3}/{result.max_score}")
    return "\n".join(lines)


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(result: GradeResult) -> str:
    """The terminal's report as Markdown: the same rows (task, exercise, points, status) and the
    same feedback lines under each, named mistakes included, as one table."""
    out = [f"## {result.lab} {result.title}: {result.score}/{result.max_score}", ""]
    modified = result.integrity.get("modified") or []
    if modified:
        out += [f"> [!WARNING]\n> Grading files were modified: {', '.join(modified)}. The score "
                f"below is not trustworthy until an instructor regrades.", ""]
    for note in result.notes:
        out.append(f"*{_md_escape(note)}*")
    out += ["| Task | Exercise | Points | Status | What went wrong |", "|---|---|---|---|---|"]
    for ex in result.exercises:
        wrong = "<br>".join(f"`{_md_escape(line)}`" for line in _test_lines(ex))
        out.append(f"| {ex.id} | `{_md_escape(ex.name)}` | {ex.score}/{ex.max_score} | "
                   f"{ex.status.replace('_', ' ')} | {wrong} |")
    out.append(f"| | **Total** | **{result.score}/{result.max_score}** | | |")
    return "\n".join(out) + "\n"
