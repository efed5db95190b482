#!/usr/bin/env bash
# The model tool's GPU parts in one device call (repository root as working directory):
#
#   BUDGET=420 bash tools/device/model_gpu.sh [MODEL...]
#
# 1. the `-m gpu` tests of tests/model (use_plans against PyTorch, CUDA-graph capture,
#    torch.compile, tune --time filling a cache that runs with no fallback);
# 2. bench/bench_use_plans_overhead.py (host time per call of the injected path);
# 3. per MODEL (default r3d_18): trace, `model tune --time` (the oracle cache), `model bench`
#    (default, autotune, cache:oracle; train and inference);
# 4. a short `kbench collect autotune` run over the first traced model's problems.
# Everything lands in $OUT: gpu_tests.txt, use_plans_overhead.json, MODEL.oracle.json,
# MODEL.bench.json, autotune/ and model_gpu.log. Carry .whl (the cuDNN frontend and pydantic).
set -u
OUT=${OUT:-/tmp/out}
BUDGET=${BUDGET:-420}
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LOG=$OUT/model_gpu.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee -a $LOG
python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())" | tee -a $LOG

timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/model -x -rs > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" | tee -a $LOG; tail -15 $OUT/gpu_tests.txt

timeout 60 python3 bench/bench_use_plans_overhead.py --out $OUT/use_plans_overhead.json > $OUT/overhead.txt 2>&1
echo "overhead rc=$?" | tee -a $LOG; tail -30 $OUT/overhead.txt

MODELS=${*:-r3d_18}
for M in $MODELS; do
  case $M in
    r3d_18|r2plus1d_18|mc3_18) SHAPE=16,3,16,112,112; FMT=channels_last_3d ;;
    *) SHAPE=128,3,224,224; FMT=channels_last ;;
  esac
  L=$(left); [ $L -lt 120 ] && { echo "no time left for $M" | tee -a $LOG; break; }
  python3 -m kbench.cli model trace torchvision:$M --input-shape $SHAPE --autocast bf16 \
      --memory-format $FMT --out /tmp/trace_$M 2>&1 | tail -2 | tee -a $LOG
  cp /tmp/trace_$M/problems.csv $OUT/$M.problems.csv
  timeout $(( L / 2 )) python3 -m kbench.cli model tune /tmp/trace_$M --time --time-budget $(( L / 2 - 30 )) \
      --out $OUT/$M.oracle.json 2>&1 | tail -8 | tee -a $LOG
  L=$(left)
  timeout $(( L - 60 )) python3 -m kbench.cli model bench torchvision:$M --input-shape $SHAPE --autocast bf16 \
      --memory-format $FMT --cache $OUT/$M.oracle.json --out $OUT/$M.bench.json 2>&1 | tail -20 | tee -a $LOG
done

FIRST=$(echo $MODELS | cut -d' ' -f1)
L=$(left)
[ $L -gt 40 ] && timeout $(( L - 10 )) python3 -m kbench.cli collect autotune --problems /tmp/trace_$FIRST/problems.csv \
    --out $OUT/autotune --time-budget $(( L - 30 )) 2>&1 | tail -8 | tee -a $LOG
ls -la $OUT
