#!/usr/bin/env bash
# Issue 10's next H200 call (written in session 19, whose device time ran out): time the
# split-tile kernels against the shipped ones, then finish lab 06's proof (slow and wrong copies).
# Run from the repository root with the peer rebuilt into .peer/ (git-ignored; see
# docs/results/h200-msda-operator.md), and carry [".peer"] in the device call:
#     bash scripts/device_next_issue10.sh
set -u
export PYTHONPATH=$PWD/shared:$PWD/.peer
# 1. split-tile forward and backward vs the shipped kernels, both presets, fp32 and fp16 (~150 s)
timeout 240 python scripts/issue10_s19_probe.py "$OUT/split" --parts split --dtypes fp32,fp16 \
    2>&1 | grep -v "Warning\|_warn_once" | tail -12
# 2. lab 06's slow and wrong copies, separated where the grader runs as root (~250 s)
if [ "$(id -u)" = 0 ]; then export MSDA_SEPARATE=1; fi
timeout 300 python -m msda_labs.gpu.prove --out "$OUT/prove-lab06" --labs lab06 \
    --variants slow wrong --compact > "$OUT/prove-lab06.txt" 2>&1
tail -6 "$OUT/prove-lab06.txt"
