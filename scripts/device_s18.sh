#!/usr/bin/env bash
# Session 18's one H200 call: the GPU stages under separation (as root there), the lab 10 exam's
# "your kernels ran" check against a plain-torch operator, and the GPU tests of the shipped operator.
set -u
export PYTHONPATH=$PWD/shared
id | tee "$OUT/id.txt"
nvidia-smi -L | tee -a "$OUT/id.txt"
if [ "$(id -u)" = 0 ]; then export MSDA_SEPARATE=1; else export MSDA_SEPARATE=0; fi
echo "MSDA_SEPARATE=$MSDA_SEPARATE" | tee -a "$OUT/id.txt"
# 1. A plain-torch operator in lab 10's file (the chip with msda replaced): the exam must give 0.
mkdir -p /tmp/standin && cp shared/msda_labs/chips/lab10.py /tmp/standin/lab10.py
cat scripts/lab10_torch_operator.py >> /tmp/standin/lab10.py
timeout 200 python -m msda_labs grade lab10 --stage gpu --submission /tmp/standin/lab10.py \
    --json "$OUT/standin-gpu.json" > "$OUT/standin-gpu.txt" 2>&1
tail -15 "$OUT/standin-gpu.txt"
# 2. GPU tests of the operator and the self-check
timeout 150 python -m pytest -q -p no:cacheprovider tests/gpu/test_msda_no_sync.py \
    tests/gpu/test_shipped_launch.py > "$OUT/gpu-tests.txt" 2>&1
tail -5 "$OUT/gpu-tests.txt"
# 3. prove: chips full, wrong and slow copies lose points, separated
timeout 420 python -m msda_labs.gpu.prove --out "$OUT/prove" --labs lab10 lab05 lab08 lab06 \
    --compact > "$OUT/prove.txt" 2>&1
tail -40 "$OUT/prove.txt"
