"""Writers of a :class:`GradeResult` for people: the terminal breakdown and Markdown (job summary,
Feedback PR, Release notes). Platform formats live in :mod:`msda_labs.classroom.platforms`.

Both read the result cause first (:mod:`.diagnosis`): a line at the top names where each mistake
starts, in task order; under a task, a failure that names a mistake already named (upstream, or
by an earlier test of the task) says so in one line instead of repeating it, and the tests of a
task that all follow from the same cause share that line.
"""

from __future__ import annotations

from msda_labs.grading.judge.diagnosis import (
    Diagnosis,
    after_text,
    diagnose,
    follows_text,
    student_words,
    unnamed_text,
)
from msda_labs.grading.judge.results import GradeResult

__all__ = ["render_terminal", "render_markdown", "test_lines", "start_here", "own_message",
           "gpu_points_line"]

# A shared "follows from" line lists this many test names, then "and N more".
_NAMES_SHOWN = 3


def _status_word(ex) -> str:
    return {"passed": "", "not_attempted": "  not attempted"}.get(ex.status, "")


def _names(tests) -> str:
    names = [t.name for t in tests]
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else "")


def test_lines(ex, diagnosis: Diagnosis | None = None) -> list[str]:
    """The lines under an exercise: each test that did not pass with its feedback, cause first.

    A failure that names a mistake starting here keeps its whole message; one fully explained by
    a cause named before it gets one line (shared by the tests of the exercise that follow from
    the same causes); a failure that names nothing keeps its message, and says which causes
    upstream may be behind it.
    """
    if ex.status == "not_attempted":
        return []
    lines: list[str] = []
    grouped: dict[str, list] = {}
    for test in ex.tests:
        if test.status == "passed":
            continue
        finding = diagnosis.of(ex, test) if diagnosis is not None else None
        if finding is None:
            lines.append(f"{test.status.terminal}: {test.name}: "
                         f"{student_words(test.message or str(test.status))}")
            continue
        if finding.explained:
            text = follows_text(finding)
            if text not in grouped:
                grouped[text] = []
                lines.append(text)  # a placeholder, filled in below
            grouped[text].append(test)
            continue
        lines.append(f"{test.status.terminal}: {test.name}: {own_message(finding)}")
    out = []
    for line in lines:
        tests = grouped.get(line)
        if tests is None:
            out.append(line)
            continue
        statuses = {t.status.terminal for t in tests}
        status = statuses.pop() if len(statuses) == 1 else "FAILED"
        if len(tests) == 1:
            out.append(f"{status}: {tests[0].name}: {line}")
        else:
            out.append(f"{status}: {len(tests)} tests ({_names(tests)}): {line}")
    return out


def own_message(finding) -> str:
    """A failure's own message in the student's words; one that names no known mistake says so
    (its message already shows the first wrong element and the case), and one in a function
    that raised before says that the exception may be behind it."""
    test = finding.test
    message = student_words(test.message or str(test.status))
    if not finding.names and test.evidence.first_wrong and unnamed_text() not in message:
        message = f"{message}; {unnamed_text()}"
    if finding.after:
        message = f"{message}; {after_text(finding.after)}"
    return message


def start_here(diagnosis: Diagnosis) -> list[str]:
    """Where to start reading, each cause once, in reading order: the named causes, else the
    first failing task (no known mistake matches). Empty when nothing failed."""
    if not diagnosis.start:
        return []
    first, *rest = diagnosis.start
    return [f"start here: {first.start_line()}"] + [f"  then: {c.start_line()}" for c in rest]


def gpu_points_line(result: GradeResult) -> str:
    """What the GPU stage adds, when this result holds the CPU stages only."""
    pending = {task: pts for task, pts in (result.gpu_points or {}).items() if pts}
    if not pending:
        return ""
    total = sum(pending.values())
    per_task = ", ".join(f"Task {task}: {pts}" for task, pts in pending.items())
    return (f"the GPU stage holds {total} more points ({per_task}), not graded here: earn them "
            f"with `nox -s {result.lab}-gpu` (a CUDA GPU here, else Modal with your account)")


def _row_points(ex, result: GradeResult) -> str:
    extra = (result.gpu_points or {}).get(ex.id, 0)
    return f" (+{extra} on the GPU)" if extra else ""


def render_terminal(result: GradeResult, width: int = 100) -> str:
    diagnosis = diagnose(result)
    title = f"{result.lab}  {result.title}".rstrip()
    lines = [f"== {title} " + "=" * max(0, width - len(title) - 4)]
    lines += start_here(diagnosis)  # a failing report starts here
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
                     f"{_status_word(ex)}{_row_points(ex, result)}")
        lines += [f"      {line}" for line in test_lines(ex, diagnosis)]
    lines.append(f"  {'Total':<{name_w + 12}}{result.score:>3}/{result.max_score}")
    gpu = gpu_points_line(result)
    if gpu:
        lines.append(f"  + {gpu}")
    return "\n".join(lines)


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(result: GradeResult) -> str:
    """The terminal's report as Markdown: where to start, then the same rows (task, exercise,
    points, status) and the same feedback lines under each, as one table. Each named mistake is
    spelled out once; later failures it explains point back to it."""
    diagnosis = diagnose(result)
    out = [f"## {result.lab} {result.title}: {result.score}/{result.max_score}", ""]
    causes = start_here(diagnosis)  # a failing report starts here
    if causes:
        out += ["**" + _md_escape(causes[0]) + "**"]
        out += [_md_escape(c) for c in causes[1:]] + [""]
    modified = result.integrity.get("modified") or []
    if modified:
        out += [f"> [!WARNING]\n> Grading files were modified: {', '.join(modified)}. The score "
                f"below is not trustworthy until an instructor regrades.", ""]
    for note in result.notes:
        out.append(f"*{_md_escape(note)}*")
    if out[-1]:
        out.append("")
    out += ["| Task | Exercise | Points | Status | What went wrong |", "|---|---|---|---|---|"]
    for ex in result.exercises:
        wrong = "<br>".join(f"`{_md_escape(line)}`" for line in test_lines(ex, diagnosis))
        out.append(f"| {ex.id} | `{_md_escape(ex.name)}` | {ex.score}/{ex.max_score}"
                   f"{_row_points(ex, result)} | {ex.status.replace('_', ' ')} | {wrong} |")
    out.append(f"| | **Total** | **{result.score}/{result.max_score}** | | |")
    gpu = gpu_points_line(result)
    if gpu:
        out += ["", f"*{_md_escape(gpu)}*"]
    return "\n".join(out) + "\n"
