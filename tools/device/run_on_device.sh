#!/usr/bin/env bash
# Run the cuDNN collector on the lent GPU machine (repository root as working directory).
#
#   bash tools/device/run_on_device.sh probe    PROBLEMS BUDGET_S             # API check, timing validation, short collection
#   bash tools/device/run_on_device.sh collect  PROBLEMS BUDGET_S [MARGIN_S]  # collection only, one GPU
#   bash tools/device/run_on_device.sh live     PROBLEMS BUDGET_S [MARGIN_S]  # live GPU tests, then collection
#   bash tools/device/run_on_device.sh torchrun PROBLEMS BUDGET_S [MARGIN_S]  # every GPU of the host, one shard each
#   bash tools/device/run_on_device.sh scaling  PROBLEMS BUDGET_S [MARGIN_S]  # 1 GPU, then all GPUs, then GPU 0 vs 1
#   bash tools/device/run_on_device.sh ladder   PROBLEMS BUDGET_S [MARGIN_S]  # 1, 2, 4.. GPUs in turn, then every GPU vs every other
#   bash tools/device/run_on_device.sh verify   RUN_DIR[,RUN_DIR..] BUDGET_S [MARGIN_S]  # re-time plan.json's plans, a GPU each
#   bash tools/device/run_on_device.sh labels   RUN_DIR  BUDGET_S [MARGIN_S]  # verification pass on shipped labels
#   bash tools/device/run_on_device.sh shards2  PROBLEMS BUDGET_S [MARGIN_S]  # two-shard test fixture, GPU 0
#   bash tools/device/run_on_device.sh kcache   PROBLEMS BUDGET_S [MARGIN_S]  # kernel cache off vs on, GPU 0
#   bash tools/device/run_on_device.sh autotune PROBLEMS[,PROBLEMS..] BUDGET_S [MARGIN_S]  # PyTorch's autotune, a shard per GPU
#
# verify: RUN_DIR holds plan.json from 'kbench verify-on-gpu PREDS --out RUN_DIR --plan-only' (and
# raw.jsonl or raw.jsonl.gz of an earlier, cut-short run, which is resumed; raw_autotune.jsonl[.gz] too,
# the autotune pass of a plan with live references). Brings back
# $OUT/RUN_NAME/{raw.jsonl.gz,raw_autotune.jsonl.gz,verification.json}; score again on the CPU with
# 'kbench verify-on-gpu --out DIR --score-only'.
#
# autotune: 'kbench collect autotune' over each PROBLEMS file (a dataset's raw/<dataset>/autotune/problems.csv.gz,
# from 'kbench collect autotune-problems'), one process per GPU (--shard g/NGPU), into /tmp/autotune/<dataset>/,
# seeded with the records and env.jsonl of the folder holding PROBLEMS (they count as done: a call resumes
# where the last stopped). Every SNAPSHOT_S seconds (default 60), and at the end, each shard's records
# are copied gzipped into $OUT/autotune/<dataset>/autotune-STAMP-K-of-N.jsonl.gz (STAMP: the call's start,
# so that no call's file replaces another's) with the folder's env.jsonl: a call stopped at the machine's
# limit brings back all but its last minute. Copy them into raw/<dataset>/autotune/ (the env.jsonl
# replaces the one carried: it holds it and the new runs' starts). AT_ARGS is appended to the probe's
# command line, e.g. AT_ARGS=--retry-failed.
#
# BASE (default raw/h100) is the raw folder of the dataset being grown: it is copied into the
# output root first, so its problem-directions count as done and the corpus order continues.
# For a new dataset point it at its own folder (BASE=raw/h200): never mix GPUs in one root.
# A travelling copy ('kbench collect travel-copy raw/h200 .gpu/h200_raw') is enough for torchrun mode.
# LIMIT (torchrun mode) splits only the next LIMIT pending problem-directions across the GPUs, so a
# run sized to its budget finishes its shards and merge finds no gaps.
# RANKS_PER_GPU (torchrun mode, default 1) starts that many ranks per GPU: they take turns at their
# GPU, one building plans while another times (kbench.collect.measure.gpu_turn). RAW (default /tmp/raw) is
# the output root of the collecting modes, so that one call can run two of them; give each its own OUT
# as well (OUT=$OUT/slice ... ; OUT=$OUT/repeats ...): their archives have the same names, and the second
# would replace the first's. COLLECT_ARGS ('collect' and 'torchrun' modes) is appended to the collector's
# command line, e.g. COLLECT_ARGS="--problem-time-cap 600" to re-measure a problem the 25 s cap cut short.
#
# ladder: the scaling table of a multi-GPU host. One collection launch per step of LADDER (default the
# powers of two up to the host's GPUs, and the host's count), each STEP_S seconds on that many GPUs
# (CUDA_VISIBLE_DEVICES 0..G-1, PCI order) with RANKS_PER_GPU ranks each and CORES_PER_GPU host cores
# each (taskset; default the host's cores over its GPUs, the share a lent machine of G GPUs has), all
# into one root seeded from BASE: each step's shard folders (another shard count) count as done for
# the next, so the steps take consecutive corpus slices and all of it is mergeable collection. Then
# AGREE_S seconds in which every GPU times the corpus's first N_AGREE problem-directions (no base,
# one rank each, its own cores), AGREE_ROUNDS times (default 1, 0 for none; 'scaling agreement-rounds' compares the
# GPUs with each GPU's own re-runs). Brings back ladder_<G>gpu.tgz (the step's shard folders),
# agreement.tgz (agree<g>/ per GPU) and ladder.log; 'python -m kbench.collect.studies.scaling ladder' and
# '... agreement-all' compute the table and the pairwise agreement from them on the CPU.
# With CORES_LADDER (for example "16 1 2 4") the steps vary the host cores instead: each runs
# LADDER_GPUS GPUs (default all) with that many cores per GPU, the same shard count every step, so each
# resumes the shard folders where the last stopped (one assignment of STEP_LIMIT_PER_GPU per GPU per
# step); it brings back ladder_<G>gpu_cores.tgz and 'python -m kbench.collect.studies.scaling launches' tells
# the steps apart by their start times (each run's start record holds its cpu_count, the cores it
# could use).
#
# Installs the carried wheels (WHEELS, default .whl/) into SITE (default /tmp/site) and runs the collector into /tmp/raw
# (re-starting it after a fatal CUDA error while time is left: it resumes). 'collect'/'live'
# pack the raw folder into $OUT/raw.tgz; 'torchrun' packs only the new shard folders into
# $OUT/raw_shards.tgz, on a host of several GPUs one archive per GPU, $OUT/raw_shards_gpuG.tgz (a
# snapshot of them every minute while it runs, so a call cut short by the machine's limit still brings
# back all but its last minute), and on a one-GPU host their merge into $OUT/merged.tgz; 'scaling' writes $OUT/scaling.json
# and $OUT/agreement.json and packs its raw folders into $OUT/scaling_raw.tgz. Never touches clocks.
set -u
MODE=${1:-collect}
PROBLEMS=${2:-raw/h100/corpus.csv.gz}
BUDGET=${3:-480}
MARGIN=${4:-100}  # the collector starts no problem later than this before the budget ends
BASE=${BASE:-raw/h100}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
# WHEELS and SITE let a GPU run share a call with tools/boards_on_device.sh, whose CPU wheels it does not need
WHEELS=${WHEELS:-.whl} SITE=${SITE:-/tmp/site}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl || exit 1
export PYTHONPATH=$SITE:$PWD PYTHONUNBUFFERED=1
# The collector uses no collective communication (each rank times its own GPU; torchrun only
# starts the ranks and sets RANK/WORLD_SIZE/LOCAL_RANK), so NCCL is never initialised. NVLink
# multicast stays off all the same, as the lent machines require for every program.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
RAW=${RAW:-/tmp/raw}
RPG=${RANKS_PER_GPU:-1}
mkdir -p $RAW
# resume from the raw batches already collected for this dataset (carried in $BASE), if any;
# only the collecting modes use $RAW (a verify run before a collect run must not seed it)
case "$MODE" in collect|live|torchrun) [ -d "$BASE" ] && cp -r "$BASE"/. $RAW/ 2>/dev/null ;; esac
NGPU=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

if [ "$MODE" = probe ]; then
  timeout 90 python3 tools/collect/probe_api.py 2>&1 | tee $OUT/probe_api.txt
  timeout 90 python3 -m kbench.collect.studies.validate_timing measure --out $OUT/measure.json 2>&1 | tail -20
  timeout 150 ncu --csv --metrics gpu__time_duration.sum --clock-control none --cache-control none \
      --profile-from-start off python3 -c "
import json; from kbench.collect.measure import cudnn; from kbench.collect.studies import validate_timing
col = cudnn.CudnnCollector(cudnn.Options(notes=False, torch_choice=False))
json.dump(validate_timing.ncu_target(col), open('$OUT/ncu_order.json', 'w'))" > $OUT/ncu.csv 2> $OUT/ncu.err
  echo "ncu rc=$? lines=$(wc -l < $OUT/ncu.csv)"; tail -3 $OUT/ncu.err
  timeout 60 python3 -m kbench.collect.studies.validate_timing scaling --out $OUT/scaling.json 2>&1 | tail -12
fi

verify_one() {  # verify_one RUN_DIR: time RUN_DIR/plan.json's plans on the visible GPU, then score
  local RUN_DIR=$1 VOUT=$OUT/$(basename "$1") LEFT rc
  [ -f "$RUN_DIR/plan.json" ] || { echo "verify: $RUN_DIR/plan.json not found"; return 2; }
  mkdir -p "$VOUT"
  cp "$RUN_DIR"/plan.json "$VOUT"/
  [ -f "$RUN_DIR/raw.jsonl" ] && cp "$RUN_DIR"/raw.jsonl "$VOUT"/
  [ -f "$RUN_DIR/raw.jsonl.gz" ] && [ ! -f "$VOUT/raw.jsonl" ] && gunzip -c "$RUN_DIR/raw.jsonl.gz" > "$VOUT/raw.jsonl"
  [ -f "$RUN_DIR/raw_autotune.jsonl" ] && cp "$RUN_DIR"/raw_autotune.jsonl "$VOUT"/
  [ -f "$RUN_DIR/raw_autotune.jsonl.gz" ] && [ ! -f "$VOUT/raw_autotune.jsonl" ] && \
      gunzip -c "$RUN_DIR/raw_autotune.jsonl.gz" > "$VOUT/raw_autotune.jsonl"
  while :; do
    LEFT=$(left)
    [ $LEFT -lt 30 ] && break
    # raw.jsonl is written into $OUT as it goes: a run stopped by the limit still brings its rows back
    timeout -k 15 $((LEFT - 10)) python3 -m kbench.gpu_check.command --out "$VOUT" --time-only \
        --time-budget $((LEFT - MARGIN)) > "$VOUT.log" 2>&1
    rc=$?
    tail -5 "$VOUT.log"; cat "$VOUT.log" >> $OUT/verify.log
    echo "verify $(basename "$RUN_DIR") rc=$rc"
    [ "$rc" = 3 ] || break   # 3: fatal CUDA error -> restart and resume
  done
  # gzipped: a run with live references writes ~30 rows a problem, and a file over 16 MiB would not come back
  gzip -f -9 "$VOUT/raw.jsonl"
  [ -f "$VOUT/raw_autotune.jsonl" ] && gzip -f -9 "$VOUT/raw_autotune.jsonl"
  python3 -m kbench.gpu_check.command --out "$VOUT" --score-only 2>&1 | tail -3
  rm -f "$VOUT.log" "$VOUT/plan.json"  # the plan came with the call; the timings and the record go back
}

if [ "$MODE" = verify ]; then
  # RUN_DIR may list several folders, comma-separated: they are dealt out over the host's GPUs and
  # timed side by side, one process per GPU (folders dealt to the same GPU run one after another)
  export CUDA_DEVICE_ORDER=PCI_BUS_ID
  IFS=, read -ra RUN_DIRS <<< "$PROBLEMS"
  for g in $(seq 0 $((NGPU - 1))); do
    (
      for i in "${!RUN_DIRS[@]}"; do
        [ $((i % NGPU)) = $g ] || continue
        CUDA_VISIBLE_DEVICES=$g KBENCH_NVML_DEVICE=$g verify_one "${RUN_DIRS[$i]}"
      done
    ) &
  done
  wait
  ls -la $OUT $OUT/*/
  exit 0
fi

autotune_one() {  # autotune_one PROBLEMS: every GPU probes its shard of PROBLEMS' pending problem-directions
  local P=$1 BASE_AT NAME WORK DEST STAMP g pids=""
  BASE_AT=$(dirname "$P"); NAME=$(basename "$(dirname "$BASE_AT")")
  WORK=${AT_WORK:-/tmp/autotune}/$NAME; DEST=$OUT/autotune/$NAME; STAMP=$(date -u +%Y%m%dT%H%M%S)
  mkdir -p "$WORK" "$DEST"
  for f in "$BASE_AT"/autotune*.jsonl "$BASE_AT"/autotune*.jsonl.gz "$BASE_AT"/env.jsonl; do
    [ -f "$f" ] && cp "$f" "$WORK"/
  done
  snapshot_autotune() {  # the shards' records, gzipped under the call's stamp, and the environment records
    for g in $(seq 0 $((NGPU - 1))); do
      f=$WORK/autotune-$g-of-$NGPU.jsonl
      [ -f "$f" ] || continue
      gzip -c "$f" > "$DEST/autotune-$STAMP-$g-of-$NGPU.jsonl.gz.part" && \
          mv "$DEST/autotune-$STAMP-$g-of-$NGPU.jsonl.gz.part" "$DEST/autotune-$STAMP-$g-of-$NGPU.jsonl.gz"
    done
    [ -f "$WORK/env.jsonl" ] && cp "$WORK/env.jsonl" "$DEST/env.jsonl.part" && mv "$DEST/env.jsonl.part" "$DEST/env.jsonl"
    return 0
  }
  # the loop's sleep goes with it when it is stopped (the trap), and it holds none of the call's output
  ( trap 'kill $(jobs -p) 2>/dev/null; exit 0' TERM
    while :; do sleep ${SNAPSHOT_S:-60} & wait $!; snapshot_autotune; done ) > /dev/null 2>&1 &
  local SNAP=$!
  for g in $(seq 0 $((NGPU - 1))); do
    (
      while :; do
        L=$(left); [ $L -lt 30 ] && break
        CUDA_VISIBLE_DEVICES=$g KBENCH_NVML_DEVICE=$g timeout -k 15 $((L - 10)) python3 -m kbench.collect autotune \
            --problems "$P" --out "$WORK" --shard $g/$NGPU --time-budget $((L - MARGIN)) ${AT_ARGS:-} >> "$OUT/autotune_$NAME.log" 2>&1
        rc=$?
        echo "autotune $NAME shard $g/$NGPU rc=$rc" | tee -a "$OUT/autotune_$NAME.log"
        [ "$rc" = 3 ] || break   # 3: fatal CUDA error -> restart and resume
      done
    ) &
    pids="$pids $!"
  done
  wait $pids
  kill $SNAP 2>/dev/null; wait $SNAP 2>/dev/null
  snapshot_autotune
  rm -f "$DEST"/*.part
  tail -4 "$OUT/autotune_$NAME.log"
}

if [ "$MODE" = autotune ]; then
  # each problems file in turn (a dataset's autotune folder each), every GPU of the host on one at a time
  export CUDA_DEVICE_ORDER=PCI_BUS_ID
  IFS=, read -ra AT_PROBLEMS <<< "$PROBLEMS"
  for P in "${AT_PROBLEMS[@]}"; do
    [ -f "$P" ] || { echo "autotune: $P not found"; continue; }
    [ $(left) -lt 60 ] && { echo "autotune: no time left for $P"; break; }
    autotune_one "$P"
  done
  ls -la $OUT/autotune/*/
  exit 0
fi

if [ "$MODE" = labels ]; then
  # the verification pass on a shipped dataset's labels: RUN_DIR/plan.json(.gz) from
  # 'kbench collect verify-labels --dataset NAME --out RUN_DIR --plan-only'; raw.jsonl (resumed if carried)
  RUN_DIR=$PROBLEMS
  VOUT=$OUT/$(basename "$RUN_DIR")
  mkdir -p "$VOUT"
  if [ -f "$RUN_DIR/plan.json.gz" ]; then gunzip -c "$RUN_DIR/plan.json.gz" > "$VOUT/plan.json"
  elif [ -f "$RUN_DIR/plan.json" ]; then cp "$RUN_DIR/plan.json" "$VOUT/"
  else echo "labels: $RUN_DIR/plan.json(.gz) not found"; exit 2; fi
  if [ -f "$RUN_DIR/raw.jsonl.gz" ]; then gunzip -c "$RUN_DIR/raw.jsonl.gz" > "$VOUT/raw.jsonl"
  elif [ -f "$RUN_DIR/raw.jsonl" ]; then cp "$RUN_DIR/raw.jsonl" "$VOUT/"; fi
  while :; do
    LEFT=$(( BUDGET - ($(date +%s) - T0) ))
    [ $LEFT -lt 30 ] && break
    # raw.jsonl is written into $OUT as it goes: a run stopped by the limit still brings its rows back
    timeout -k 15 $((LEFT - 10)) python3 -m kbench.gpu_check.labels_command --out "$VOUT" --time-only \
        --time-budget $((LEFT - MARGIN)) 2>&1 | tee -a $OUT/labels.log | tail -5
    rc=${PIPESTATUS[0]}
    echo "verify-labels rc=$rc"
    [ "$rc" = 3 ] || break   # 3: fatal CUDA error -> restart and resume
  done
  rm -f "$VOUT/plan.json"   # it came with the call; only the timings go back
  gzip -f "$VOUT/raw.jsonl"
  ls -la "$VOUT"
  exit 0
fi

if [ "$MODE" = shards2 ]; then
  # The packaging tests' two-shard fixture: shards 0/2 and 1/2 of the corpus's first N_FIX
  # problem-directions, run one after the other on GPU 0 into a fresh root (no base), packed into
  # $OUT/two_shards.tgz (unpacked into tests/collect/fixtures/two_shards).
  N_FIX=${N_FIX:-6}
  for k in 0 1; do
    L=$(left); [ $L -lt 30 ] && break
    timeout -k 15 $((L - 10)) python3 -m kbench.collect cudnn --problems "$PROBLEMS" --out /tmp/fx \
        --shard $k/2 --limit $N_FIX --time-budget $((L - MARGIN)) 2>&1 | tee -a $OUT/shards2.log | tail -4
    echo "shard $k/2 rc=${PIPESTATUS[0]}"
  done
  tar czf $OUT/two_shards.tgz --exclude=.lock --exclude=.lock.pid -C /tmp/fx .
  exit 0
fi

if [ "$MODE" = kcache ]; then
  # tools/collect/kernel_cache_check.py: the corpus's first N_KC problem-directions without and with
  # --kernel-cache (fresh roots, no base, half the budget each), then the comparison into
  # $OUT/kernel_cache.json; both raw folders come back in $OUT/kcache_raw.tgz.
  # A run that crashes (fatal CUDA error 3, or a segmentation fault 139) is restarted while its half
  # lasts: it resumes, and a problem-direction that crashed it twice is recorded as crashed.
  N_KC=${N_KC:-60}
  HALF=$(( ($(left) - 20) / 2 ))
  for mode in off on; do
    flag=""; [ $mode = on ] && flag="--kernel-cache"
    END=$(( $(date +%s) + HALF ))
    while :; do
      L=$(( END - $(date +%s) )); [ $L -lt $((MARGIN + 15)) ] && break
      timeout -k 15 $((L - 5)) python3 -m kbench.collect cudnn --problems "$PROBLEMS" --out /tmp/kc/$mode \
          --limit $N_KC --time-budget $((L - MARGIN)) $flag >> $OUT/kcache_$mode.log 2>&1
      rc=$?; echo "kernel cache $mode rc=$rc"
      [ "$rc" = 3 ] || [ "$rc" = 139 ] || break
    done
    tail -12 $OUT/kcache_$mode.log
  done
  python3 tools/collect/kernel_cache_check.py /tmp/kc/off /tmp/kc/on > $OUT/kernel_cache.json
  cat $OUT/kernel_cache.json | head -80
  tar czf $OUT/kcache_raw.tgz --exclude=.lock --exclude=.lock.pid -C /tmp/kc off on
  exit 0
fi

if [ "$MODE" = live ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/collect/test_live_gpu.py 2>&1 | tail -5  # 2-GPU test runs where 2 GPUs are
fi

if [ "$MODE" = torchrun ]; then
  # RANKS_PER_GPU ranks per GPU: rank K times GPU K // RANKS_PER_GPU (LOCAL_RANK) and writes
  # $RAW/shard-K-of-N/, N = GPUs x RANKS_PER_GPU
  NR=$((NGPU * RPG))
  # A call stopped by the device machine's own limit never reaches the packing at the end, and
  # everything it collected would stay behind: keep a snapshot of the shard folders in $OUT,
  # refreshed every SNAPSHOT_S seconds (batch files appear by atomic rename, so a snapshot never
  # holds half a batch). tar exits 1 when a file changed while read; the archive is still whole.
  # One archive per GPU (its RANKS_PER_GPU shard folders; raw_shards.tgz on a one-GPU host), so that
  # no file outgrows what a call brings back (16 MiB each).
  snapshot_shards() {
    for g in $(seq 0 $((NGPU - 1))); do
      name=raw_shards.tgz; [ $NGPU -gt 1 ] && name=raw_shards_gpu$g.tgz
      dirs=$(for r in $(seq $((g * RPG)) $((g * RPG + RPG - 1))); do [ -d $RAW/shard-$r-of-$NR ] && echo shard-$r-of-$NR; done)
      [ -n "$dirs" ] || continue
      (cd $RAW && tar czf $RAW.snapshot.tgz --exclude=.lock --exclude=.lock.pid --exclude='.*.tmp' $dirs 2>/dev/null)
      [ $? -le 1 ] || continue
      cp $RAW.snapshot.tgz $OUT/$name.part && mv $OUT/$name.part $OUT/$name
    done
  }
  ( while sleep ${SNAPSHOT_S:-60}; do snapshot_shards; done ) &
  SNAPSHOTS=$!
  while :; do
    L=$(left); [ $L -lt 60 ] && break
    timeout -k 15 $((L - 10)) torchrun --standalone --nproc-per-node=$NR -m kbench.collect cudnn \
        --problems "$PROBLEMS" --out $RAW --time-budget $((L - MARGIN)) ${LIMIT:+--limit $LIMIT} \
        --ranks-per-gpu $RPG ${COLLECT_ARGS:-} > /tmp/attempt.log 2>&1
    rc=$?
    cat /tmp/attempt.log >> $OUT/collect.log; tail -40 /tmp/attempt.log
    echo "torchrun rc=$rc"
    # torchrun exits 1 whichever way a rank failed; its report gives each rank's own exit code.
    # Restart (every rank resumes its shard) only after a fatal CUDA error (collector exit 3).
    grep -Eq 'exitcode *: *3 ' /tmp/attempt.log || break
  done
  # ranks outlive a torchrun that timeout killed and save their last batch on its SIGTERM: wait
  # for them (60 s at most) before packing, or that batch stays behind
  for i in $(seq 60); do pgrep -f "kbench.collect cudnn" > /dev/null || break; sleep 1; done
  kill $SNAPSHOTS 2>/dev/null; wait $SNAPSHOTS 2>/dev/null; rm -f $OUT/raw_shards*.part
  for d in $RAW/shard-*-of-$NR; do python3 -m kbench.collect compact "$d" >/dev/null; done
  python3 -m kbench.collect.studies.scaling throughput $RAW/shard-*-of-$NR > $OUT/throughput.json; cat $OUT/throughput.json
  rm -rf $RAW.merged
  python3 -m kbench.collect merge $RAW/shard-*-of-$NR --out $RAW.merged --allow-gaps | head -40
  snapshot_shards
  # the merged folder repeats the shards' bytes: brought back on a one-GPU host only
  [ -d $RAW.merged ] && [ $NGPU = 1 ] && tar czf $OUT/merged.tgz -C $RAW.merged .
  ls -la $OUT
  exit 0
fi

if [ "$MODE" = ladder ]; then
  export CUDA_DEVICE_ORDER=PCI_BUS_ID  # GPU numbers as nvidia-smi gives them
  NCPU=$(nproc)
  CPG=${CORES_PER_GPU:-$((NCPU / NGPU))}
  PIN=1; { [ $CPG -ge 1 ] && [ $((CPG * NGPU)) -le $NCPU ] && command -v taskset > /dev/null; } || { PIN=0; CPG=$NCPU; }
  STEPS=${LADDER:-$(g=1; while [ $g -lt $NGPU ]; do echo $g; g=$((g * 2)); done; echo $NGPU)}
  AGREE_S=${AGREE_S:-90}  # per round
  ROUNDS=${AGREE_ROUNDS:-1}
  mkdir -p $RAW; [ -d "$BASE" ] && cp -r "$BASE"/. $RAW/
  pinned() {  # pinned FIRST_CORE NCORES CMD...: CMD on those host cores (on all where PIN=0)
    local first=$1 n=$2; shift 2
    if [ $PIN = 1 ]; then taskset -c $first-$((first + n - 1)) "$@"; else "$@"; fi
  }
  wait_ranks() {  # a rank still finishing its problem after the step would hold the GPU's turn: 20 s, then kill
    for i in $(seq 20); do pgrep -f "kbench.collect cudnn" > /dev/null || return 0; sleep 1; done
    pkill -9 -f "kbench.collect cudnn"; sleep 2
  }
  # a step is GPUS:CORES_PER_GPU; a cores ladder keeps the GPUs and varies the cores
  if [ -n "${CORES_LADDER:-}" ]; then
    LG=${LADDER_GPUS:-$NGPU}; WANTED=$(for c in $CORES_LADDER; do echo $LG:$c; done)
    [ $PIN = 1 ] || { echo "ladder: CORES_LADDER needs taskset and cores for every step" | tee $OUT/ladder.log; exit 2; }
  else
    WANTED=$(for g in $STEPS; do echo $g:$CPG; done)
  fi
  : > $OUT/ladder.log
  STEP_LIST=""  # the steps this host can run: the budget and the shard assignment are shared among them only
  for STEP in $WANTED; do
    G=${STEP%%:*}; C=${STEP##*:}
    if [ $G -le $NGPU ] && { [ $PIN = 0 ] || [ $((G * C)) -le $NCPU ]; }; then STEP_LIST="$STEP_LIST $STEP"
    else echo "ladder: step $STEP does not fit this host" | tee -a $OUT/ladder.log; fi
  done
  NSTEPS=$(echo $STEP_LIST | wc -w)
  [ $NSTEPS -ge 1 ] || exit 2
  # agreement needs two GPUs and at least one round; otherwise no time is kept for it
  AGREE_KEEP=0; [ $ROUNDS -ge 1 ] && [ $NGPU -ge 2 ] && AGREE_KEEP=$AGREE_S
  STEP_S=${STEP_S:-$(( ($(left) - AGREE_KEEP * ROUNDS - 30) / NSTEPS ))}
  # every step of a cores ladder resumes one assignment (the same shard count): room for all its steps
  PER_GPU=${STEP_LIMIT_PER_GPU:-400}; [ -n "${CORES_LADDER:-}" ] && PER_GPU=$((PER_GPU * NSTEPS))
  echo "ladder: steps (GPUs:cores per GPU) '$(echo $STEP_LIST)', $STEP_S s each, $RPG ranks per GPU, of $NCPU cores (pinned: $PIN)" | tee -a $OUT/ladder.log
  for STEP in $STEP_LIST; do
    G=${STEP%%:*}; C=${STEP##*:}
    [ $(left) -lt $((STEP_S + AGREE_KEEP / 2)) ] && { echo "ladder: no time left for step $STEP" | tee -a $OUT/ladder.log; break; }
    NR=$((G * RPG))
    DEV=$(seq -s, 0 $((G - 1)))
    echo "== $G GPU(s) ($DEV): $NR ranks, cores $([ $PIN = 1 ] && echo 0-$((G * C - 1)) || echo all)" | tee -a $OUT/ladder.log
    CUDA_VISIBLE_DEVICES=$DEV pinned 0 $((G * C)) timeout -k 10 $((STEP_S - 5)) \
        torchrun --standalone --nproc-per-node=$NR -m kbench.collect cudnn --problems "$PROBLEMS" --out $RAW \
        --time-budget $((STEP_S - MARGIN)) --limit $((G * PER_GPU)) --ranks-per-gpu $RPG \
        > /tmp/ladder_$STEP.log 2>&1
    echo "$G GPU(s) rc=$?" | tee -a $OUT/ladder.log
    wait_ranks
    tail -5 /tmp/ladder_$STEP.log >> $OUT/ladder.log
    for d in $RAW/shard-*-of-$NR; do python3 -m kbench.collect compact "$d" >/dev/null; done
    if [ -n "${CORES_LADDER:-}" ]; then  # the same folders every step: one archive, refreshed after each
      (cd $RAW && tar czf $OUT/ladder_${G}gpu_cores.tgz --exclude=.lock --exclude=.lock.pid shard-*-of-$NR)
    else
      python3 -m kbench.collect.studies.scaling throughput $RAW/shard-*-of-$NR | tee -a $OUT/ladder.log | head -8
      (cd $RAW && tar czf $OUT/ladder_${G}gpu.tgz --exclude=.lock --exclude=.lock.pid shard-*-of-$NR)
    fi
  done
  # agreement: every GPU times the same first problem-directions of the corpus at once, no base; with
  # AGREE_ROUNDS > 1 again in later rounds (agree<g>_r<k>), the same GPU's repeatability across processes
  L=$(left)
  if [ $L -ge 45 ] && [ $NGPU -ge 2 ] && [ $ROUNDS -ge 1 ]; then  # AGREE_ROUNDS=0: no agreement runs
    for r in $(seq 1 $ROUNDS); do
      L=$(left); RL=$(( (L - 10) / (ROUNDS - r + 1) )); [ $RL -ge 35 ] || break
      SUF=$([ $r = 1 ] || echo _r$r)
      for g in $(seq 0 $((NGPU - 1))); do
        CUDA_VISIBLE_DEVICES=$g KBENCH_NVML_DEVICE=$g pinned $((g * CPG)) $CPG timeout -k 10 $((RL - 10)) \
            python3 -m kbench.collect cudnn --problems "$PROBLEMS" --out /tmp/agree/agree$g$SUF --limit ${N_AGREE:-40} \
            --time-budget $((RL - 20)) > /tmp/agree$g$SUF.log 2>&1 &
      done
      wait; wait_ranks
      echo "agreement round $r: $RL s" | tee -a $OUT/ladder.log; tail -3 /tmp/agree0$SUF.log >> $OUT/ladder.log
    done
    tar czf $OUT/agreement.tgz --exclude=.lock --exclude=.lock.pid -C /tmp/agree .
    python3 -m kbench.collect.studies.scaling agreement-all /tmp/agree/agree? 2>&1 | tee -a $OUT/ladder.log | head -30
    [ $ROUNDS -gt 1 ] && python3 -m kbench.collect.studies.scaling agreement-rounds /tmp/agree/agree* 2>&1 \
        | tee -a $OUT/ladder.log | grep -A3 '"cross_gpu"\|"same_gpu"\|within'
  fi
  python3 -m kbench.collect.studies.scaling $([ -n "${CORES_LADDER:-}" ] && echo launches || echo ladder) $RAW 2>&1 \
      | tee -a $OUT/ladder.log | head -40
  ls -la $OUT
  exit 0
fi

if [ "$MODE" = scaling ]; then
  # the same budget T three times: 1 GPU, all GPUs (torchrun), then the same problems on GPU 0 and GPU 1
  T=$(( ($(left) - 60) / 3 ))
  for d in /tmp/s1 /tmp/sN; do mkdir -p $d; [ -d "$BASE" ] && cp -r "$BASE"/. $d/; done
  CUDA_VISIBLE_DEVICES=0 KBENCH_NVML_DEVICE=0 CUDA_DEVICE_ORDER=PCI_BUS_ID \
      timeout -k 15 $((T - 5)) python3 -m kbench.collect cudnn --problems "$PROBLEMS" \
      --out /tmp/s1 --time-budget $((T - MARGIN)) > $OUT/scaling_1gpu.log 2>&1
  echo "1 GPU rc=$?"
  timeout -k 15 $((T - 5)) torchrun --standalone --nproc-per-node=$NGPU -m kbench.collect cudnn \
      --problems "$PROBLEMS" --out /tmp/sN --time-budget $((T - MARGIN)) > $OUT/scaling_Ngpu.log 2>&1
  echo "$NGPU GPUs rc=$?"
  # agreement: both GPUs time the same first problem-directions of the corpus, side by side, no base
  N_AGREE=${N_AGREE:-60}
  for g in 0 1; do
    CUDA_VISIBLE_DEVICES=$g KBENCH_NVML_DEVICE=$g CUDA_DEVICE_ORDER=PCI_BUS_ID timeout -k 15 $((T - 5)) \
        python3 -m kbench.collect cudnn --problems "$PROBLEMS" --out /tmp/agree$g --limit $N_AGREE \
        --time-budget $((T - MARGIN)) > $OUT/agree$g.log 2>&1 &
  done
  wait
  python3 - <<EOF
import json
from kbench.collect.studies.scaling import agreement, throughput
one = throughput(["/tmp/s1"])
many = throughput(["/tmp/sN"])
json.dump({"one_gpu": one, "all_gpus": many, "speedup": many["per_minute"] / one["per_minute"]},
          open("$OUT/scaling.json", "w"), indent=1)
json.dump(agreement("/tmp/agree0", "/tmp/agree1"), open("$OUT/agreement.json", "w"), indent=1)
print(open("$OUT/scaling.json").read()[:1500]); print(open("$OUT/agreement.json").read())
EOF
  # the base's compacted files are left out (they are in the repository already); new runs are in parts/
  tar czf $OUT/scaling_raw.tgz --exclude=.lock --exclude=.lock.pid --exclude='plans-00[0-9][0-9].parquet' --exclude='problems-00[0-9][0-9].parquet' \
      -C /tmp s1 sN agree0 agree1
  ls -la $OUT
  exit 0
fi

while :; do
  LEFT=$(left)
  [ $LEFT -lt 60 ] && break
  timeout -k 15 $((LEFT - 10)) python3 -m kbench.collect cudnn --problems "$PROBLEMS" --out $RAW \
      --time-budget $((LEFT - MARGIN)) ${COLLECT_ARGS:-} 2>&1 | tee -a $OUT/collect.log | tail -25
  rc=${PIPESTATUS[0]}
  echo "collector rc=$rc"
  [ "$rc" = 3 ] || break   # 3: fatal CUDA error -> restart and resume
done
python3 -m kbench.collect compact $RAW
tar czf $OUT/raw.tgz --exclude=.lock --exclude=.lock.pid -C $RAW .
ls -la $OUT
