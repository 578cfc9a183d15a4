#!/usr/bin/env bash
# Issue 10, session 20: the shipped kernels with capped register counts (one device call,
# carry [".peer"] not needed):  bash scripts/device_s20_nreg.sh
set -u
export PYTHONPATH=$PWD/shared
timeout 280 python scripts/issue10_s20_probe.py "$OUT/nreg" --parts nreg --dtypes fp32,fp16 2>&1 \
    | grep -v "Warning\|_warn_once" | tail -20
