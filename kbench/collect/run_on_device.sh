#!/usr/bin/env bash
# Run the cuDNN collector on the lent GPU machine (repository root as working directory).
#
#   bash kbench/collect/run_on_device.sh probe   PROBLEMS BUDGET_S   # API check, timing validation, short collection
#   bash kbench/collect/run_on_device.sh collect PROBLEMS BUDGET_S [MARGIN_S]   # collection only
#   bash kbench/collect/run_on_device.sh live    PROBLEMS BUDGET_S [MARGIN_S]   # live GPU tests, then collection
#   bash kbench/collect/run_on_device.sh verify  RUN_DIR  BUDGET_S [MARGIN_S]   # re-time RUN_DIR/plan.json's plans
#
# verify: RUN_DIR holds plan.json from 'kbench verify-on-gpu PREDS --out RUN_DIR --plan-only' (and
# raw.jsonl of an earlier, cut-short run, which is resumed). Brings back $OUT/RUN_NAME/{plan.json,
# raw.jsonl,verification.json}; score again on the CPU with 'kbench verify-on-gpu --out DIR --score-only'.
#
# Installs the carried wheels (.whl/) into /tmp/site, runs the collector into
# /tmp/raw (re-starting it after a fatal CUDA error while time is left: it
# resumes), then packs the raw folder into $OUT/raw.tgz. Never touches clocks.
set -u
MODE=${1:-collect}
PROBLEMS=${2:-raw/h100/corpus.csv.gz}
BUDGET=${3:-480}
MARGIN=${4:-100}  # the collector starts no problem later than this before the budget ends
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
RAW=/tmp/raw
mkdir -p $RAW
# resume from the raw batches already collected (carried in raw/h100), if any
if [ -d raw/h100 ]; then cp -r raw/h100/. $RAW/ 2>/dev/null; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv

if [ "$MODE" = probe ]; then
  timeout 90 python3 -m kbench.collect.probe_api 2>&1 | tee $OUT/probe_api.txt
  timeout 90 python3 -m kbench.collect.validate_timing measure --out $OUT/measure.json 2>&1 | tail -20
  timeout 150 ncu --csv --metrics gpu__time_duration.sum --clock-control none --cache-control none \
      --profile-from-start off python3 -c "
import json; from kbench.collect import validate_timing as V, cudnn as C
col = C.CudnnCollector(C.Options(notes=False, torch_choice=False))
json.dump(V.ncu_target(col), open('$OUT/ncu_order.json', 'w'))" > $OUT/ncu.csv 2> $OUT/ncu.err
  echo "ncu rc=$? lines=$(wc -l < $OUT/ncu.csv)"; tail -3 $OUT/ncu.err
  timeout 60 python3 -m kbench.collect.validate_timing scaling --out $OUT/scaling.json 2>&1 | tail -12
fi

if [ "$MODE" = verify ]; then
  RUN_DIR=$PROBLEMS
  [ -f "$RUN_DIR/plan.json" ] || { echo "verify: $RUN_DIR/plan.json not found"; exit 2; }
  VOUT=$OUT/$(basename "$RUN_DIR")
  mkdir -p "$VOUT"
  cp "$RUN_DIR"/plan.json "$VOUT"/
  [ -f "$RUN_DIR/raw.jsonl" ] && cp "$RUN_DIR"/raw.jsonl "$VOUT"/
  while :; do
    LEFT=$(( BUDGET - ($(date +%s) - T0) ))
    [ $LEFT -lt 30 ] && break
    # raw.jsonl is written into $OUT as it goes: a run stopped by the limit still brings its rows back
    timeout -k 15 $((LEFT - 10)) python3 -m kbench.collect.verify_on_gpu --out "$VOUT" --time-only \
        --time-budget $((LEFT - MARGIN)) 2>&1 | tee -a $OUT/verify.log | tail -5
    rc=${PIPESTATUS[0]}
    echo "verify rc=$rc"
    [ "$rc" = 3 ] || break   # 3: fatal CUDA error -> restart and resume
  done
  python3 -m kbench.collect.verify_on_gpu --out "$VOUT" --score-only 2>&1 | tail -3
  ls -la "$VOUT"
  exit 0
fi

if [ "$MODE" = live ]; then
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/collect/test_live_gpu.py 2>&1 | tail -5
fi

while :; do
  LEFT=$(( BUDGET - ($(date +%s) - T0) ))
  [ $LEFT -lt 60 ] && break
  timeout -k 15 $((LEFT - 10)) python3 -m kbench.collect cudnn --problems "$PROBLEMS" --out $RAW \
      --time-budget $((LEFT - MARGIN)) 2>&1 | tee -a $OUT/collect.log | tail -25
  rc=${PIPESTATUS[0]}
  echo "collector rc=$rc"
  [ "$rc" = 3 ] || break   # 3: fatal CUDA error -> restart and resume
done
python3 -m kbench.collect compact $RAW
tar czf $OUT/raw.tgz -C $RAW .
ls -la $OUT
