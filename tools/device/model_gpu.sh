#!/usr/bin/env bash
# The model tool's GPU parts in one device call (repository root as working directory):
#
#   BUDGET=560 bash tools/device/model_gpu.sh [MODEL...]
#
# 1. the `-m gpu` tests of tests/model (use_plans against PyTorch, CUDA-graph capture, torch.compile,
#    tune --time and tune --live filling caches that run with no fallback), unless SKIP_TESTS=1;
# 2. bench/bench_use_plans_overhead.py (host time per call of the injected path, behind a spin kernel),
#    unless SKIP_OVERHEAD=1;
# 3. per MODEL, in order, while time is left (default r3d_18): trace; `model tune --time` (the oracle
#    cache); `model tune --selector S --live` (the zero-shot cache: S is h200-3d-pytorch for a 3D
#    model, h200-pytorch for a 2D one); `model bench` with both caches (default, autotune,
#    cache:oracle, cache:selector; train and inference).
#
# MODEL is r3d_18, r2plus1d_18, mc3_18 (16x3x16x112x112, channels_last_3d), unet3d (the 3D U-Net of
# tools/collect/networks_3d.py, 2x1x96x96x96, channels_last_3d) or a 2D torchvision name such as
# resnet50 or convnext_tiny (128x3x224x224, channels_last); all under autocast BF16. A model starts
# only with at least NEED seconds of the budget left (default 200), and each step's timeout is a share
# of what is left, so the call ends inside BUDGET with every finished record written.
#
# Everything lands in $OUT: gpu_tests.txt, use_plans_overhead.json, model_gpu.log and models.tgz with, per
# model, NAME.problems.csv, NAME.oracle.json, NAME.selector.json and NAME.json (the bench record):
# unpack models.tgz into raw/models/ (`tar xzf models.tgz -C raw/models`) and copy
# use_plans_overhead.json to bench/results/. Carry .whl (the wheels for Python 3.12 of the cuDNN
# frontend, pydantic and its parts, and safetensors, which reads a selector).
set -u
OUT=${OUT:-/tmp/out}
BUDGET=${BUDGET:-560}
NEED=${NEED:-200}
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
. tools/device/model_specs.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p $OUT/models
LOG=$OUT/model_gpu.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee -a $LOG
python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())" | tee -a $LOG

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/model -rs > $OUT/gpu_tests.txt 2>&1
  echo "gpu tests rc=$? at $(( $(date +%s) - T0 )) s" | tee -a $LOG; tail -15 $OUT/gpu_tests.txt
fi
if [ "${SKIP_OVERHEAD:-0}" != 1 ]; then
  timeout 120 python3 bench/bench_use_plans_overhead.py --out $OUT/use_plans_overhead.json > $OUT/overhead.txt 2>&1
  echo "overhead rc=$? at $(( $(date +%s) - T0 )) s" | tee -a $LOG; tail -40 $OUT/overhead.txt
fi

MODELS=${*:-r3d_18}
for M in $MODELS; do
  model_spec $M
  L=$(left); [ $L -lt $NEED ] && { echo "no time left for $M ($L s)" | tee -a $LOG; break; }
  echo "== $M ($SPEC, $SHAPE, $FMT) at $(( $(date +%s) - T0 )) s, $L s left" | tee -a $LOG
  timeout 90 python3 -m kbench.cli model trace $SPEC --input-shape $SHAPE --autocast bf16 \
      --memory-format $FMT --out /tmp/trace_$M 2>&1 | tail -2 | tee -a $LOG
  [ -f /tmp/trace_$M/problems.csv ] || { echo "trace of $M failed" | tee -a $LOG; continue; }
  cp /tmp/trace_$M/problems.csv $OUT/models/$M.problems.csv
  L=$(left); TB=$(( L / 3 )); [ $TB -gt 200 ] && TB=200
  timeout $(( TB + 60 )) python3 -m kbench.cli model tune /tmp/trace_$M --time --time-budget $TB \
      --out $OUT/models/$M.oracle.json 2>&1 | tail -3 | tee -a $LOG
  L=$(left); TL=$(( L / 4 )); [ $TL -gt 150 ] && TL=150
  timeout $TL python3 -m kbench.cli model tune /tmp/trace_$M --selector $SEL --live -q \
      --out $OUT/models/$M.selector.json 2>&1 | tail -3 | tee -a $LOG
  CACHES=""
  for C in oracle selector; do [ -f $OUT/models/$M.$C.json ] && CACHES="$CACHES --cache $OUT/models/$M.$C.json"; done
  L=$(left)
  timeout $(( L - 15 )) python3 -m kbench.cli model bench $SPEC --input-shape $SHAPE --autocast bf16 \
      --memory-format $FMT $CACHES --out $OUT/models/$M.json 2>&1 | tail -12 | tee -a $LOG
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $LOG
# The device tool returns at most 8 files: four per model would lose the second model's caches, so
# models/ comes back as one archive (unpack it into raw/models/).
tar czf $OUT/models.tgz -C $OUT/models . && rm -r $OUT/models
ls -la $OUT
