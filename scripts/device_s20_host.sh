export PYTHONPATH=$PWD/shared:$PWD/.peer
timeout 200 python scripts/issue10_s20_probe.py "$OUT/host" --parts host2 2>&1 | grep -v "Warning\|_warn_once" | cut -c1-150 | head -150
