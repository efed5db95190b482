#!/usr/bin/env bash
# issue 16 one-shot: outlier diagnosis (lazy / eager module loading), old vs new collector on the same problems
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
log() { echo "== $* ($(date +%T))"; }
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
log "outliers, default module loading"
timeout 45 python3 -m kbench.collect.validate_timing outliers --cases .gpu/cases.json --corpus .gpu/cases_corpus.csv --out $OUT/outliers_lazy.json 2>&1 | tail -25
log "collector before issue 16"
timeout 55 python3 .gpu/collect_v1.py .gpu/cases_corpus.csv /tmp/raw_old 36 2>&1 | tail -3
tar czf $OUT/raw_old.tgz -C /tmp/raw_old . 2>/dev/null
log "collector after"
timeout 60 python3 -m kbench.collect cudnn --problems .gpu/cases_corpus.csv --out /tmp/raw_new --time-budget 36 2>&1 | tail -4
tar czf $OUT/raw_new.tgz -C /tmp/raw_new . 2>/dev/null
log "verify-on-gpu, hybrid-rf, h100 random test (plan order, time budget)"
timeout 50 python3 .gpu/verify_on_gpu.py --out .gpu/verify_hybrid --time-only --time-budget 30 2>&1 | tail -3
cp .gpu/verify_hybrid/raw.jsonl $OUT/verify_hybrid_raw.jsonl 2>/dev/null
log "outliers, CUDA_MODULE_LOADING=EAGER"
CUDA_MODULE_LOADING=EAGER timeout 35 python3 -m kbench.collect.validate_timing outliers --cases .gpu/cases.json --corpus .gpu/cases_corpus.csv --out $OUT/outliers_eager.json 2>&1 | tail -25
log end
} 2>&1 | tee $OUT/log.txt
