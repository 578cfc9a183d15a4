#!/usr/bin/env bash
# Issue 10, session 20's last H200 call (carry [".peer"]): the decoder step's host time for the
# kit, the kit with session 19's host integer helpers and the peer; the GPU tests of the shipped
# operator; lab 10's chip through the GPU stage, separated where the grader runs as root.
set -u
export PYTHONPATH=$PWD/shared:$PWD/.peer
timeout 110 python scripts/issue10_s20_probe.py "$OUT/host" --parts host 2>&1 \
    | grep -v "Warning\|_warn_once" | tail -4
timeout 120 python -m pytest -q -p no:cacheprovider tests/gpu/test_msda_no_sync.py \
    tests/gpu/test_shipped_launch.py > "$OUT/gpu-tests.txt" 2>&1
tail -3 "$OUT/gpu-tests.txt"
if [ "$(id -u)" = 0 ]; then export MSDA_SEPARATE=1; fi
export PYTHONPATH=$PWD/shared
timeout 180 python -m msda_labs.gpu.prove --out "$OUT/prove-lab10" --labs lab10 --variants chip \
    --compact > "$OUT/prove-lab10.txt" 2>&1
tail -4 "$OUT/prove-lab10.txt"
