"""A typo inside a ``@triton.jit`` helper, run by Triton's interpreter, is reported as the error
it is, with the line of the student's file: in the grader's verdict (the zygote's failure
payload) and in ``python labNN.py`` (msda_labs.student.check)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from kit import ROOT

MODULE = textwrap.dedent('''\
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def helper(x):
        y = x * 2
        return yy + 1


    @triton.jit
    def kernel(out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, helper(offs.to(tl.float32)))


    def run():
        out = torch.zeros(4)
        kernel[(1,)](out, BLOCK=4)
        return out
    ''')

PROBE = textwrap.dedent('''\
    import importlib.util, json, sys
    from msda_labs.grading.isolation.zygote import _failure_payload
    from msda_labs.student import check
    path = sys.argv[1]
    spec = importlib.util.spec_from_file_location("student", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.run()
    except Exception as exc:
        print(json.dumps({"payload": _failure_payload(exc, path),
                          "where": check._where(exc), "describe": check.describe(exc)}))
    ''')


def test_interpreter_error_in_a_helper_names_the_line(tmp_path):
    module = tmp_path / "lab99.py"
    module.write_text(MODULE)
    line = MODULE.splitlines().index("    return yy + 1") + 1
    proc = subprocess.run([sys.executable, "-c", PROBE, str(module)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    function = MODULE.splitlines()[:line][::-1]
    function = next(x for x in function if x.lstrip().startswith("def ")).split("def ")[1]
    assert found["payload"] == {
        "kind": "error", "type": "NameError",
        "message": f"NameError: name 'yy' is not defined (line {line} of lab99.py)",
        # the same, as evidence: the line and the function of the student's file
        "line": line, "function": function.split("(")[0],
        "error": "NameError: name 'yy' is not defined"}
    assert found["where"] == f" (at lab99.py:{line})"
    assert found["describe"] == "NameError: name 'yy' is not defined"
