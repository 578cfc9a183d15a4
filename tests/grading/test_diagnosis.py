"""Cause first, from evidence: a mistake named in an early task comes first in the report and the
annotations, the failures it explains downstream point back to it in one line, each mistake is
spelled out once, an error is placed on the line of the student's file it came from, and a
failure that names nothing, in a task that builds on a failing one, follows from that task."""

from __future__ import annotations

from kit import MANIFEST, ROOT, starter_path

from msda_labs.grading.judge.annotations import annotation_lines, definitions
from msda_labs.grading.judge.diagnosis import diagnose
from msda_labs.grading.judge.prose import named_mistakes
from msda_labs.grading.judge.render import render_markdown, render_terminal
from msda_labs.grading.judge.results import Evidence, ExerciseResult, GradeResult
from msda_labs.grading.judge.results import TestResult as Verdict
from msda_labs.mistakes.forward import MISTAKES

HALF = MISTAKES["no_half_pixel"]


def _wrong(case: str) -> str:
    return f"msda_forward_kernel on case '{case}': 12 of 18 elements differ; first at [0, 0]: " \
           f"yours 5.38, reference 4.88; this is exactly the output of {HALF}"


def _half(case: str) -> Evidence:
    return Evidence(case=case, wrong=12, total=18, first_wrong="[0, 0]", yours=5.38,
                    reference=4.88, matched=[HALF], named=HALF)


def _typo() -> Evidence:
    return Evidence(function="sample_point", line=150, error="NameError: name 'yy' is not defined")


def _result() -> GradeResult:
    """Lab 05 with a missing -0.5 in load_point (Task 5.1): the kernel's tests (5.4) fail with
    the same named mistake, the fp16 accumulator test (5.6) names nothing, a typo in a helper
    (5.3) raises at line 150; one task passed, one not attempted."""
    return GradeResult("lab05", "The forward kernel, correct", exercises=[
        ExerciseResult("5.1", "load_point", [
            Verdict("test_load_point_reads_and_shifts[float32]", "failed", 0, 1,
                    _wrong("point"), evidence=_half("point")),
            Verdict("test_load_point_reads_and_shifts[float16]", "failed", 0, 1,
                    _wrong("point16"), evidence=_half("point16")),
            Verdict("test_load_point_lanes_off_read_nothing", "passed", 1, 1)]),
        ExerciseResult("5.2", "gather_corner", [Verdict("test_gather", "passed", 2, 2)]),
        ExerciseResult("5.3", "sample_point", [
            Verdict("test_sample_point_inside", "error", 0, 1,
                    "NameError: name 'yy' is not defined (line 150 of lab05.py)",
                    evidence=_typo())]),
        ExerciseResult("5.4", "msda_forward_kernel", [
            Verdict(f"test_kernel_matches_reference[{c}]", "failed", 0, 1, _wrong(c),
                    evidence=_half(c))
            for c in ("multi_level", "single", "out_of_bounds", "exact_knots")]),
        ExerciseResult("5.5", "query tiles and masks", [
            Verdict("test_any_block_q[BLOCK_Q1]", "error", 0, 1,
                    "NameError: name 'yy' is not defined (line 150 of lab05.py); more advice",
                    evidence=_typo())]),
        ExerciseResult("5.6", "fp32 accumulation", [
            Verdict("test_accumulates_in_fp32", "failed", 0, 3,
                    "msda_forward_kernel on case 'peaked': 12 of 12 elements differ; first at "
                    "[0, 0, 0]: yours 57.06, reference 54.28",
                    evidence=Evidence(case="peaked", wrong=12, total=12, first_wrong="[0, 0, 0]",
                                      yours=57.06, reference=54.28,
                                      function="msda_forward_kernel"))]),
        ExerciseResult("5.7", "int64 offsets", [
            Verdict("test_int64_offsets_past_2_31", "not_attempted", 0, 3, "")]),
    ], depends={"5.3": ["5.2"], "5.4": ["5.1", "5.3"], "5.5": ["5.4"], "5.6": ["5.4"],
                "5.7": ["5.4"]})


def test_causes_in_task_order_and_what_follows_from_them():
    diagnosis = diagnose(_result())
    assert [(c.task, c.short) for c in diagnosis.causes] == [
        ("5.1", "missing -0.5"),
        ("5.3", "NameError: name 'yy' is not defined (line 150, in sample_point)")]
    kinds = {ex.id: diagnosis.kind(ex) for ex in _result().exercises}
    assert kinds == {"5.1": "cause", "5.2": "passed", "5.3": "cause", "5.4": "follows",
                     "5.5": "follows", "5.6": "follows", "5.7": "not_attempted"}
    assert named_mistakes("3 of 8 elements differ (rtol=1e-05)") == []


def test_the_message_is_never_read_for_a_cause():
    """The same messages without evidence name nothing: the cause is read from data only, and
    the report starts at the first failing task, saying no known mistake matches."""
    result = _result()
    for _, test in result.tests():  # what each test measured stays; nothing is named
        test.evidence.named, test.evidence.matched = "", []
        test.evidence.error, test.evidence.line = "", None
    diagnosis = diagnose(result)
    assert diagnosis.causes == []
    # each task that fails on its own, once, in reading order (5.3 calls nothing of 5.1)
    assert [(c.task, c.named) for c in diagnosis.start] == [("5.1", False), ("5.3", False)]
    data = result.to_dict()
    assert data["start_here"]["task"] == "5.1" and data["start_here"]["cause"] == ""
    assert data["start_here"]["text"].startswith(
        "start here: Task 5.1 (load_point): no known mistake matches")


def test_json_report_carries_start_here_and_each_cause():
    data = _result().to_dict()
    assert data["start_here"]["task"] == "5.1"
    assert data["start_here"]["cause"] == "a missing -0.5" and data["start_here"]["causes"] == 2
    causes = {t["name"]: t["cause"] for ex in data["exercises"] for t in ex["tests"]}
    assert causes["test_load_point_reads_and_shifts[float32]"]["kind"] == "named"
    assert causes["test_sample_point_inside"]["kind"] == "error"
    typo = "NameError: name 'yy' is not defined (line 150, in sample_point)"
    assert causes["test_any_block_q[BLOCK_Q1]"] == {
        "kind": "follows", "task": "5.3", "label": typo,
        "text": f"follows from Task 5.3's {typo}: fix that first"}
    assert causes["test_accumulates_in_fp32"]["kind"] == "follows"
    assert causes["test_load_point_lanes_off_read_nothing"] == {}
    again = GradeResult.from_dict(data)
    assert again.start_here == data["start_here"]
    assert again.exercises[0].tests[0].evidence.matched == [HALF]


def test_terminal_report_names_each_mistake_once_and_points_back():
    text = render_terminal(_result())
    assert text.count(HALF) == 2  # the start line and the first failure, nothing else
    lines = text.splitlines()
    assert lines[1].startswith("start here: Task 5.1 (load_point): a missing -0.5")
    assert lines[1] == _result().to_dict()["start_here"]["text"]  # the JSON report's line
    assert lines[2] == ("  then: Task 5.3 (sample_point): NameError: name 'yy' is not defined "
                        "(line 150, in sample_point)")
    assert "FAILED: test_load_point_reads_and_shifts[float16]: the same missing -0.5 as above" \
        in text
    # the four kernel failures share one line that points back to Task 5.1
    shared = [x for x in lines if "follows from Task 5.1's missing -0.5" in x]
    assert len(shared) == 1 and shared[0].strip().startswith("FAILED: 4 tests (")
    assert "and 1 more): follows from Task 5.1's missing -0.5: fix that first" in shared[0]
    # the error downstream is the same error (whatever advice a test adds after its line)
    assert "ERROR: test_any_block_q[BLOCK_Q1]: follows from Task 5.3's NameError" in text
    # a failure that names nothing, in a task that calls the failing kernel, follows from it;
    # nothing is "behind" it without evidence
    assert "FAILED: test_accumulates_in_fp32: follows from Task 5.1 (load_point) and Task 5.3 " \
           "(sample_point): this task calls their code, which fails their own tests: fix that " \
           "first" in text
    assert "may be behind" not in text
    markdown = render_markdown(_result())
    assert markdown.count(HALF) == 2 and "follows from Task 5.1's missing -0.5" in markdown


def test_annotations_cause_first_on_the_line_that_raised():
    lab = MANIFEST.lab("lab05")
    module = starter_path("lab05")
    out = annotation_lines(_result(), module, ROOT / lab.folder / "tests", "lab05.py")
    titles = [line.split("title=Task ", 1)[1].split(" ", 1)[0] for line in out]
    # the causes (5.1, 5.3), then what follows (5.4, 5.5, 5.6), then the notice of the task
    # not attempted
    assert titles == ["5.1", "5.3", "5.4", "5.5", "5.6", "5.7"]
    assert f"line={definitions(module)['load_point']}," in out[0]
    assert ",line=150," in out[1]  # the typo's line, in the function that raised
    # what follows sits on the function its test exercises, never on the cause's line
    kernel = definitions(module)["msda_forward_kernel"]
    assert f",line={kernel}," in out[2] and f",line={kernel}," in out[4]
    assert out[2].endswith("follows from Task 5.1's missing -0.5: fix that first")
    assert HALF in out[0] and not any(HALF in line for line in out[1:])


def test_cpu_report_names_the_gpu_points_and_how_to_earn_them():
    result = _result()
    result.gpu_points = {"5.7": 2, "5.8": 14}
    text = render_terminal(result)
    assert "Task 5.7   int64 offsets" in text and "(+2 on the GPU)" in text
    assert "the GPU stage holds 16 more points (Task 5.7: 2, Task 5.8: 14), not graded here: " \
           "earn them with `nox -s lab05-gpu`" in text
    again = GradeResult.from_dict(result.to_dict())
    assert again.gpu_points == {"5.7": 2, "5.8": 14}
    gpu = GradeResult("lab05", stages=["gpu"])
    assert again.merge(gpu).gpu_points == {}  # the GPU stage graded: nothing left to earn
    assert "GPU stage" not in render_markdown(again)
