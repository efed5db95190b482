#!/usr/bin/env bash
# `kbench model check` over models in one device call (repository root as working directory):
#
#   BUDGET=400 bash tools/device/model_check.sh [MODEL...]
#
# Per MODEL (the names and inputs of tools/device/model_gpu.sh), while time is left: trace it, fill a
# cache on this GPU from the selector (`model tune --selector S --live`, no timing), and check every
# convolution layer through it against PyTorch and float64; then check each cache MODELS/MODEL.oracle.json
# and MODEL.selector.json (MODELS default raw/models; a thinned tree carries copies in .gpu/) made on this
# GPU model (its header's gpu), so that a committed cache is checked where it can run.
# A model starts only with at least NEED seconds left (default 60).
#
# Brings back $OUT/checks.tgz (MODEL.<cache>.check.json per check, and the selector caches it filled)
# and $OUT/model_check.log: unpack it into raw/models/ (`tar xzf checks.tgz -C raw/models`). Carry .whl
# (the wheels of tools/device/model_gpu.sh).
set -u
OUT=${OUT:-/tmp/out}
BUDGET=${BUDGET:-400}
NEED=${NEED:-60}
MODELS=${MODELS:-raw/models}
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
. tools/device/model_specs.sh
mkdir -p $OUT/checks
LOG=$OUT/model_check.log
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $GPU" | tee -a $LOG
for M in ${*:-r3d_18}; do
  model_spec $M
  L=$(left); [ $L -lt $NEED ] && { echo "no time left for $M ($L s)" | tee -a $LOG; break; }
  echo "== $M at $(( $(date +%s) - T0 )) s, $L s left" | tee -a $LOG
  timeout 90 python3 -m kbench.cli model trace $SPEC --input-shape $SHAPE --autocast bf16 \
      --memory-format $FMT --out /tmp/trace_$M 2>&1 | tail -1 | tee -a $LOG
  timeout 150 python3 -m kbench.cli model tune /tmp/trace_$M --selector $SEL --live -q \
      --out $OUT/checks/$M.here-selector.json 2>&1 | tail -1 | tee -a $LOG
  CACHES=$OUT/checks/$M.here-selector.json
  for C in $MODELS/$M.oracle.json $MODELS/$M.selector.json; do
    [ -f $C ] && python3 -c "import json,sys; sys.exit(json.load(open('$C'))['header']['gpu'] != '$GPU')" \
      && CACHES="$CACHES $C"
  done
  for C in $CACHES; do
    [ -f $C ] || continue
    L=$(left); [ $L -lt 20 ] && break
    NAME=$(basename $C .json); NAME=${NAME#$M.}
    timeout $(( L - 10 )) python3 -m kbench.cli model check $SPEC --input-shape $SHAPE --autocast bf16 \
        --memory-format $FMT --cache $C -q --out $OUT/checks/$M.$NAME.check.json 2>&1 | tail -2 | tee -a $LOG
    echo "check $M $NAME rc=${PIPESTATUS[0]}" | tee -a $LOG
  done
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $LOG
tar czf $OUT/checks.tgz -C $OUT/checks . && rm -r $OUT/checks
ls -la $OUT
