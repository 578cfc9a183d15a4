"""Speed on the judge's clock (msda_labs.grading.judge.speedjudge), proved through real children.

Lab 05's speed test (Task 5.8) runs here on the CPU, on a small case, against real submissions
forked by the grading worker: an honest torch stand-in, and every file of tests/attacks/speed/
(patched timers, outputs cached by pointer or content, repeated calls skipped, work left on a
side stream or thread, precomputed views, a reduced-precision shortcut, checked calls told apart
from timed ones, the trial's own child half rewritten). Each attack must lose the speed points: its
timed outputs are wrong, or the judge's clock sees its slow work. The honest stand-in's outputs all
pass and its time is its own. On the H200 the same files run against the real chips (docs/gpu.md,
"How speed is graded").
"""

import types
from pathlib import Path

import pytest
import torch
from kit import load_file_module

from msda_labs.grading.isolation.executor import Executor
from msda_labs.grading.judge import speedjudge
from msda_labs.grading.judge.submission import Submission
from msda_labs.grading.speed.timing import how_timed
from msda_labs.truth.cases import MULTI_LEVEL

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = ROOT / "tests" / "attacks" / "speed"
SLOW_US = 20_000  # what the attacks' honest path sleeps, a call


def _honest_source() -> str:
    text = (ATTACKS / "lab05_timed_pattern.py").read_text()
    base = text[text.index("import time"):text.index("_SEEN = set()")]
    return base + ("\ndef msda_forward(value, spatial_shapes, level_start_index,\n"
                   "                 sampling_locations, attention_weights, BLOCK_Q=32):\n"
                   "    return _honest(value, spatial_shapes, level_start_index,\n"
                   "                   sampling_locations, attention_weights)\n")


class _Session:
    """The part of a grading session a speed test reaches through its submission."""

    def __init__(self, executor):
        self._executor = executor
        self.timeout = 60.0
        self.notes: list[str] = []
        self.speed: list[dict] = []

    def executor(self):
        return self._executor


@pytest.fixture(scope="module")
def lab05():
    path = ROOT / "lab-05-forward-correct" / "tests" / "test_lab05_forward.py"
    return load_file_module(path, "_speedjudge_test_lab05_forward", beside=True)


def _grade(lab05, ex: Executor, path: Path, test: str = "test_forward_speed_against_the_reference"):
    """A lab's speed test (lab 05's by default) on ``path`` (MULTI_LEVEL in float32, 3 rounds of
    4 calls and a warm-up round) through ``ex``'s worker: (the AssertionError it raised or None,
    the judge's timing, the notes)."""
    saved = {name: getattr(lab05, name) for name in
             ("SPEED_CASE", "SPEED_DTYPE", "SPEED_LIMIT", "check_reference_speed",
              "chip_function")}
    seen = {}

    def check(measured, **kwargs):
        seen["measured"] = measured
        seen["line"] = how_timed(measured)

    # Wall-clock times on two shared CPU cores wander too much for a ratio to the reference
    # (the judge's arithmetic is proved in tests/grading/test_timing.py): the speed verdict here
    # is the judge's time against the attacks' 20 ms sleep (below). The chips would run in
    # Triton's interpreter, half a second a call: left out.
    lab05.SPEED_CASE, lab05.SPEED_DTYPE, lab05.SPEED_LIMIT = MULTI_LEVEL, "float32", 1e9
    lab05.check_reference_speed = check
    lab05.chip_function = lambda lab, name: None
    ex.submission = path  # the worker reads the submission named in each request
    session = _Session(ex)
    sub = Submission.__new__(Submission)
    sub._session, sub.mode, sub.path, sub.job = session, "cpu", path, None
    try:
        getattr(lab05, test)(sub)
        error = None
    except AssertionError as exc:
        error = exc
    finally:
        for name, value in saved.items():
            setattr(lab05, name, value)
    return error, seen.get("measured"), [seen.get("line", "")], session.speed


BACKWARD = """
def msda_backward(value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights, grad_out, fp32_grad_accum=False, BLOCK_Q=16, num_warps=4):
    leaves = [t.detach().requires_grad_() for t in (value, sampling_locations, attention_weights)]
    out = _honest(leaves[0], spatial_shapes, level_start_index, leaves[1], leaves[2])
    return torch.autograd.grad(out, leaves, grad_out.reshape(out.shape))
"""

OPERATOR = """
def msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, *,
         fp32_grad_accum=None):
    return _honest(value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights)
"""


CHUNKED = """
def msda_forward_chunked(value, spatial_shapes, level_start_index, sampling_locations,
                         attention_weights, CHUNK_D=None, BLOCK_Q=32):
    return _honest(value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights)


def make_autotuned_forward(configs=None):
    return "a kernel the child built once"


def msda_forward_autotuned(value, spatial_shapes, level_start_index, sampling_locations,
                           attention_weights, kernel=None):
    assert kernel == "a kernel the child built once"
    return _honest(value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights)
"""


@pytest.fixture(scope="module")
def verdicts(lab05, tmp_path_factory):
    """Every speed trial of this file, through one grading worker: lab 05's speed test on the
    honest stand-in and on every attack, lab 08's on a backward stand-in, lab 10's judge-clock
    step on an operator stand-in, lab 06's two variants of a chunked stand-in."""
    folder = tmp_path_factory.mktemp("standins")
    honest = folder / "lab05.py"
    honest.write_text(_honest_source())
    base = _honest_source().split("\ndef msda_forward(")[0]
    (folder / "lab08.py").write_text(base + BACKWARD)
    (folder / "lab10.py").write_text(base + OPERATOR)
    with Executor(honest, default_timeout=60) as ex:
        found = {"honest": _grade(lab05, ex, honest)}
        for path in sorted(ATTACKS.glob("lab05_*.py")):
            found[path.stem.removeprefix("lab05_")] = _grade(lab05, ex, path)
        lab08 = load_file_module(ROOT / "lab-08-concurrent-writes" / "tests" /
                                 "test_lab08_atomics.py", "_speedjudge_test_lab08", beside=True)
        found["lab08"] = _grade(lab08, ex, folder / "lab08.py",
                                "test_backward_speed_against_the_reference")
        lab10 = load_file_module(ROOT / "lab-10-ship-it" / "tests" / "test_lab10_suite.py",
                                 "_speedjudge_test_lab10", beside=True)
        ex.submission = folder / "lab10.py"
        sub = Submission.__new__(Submission)
        sub._session, sub.mode, sub.path, sub.job = _Session(ex), "cpu", ex.submission, None
        baselines = {**lab10._step_baselines(), "chip": None}  # no interpreted chip here
        found["lab10"] = speedjudge.judge_msda_speed(
            sub, MULTI_LEVEL, "float32", fn="msda", call="autograd", truth=lab10._step_truth,
            close=lab10._step_close(MULTI_LEVEL, "float32"), baselines=baselines,
            verify=lab10.SPEED_VERIFIED)
        lab06 = load_file_module(ROOT / "lab-06-make-it-fast" / "tests" / "test_lab06_fast.py",
                                 "_speedjudge_test_lab06", beside=True)
        ex.submission = folder / "lab06.py"
        (folder / "lab06.py").write_text(base + CHUNKED)
        sub = Submission.__new__(Submission)
        sub._session, sub.mode, sub.path, sub.job = _Session(ex), "cpu", ex.submission, None
        found["lab06"] = lab06._on_the_judges_clock(sub, {"best_config": None}, {
            "autotuned": {"fn": "msda_forward_autotuned", "make": "make_autotuned_forward"},
            "fixed": {"fn": "msda_forward_chunked", "kwargs": {"CHUNK_D": 2}}},
            case=MULTI_LEVEL, with_chip=False)
    return found


def test_lab06_variants_alternate_in_one_child_on_the_judges_clock(verdicts):
    """Two variants of one module (one built by a factory the child calls once), every output
    of both checked; the in-process result keeps its other keys, and both time tables are the
    judge's."""
    res = verdicts["lab06"]
    assert res["best_config"] is None and res["method"] == "judge-clock"
    assert set(res["times_us"]) == {"autotuned", "fixed"} and res["e2e_us"] is res["times_us"]
    # two variants, four rounds (one warm-up), four calls, in each measurement
    assert res["verified"] == 2 * 4 * 4 * res["attempts"]


def test_lab08_backward_is_timed_and_checked_on_the_judges_clock(verdicts):
    error, measured, notes, _records = verdicts["lab08"]
    assert error is None, error
    assert set(measured["times_us"]) == {"yours", "reference", "reference_forward"}
    # two calls of each of the four rounds, picked, in each measurement
    assert measured["verified"] == 4 * 2 * measured["attempts"]
    assert "the judge's clock" in notes[0]


def test_lab10_step_is_timed_and_checked_on_the_judges_clock(verdicts):
    measured = verdicts["lab10"]
    assert set(measured["times_us"]) == {"yours", "reference"}
    assert measured["method"] == "judge-clock"
    # one call of each of the four rounds checked in full (a step's outputs are large)
    assert measured["verified"] == 4 * 1 * measured["attempts"]


def test_the_honest_submission_passes_with_its_outputs_checked(verdicts):
    error, measured, notes, records = verdicts["honest"]
    assert error is None, error
    # two outputs of every round of every measurement (a verdict whose interval holds its
    # threshold is measured again, at most twice more) checked in full
    assert measured["verified"] == 4 * 2 * measured["attempts"]
    assert 1 <= measured["attempts"] <= speedjudge.RETRIES + 1
    assert measured["times_us"]["yours"] < SLOW_US / 2
    (line,) = notes
    assert "the judge's clock" in line and \
        f"{measured['verified']} outputs checked in full" in line and "every checksum" in line
    assert set(measured["times_us"]) == {"yours", "reference"}
    # What the leaderboard reads, kept in the grade result.
    (record,) = records
    assert record["status"] == "timed" and record["primary"] == "yours"
    assert record["key"] == "msda_forward on multi_level in float32"
    assert record["times_us"] == measured["times_us"] and record["method"] == "judge-clock"
    # The student's overhead came from a clean child of the same worker, the baselines' from
    # the judge's server.
    assert measured["clean_child"] is True
    assert measured["overhead_us"] > 0 and measured["server_overhead_us"] > 0


EXPECTED = {
    # attack: the words of the verdict that stops it
    "patched_timers": "slow",
    "cache_by_pointer": "slow|not the one whose checksum|differ",
    "cache_by_content": "slow",
    "skip_repeats": "slow",
    "side_stream": "differ",
    "precomputed_views": "slow",
    "timed_pattern": "differ",
    "low_precision": "differ",
    "forged_protocol": "differ",
}


def test_the_suite_holds_every_attack_the_issue_lists():
    names = {p.stem.removeprefix("lab05_") for p in ATTACKS.glob("lab05_*.py")}
    assert names == set(EXPECTED)
    for path in ATTACKS.glob("lab05_*.py"):
        head = path.read_text().splitlines()[:3]
        assert head[0].startswith("# attack: ") and head[1] == "# lab: lab05"
        assert head[2] == "# targets: 5.8"


@pytest.mark.parametrize("attack", sorted(EXPECTED))
def test_every_attack_loses_the_speed_points(verdicts, attack):
    import re

    error, measured, _notes, records = verdicts[attack]
    assert records[0]["status"] == ("failed" if error else "timed")
    if error is None:  # its outputs were right: the judge's clock saw the slow work
        assert measured["times_us"]["yours"] > SLOW_US / 2, measured["times_us"]
        error = "slow"
    assert re.search(EXPECTED[attack], str(error)), str(error)[:400]


def test_patched_clocks_do_not_reach_the_judges(verdicts):
    """The child's clocks run a thousand times slow and its events say a microsecond: the judge
    still sees the 20 ms sleep of every call, on outputs that are all right."""
    error, measured, _notes, _records = verdicts["patched_timers"]
    assert error is None and measured["method"] == "judge-clock"
    assert measured["verified"] == 4 * 2 * measured["attempts"]
    assert measured["times_us"]["yours"] > SLOW_US / 2


# -- the protocol's own checks, without a child --------------------------------------------------
class _Line:
    """One end of the judge's line to a child, answering with what a test puts in it."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.sent = []

    def send_bytes(self, data):
        self.sent.append(data)

    def poll(self, timeout):
        return bool(self.answers)

    def recv_bytes(self):
        return self.answers.pop(0)


def _checker(spec):
    def close(out, expected, what):
        if not torch.allclose(out.double(), expected.double(), rtol=1e-5, atol=1e-5):
            raise AssertionError(f"{what}: differ")
    return speedjudge._Checker(spec, truth=lambda inputs: _torch_forward(*inputs), close=close,
                               verify=None)


def _torch_forward(value, shapes, starts, loc, attn):
    from msda_labs.truth.reference import msda_reference
    return msda_reference(value, shapes, loc, attn)


def _honest_round(spec, seed):
    import io
    import json

    sets, weights = speedjudge.speedtrial.draw_round(spec, seed, "cpu")
    flats = [_torch_forward(*s).reshape(-1).float() for s in sets]
    sums = [float(torch.dot(f, w)) for f, w in zip(flats, weights)]
    meta = [[[list(s), d] for s, d in zip(spec["out_shapes"], spec["out_dtypes"])]] * len(sets)
    buf = io.BytesIO()
    torch.save(flats, buf)
    return json.dumps({"sums": sums, "meta": meta}).encode(), buf.getvalue(), flats


def test_the_checks_accept_right_outputs_and_refuse_each_forgery():
    import io
    import json

    spec = speedjudge.forward_spec(MULTI_LEVEL, "float32", fn="msda_forward", n=3)
    seed = 12345
    reply, shown, flats = _honest_round(spec, seed)
    check = _checker(spec)
    check.check(_Line([shown]), check.reply(reply), seed, 5, "x", 1)
    assert check.checked == 3

    # Checksums that the shown outputs do not give: the work was not done when the clock stopped.
    forged = json.loads(reply)
    forged["sums"][1] += 1.0
    with pytest.raises(speedjudge.SpeedTrialFailed, match="checksum was sent"):
        check.check(_Line([shown]), forged, seed, 5, "x", 1)
    # Outputs of other inputs (stale, cached), checksummed honestly with this round's weights:
    # the checksums hold, the values do not.
    _, _, stale = _honest_round(spec, seed + 1)
    _, weights = speedjudge.speedtrial.draw_round(spec, seed, "cpu")
    stale_reply = json.loads(reply)
    stale_reply["sums"] = [float(torch.dot(f, w)) for f, w in zip(stale, weights)]
    buf = io.BytesIO()
    torch.save(stale, buf)
    with pytest.raises(AssertionError, match="differ"):
        check.check(_Line([buf.getvalue()]), stale_reply, seed, 5, "x", 1)
    # Outputs of another seed with that seed's checksums: caught by the checksums already.
    other_reply, other_shown, _ = _honest_round(spec, seed + 1)
    with pytest.raises(speedjudge.SpeedTrialFailed, match="checksum was sent"):
        check.check(_Line([other_shown]), check.reply(other_reply), seed, 5, "x", 1)
    # Too few checksums, a wrong shape, outputs that are not tensors.
    short = json.loads(reply)
    short["sums"] = short["sums"][:2]
    with pytest.raises(speedjudge.SpeedTrialFailed, match="2 checksums, not 3"):
        check.reply(json.dumps(short).encode())
    bad_meta = json.loads(reply)
    bad_meta["meta"][0] = [[[2, 5, 2, 4], "float32"]]
    with pytest.raises(speedjudge.SpeedTrialFailed, match="returned float32"):
        check.check(_Line([shown]), bad_meta, seed, 5, "x", 1)
    buf = io.BytesIO()
    torch.save({"not": "a list"}, buf)
    with pytest.raises(speedjudge.SpeedTrialFailed, match="not those of the timed calls"):
        check.check(_Line([buf.getvalue()]), check.reply(reply), seed, 5, "x", 1)
    with pytest.raises(speedjudge.SpeedTrialFailed, match="cannot be read"):
        check.check(_Line([b"\x80garbage"]), check.reply(reply), seed, 5, "x", 1)


def test_the_draw_is_fresh_per_call_and_the_same_for_the_same_seed():
    spec = speedjudge.forward_spec(MULTI_LEVEL, "float32", fn="msda_forward", n=3)
    a, wa = speedjudge.speedtrial.draw_round(spec, 7, "cpu")
    b, wb = speedjudge.speedtrial.draw_round(spec, 7, "cpu")
    c, _ = speedjudge.speedtrial.draw_round(spec, 8, "cpu")
    assert all(torch.equal(x, y) for s, t in zip(a, b) for x, y in zip(s, t))
    assert torch.equal(wa, wb)
    for i in range(3):  # every call its own value, locations and weights
        for j in range(i + 1, 3):
            assert not torch.equal(a[i][0], a[j][0]) and not torch.equal(a[i][3], a[j][3])
    assert not torch.equal(a[0][0], c[0][0])


def test_the_floor_flags_an_impossible_time(monkeypatch):
    """A time below what the bytes take at the measured bandwidth is flagged, not credited."""
    fake = types.SimpleNamespace(job=types.SimpleNamespace(timeout=5, speed_repeat=1))
    monkeypatch.setattr(speedjudge, "_student_rounds", lambda *a, **k: {"yours": [1e-9] * 3})
    monkeypatch.setattr(speedjudge, "device_bandwidth_gbs", lambda: 1000.0)
    spec = speedjudge.forward_spec(MULTI_LEVEL, "float32", fn="msda_forward", n=2)
    with pytest.raises(speedjudge.SpeedTrialFailed, match="flagged for review"):
        speedjudge.judge_speed(fake, spec, truth=None, close=None, baselines={}, rounds=3,
                               floor_bytes=(10 ** 9, 10 ** 9))


def test_a_location_gradient_may_differ_at_a_few_pixel_borders_only():
    ref = torch.linspace(-1, 1, 10_000, dtype=torch.float64)
    got = ref.clone().float()
    got[:5] += 1.0  # 0.05%: samples rounded to the other side of a border
    speedjudge.expect_close_but_borders(got, ref, what="grad_loc", dtype=torch.float32)
    got[:20] += 1.0  # 0.2%: more than a border explains
    with pytest.raises(AssertionError, match="20 of 10000 elements differ"):
        speedjudge.expect_close_but_borders(got, ref, what="grad_loc", dtype=torch.float32)
    got = ref.clone().float()
    got[0] = float("nan")
    with pytest.raises(AssertionError):
        speedjudge.expect_close_but_borders(got, ref, what="grad_loc", dtype=torch.float32)
    with pytest.raises(AssertionError):  # zeros are no border effect
        speedjudge.expect_close_but_borders(torch.zeros(10_000), ref, what="grad_loc",
                                            dtype=torch.float32)
