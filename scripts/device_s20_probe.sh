#!/usr/bin/env bash
# Issue 10, session 20's H200 probe (one device call, carry [".peer"]):
#     bash scripts/device_s20_probe.sh
set -u
export PYTHONPATH=$PWD/shared:$PWD/.peer
timeout 60 python scripts/issue10_s20_probe.py "$OUT/host" --parts host 2>&1 \
    | grep -v "Warning\|_warn_once" | head -60
timeout 170 python scripts/issue10_s20_probe.py "$OUT/tma" --parts tma --dtypes fp32,fp16 2>&1 \
    | grep -v "Warning\|_warn_once" | tail -25
timeout 200 python scripts/issue10_s20_probe.py "$OUT/evict" --parts check,evict --dtypes fp32,fp16 \
    2>&1 | grep -v "Warning\|_warn_once" | tail -14
