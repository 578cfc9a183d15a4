"""msda_labs.student.ptx: ahead-of-time compilation for SM 8.0 / 9.0 without a
GPU, and the lowering lab 09
is built on, asserted (not just printed) on a small scatter-add kernel and on the lab 08 backward.

The compiles run in one subprocess with TRITON_INTERPRET=0 (this process may have imported triton
for the interpreter); it prints a JSON report that the tests below read.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from msda_labs.student.ptx import AOTError, parse_cc

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = textwrap.dedent('''
    import json, os, re, sys
    os.environ["TRITON_INTERPRET"] = "0"
    import triton
    import triton.language as tl
    from msda_labs.student.ptx import AOTError, compile_ptx, kernel_params, ptx_target

    def atomics(ptx):
        return sorted(set(re.findall(r"\\b(?:atom|red)\\.[\\w.:]+", ptx)))

    @triton.jit
    def scatter_add_kernel(src_ptr, index_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        index = tl.load(index_ptr + offs, mask=mask, other=0)
        src = tl.load(src_ptr + offs, mask=mask, other=0.0)
        tl.atomic_add(out_ptr + index, src, mask=mask, sem="relaxed")

    @triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
    @triton.jit
    def tuned_copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)

    report = {"params": kernel_params(scatter_add_kernel), "scatter": {}, "backward": {}}
    for dt in ("fp32", "fp16", "bf16"):
        for cc in (80, 90):
            sig = {"src_ptr": "*" + dt, "index_ptr": "*i64", "out_ptr": "*" + dt, "n": "i32",
                   "BLOCK": "constexpr"}
            ptx = compile_ptx(scatter_add_kernel, sig, {"BLOCK": 128}, (cc // 10, cc % 10))
            report["scatter"][f"{dt}-{cc}"] = {"atomics": atomics(ptx), "target": ptx_target(ptx)}
    ptx = compile_ptx(tuned_copy_kernel, {"src_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                          "BLOCK": "constexpr"}, {"BLOCK": 64}, 90)
    report["autotuned_entry"] = bool(re.search(r"\\.entry\\s+tuned_copy_kernel", ptx))
    errors = {}
    for label, sig, consts in (
            ("missing", {"src_ptr": "*fp32"}, {"BLOCK": 64}),
            ("constexpr_typed", {"src_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                 "BLOCK": "i32"}, {"BLOCK": 64}),
            ("bad_type", {"src_ptr": "*float", "out_ptr": "*fp32", "n": "i32",
                          "BLOCK": "constexpr"}, {"BLOCK": 64}),
            ("unknown_arg", {"src_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                             "BLOCK": "constexpr", "m": "i32"}, {"BLOCK": 64})):
        try:
            compile_ptx(tuned_copy_kernel, sig, consts, 80)
            errors[label] = None
        except AOTError as exc:
            errors[label] = str(exc)
    report["errors"] = errors
    try:
        from msda_labs.chips import lab09
        from msda_labs.student.earlier import load
        kernel = load(8, "msda_backward_kernel").obj
    except ImportError as exc:
        report["backward"] = {"skipped": str(exc)}
    else:
        for cc, buf in ((80, "bf16"), (90, "bf16"), (80, "fp32"), (90, "fp32"), (80, "fp16")):
            value = "fp16" if buf == "fp16" else "bf16"
            ptx = lab09.compile_backward(kernel, value, buf, cc)
            report["backward"][f"{buf}-{cc}"] = {"atomics": atomics(ptx),
                                                 "target": ptx_target(ptx)}
    print("REPORT " + json.dumps(report))
''')


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    script = tmp_path_factory.mktemp("aot") / "aot_report.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "TRITON_INTERPRET": "0", "MSDA_STAGE": "chips"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600, env=env, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, f"AOT report failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("REPORT "):])


_SUFFIX = {"fp32": ("f32",), "fp16": ("f16", "f16x2"), "bf16": ("bf16", "bf16x2")}


def _is_cas(token: str) -> bool:
    return "cas" in token.split(".")


def _native_adds(tokens: list[str], dtype: str) -> list[str]:
    return [t for t in tokens if "add" in t.split(".") and t.split(".")[-1] in _SUFFIX[dtype]]


def test_parse_cc_spellings():
    for spelling in (80, (8, 0), [8, 0], "8.0", "sm_80", "80", "sm80"):
        assert parse_cc(spelling) == 80
    assert parse_cc("sm_90a") == 90
    for bad in ("ampere", True, (8,), None):
        with pytest.raises(AOTError):
            parse_cc(bad)


def test_kernel_params_lists_constexprs(report):
    assert report["params"] == [["src_ptr", False], ["index_ptr", False], ["out_ptr", False],
                                ["n", False], ["BLOCK", True]]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("cc", [80, 90])
def test_scatter_add_lowering(report, dtype, cc):
    entry = report["scatter"][f"{dtype}-{cc}"]
    assert entry["target"] in (f"sm_{cc}", f"sm_{cc}a"), entry
    tokens = entry["atomics"]
    assert tokens, f"no atomic at all in the {dtype} scatter-add for sm_{cc}"
    if dtype == "bf16" and cc == 80:
        assert any(_is_cas(t) for t in tokens), f"bf16 at sm_80 should be a CAS loop: {tokens}"
    else:
        assert not any(_is_cas(t) for t in tokens), f"{dtype} at sm_{cc}: {tokens}"
        assert _native_adds(tokens, dtype), f"{dtype} at sm_{cc}: no native add in {tokens}"


def test_autotuned_kernel_is_unwrapped(report):
    assert report["autotuned_entry"]


@pytest.mark.parametrize("label,phrase", [
    ("missing", "gives no type for"),
    ("constexpr_typed", "must be 'constexpr'"),
    ("bad_type", "is not a triton type"),
    ("unknown_arg", "has no argument"),
])
def test_malformed_signatures_are_refused_by_name(report, label, phrase):
    message = report["errors"][label]
    assert message is not None and phrase in message, message


@pytest.mark.parametrize("key", ["bf16-80", "bf16-90", "fp32-80", "fp32-90", "fp16-80"])
def test_backward_kernel_lowering(report, key):
    if "skipped" in report["backward"]:
        pytest.skip(report["backward"]["skipped"])
    buf, cc = key.split("-")
    tokens = report["backward"][key]["atomics"]
    assert tokens, f"the lab 08 backward compiled for sm_{cc} holds no atomic"
    if buf == "bf16" and cc == "80":
        assert any(_is_cas(t) for t in tokens), tokens
    else:
        assert not any(_is_cas(t) for t in tokens) and _native_adds(tokens, buf), tokens


def test_interpreter_mode_is_refused(tmp_path):
    script = tmp_path / "interp.py"
    script.write_text(textwrap.dedent('''
        import os
        os.environ["TRITON_INTERPRET"] = "1"
        import triton
        import triton.language as tl
        from msda_labs.student.ptx import AOTError, compile_ptx

        @triton.jit
        def k(x_ptr, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)

        try:
            compile_ptx(k, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 16}, 80)
        except AOTError as exc:
            print("REFUSED", exc)
    '''))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert "REFUSED" in proc.stdout and "TRITON_INTERPRET" in proc.stdout, proc.stdout + \
        proc.stderr


@pytest.mark.parametrize("name,expected", [
    ("scatter_add_bf16_sm80.ptx", ["atom.relaxed.gpu.global.cas.b32"]),
    ("counted_scatter_sm90.ptx", ["atom.global.gpu.acq_rel.add.f32",
                                  "red.global.gpu.relaxed.add.noftz.f16"]),
])
def test_lab09_ptx_fixtures_hold_what_the_tests_expect(name, expected):
    text = (ROOT / "lab-09-hardware-detective" / "tests" / "ptx" / name).read_text()
    assert sorted(set(re.findall(r"\b(?:atom|red)\.[\w.:]+", text))) == expected
    assert text.count(expected[0]) >= 2  # the fixtures repeat their atomics (deduplication)
