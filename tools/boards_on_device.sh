#!/usr/bin/env bash
# Train and score board entries on the lent GPU machine's CPU cores, many (baseline, seed) jobs at once.
# Run from the repository root there, after 'bash tools/device/device_tree.sh out STASH DATASET ...'
# here (the datasets the queue names travel; .kbench-source names the commit) and with the wheels of
# the baselines' packages carried in .whl/:
#
#   bash tools/boards_on_device.sh QUEUE BUDGET_S [SLOTS [THREADS]]
#
# QUEUE holds lines "DATASET SPLIT BASELINE SEED", longest first. Each line is one
# 'kbench run --dataset DATASET --split SPLIT --baselines BASELINE --seeds SEED', exactly as here (a
# comma list "mi100,mi50,..." runs its datasets one after another in one job, so that a pooled
# baseline fits once and the next datasets take the fitted model from its cache), with
# THREADS threads a job (default 2, the baselines' own n_jobs; more through KBENCH_THREADS, which
# changes the fit time and not the trees; BLAS is held to the same), SLOTS jobs at a time (default:
# the host's cores / THREADS, less one). A job still running when BUDGET_S is spent is stopped; its seed has no
# result.json and is run again by the next call, from the start: a fit's training state
# (seed-N/fit-state.safetensors, seq2seq's, about 10 MB a seed on h200) stays on the machine, since the
# states of a queue would pass what a call brings back and carries. Brings back $OUT/boards_<dataset>_<split>.tgz (the
# seed folders, as results/boards holds them; packed every minute, so a call cut short brings back
# all but its last minute), $OUT/jobs.log (one line a job: rc and seconds) and $OUT/logs.tgz.
# Unpack into results/boards here and run the same command with all five seeds and
# --update-leaderboard: it resumes every finished seed and writes the entry.
#
# Size the queue so that each job ends inside one call (a call is at most 600 s; a job is not
# resumable). On nvidia-h200-x4 (64 Intel Xeon vCPUs), 24 jobs at a time, a job took 1.3 to 2 times
# what it takes on the 2-core development machine: xgboost-plans 180-200 s on h100 and 330-350 s on
# h200 (seed folders dated 2026-11-28); xgboost-plans-safe and hybrid-rf on h100/h200 (fits of 250 to
# 550 s here) did not finish in 540 s, at 24 or at 31 jobs at a time. On nvidia-h200-x2 (32 vCPUs) they
# do with fewer, wider jobs; the fits (the entries' extra.fit_time_s_per_seed) took 288-298 s for hybrid-rf
# on h100 random at 5 jobs of 3 threads, 230-236 s on h100-pytorch random at 5 jobs of 6 threads, and
# 60-104 s for the AMD reformer family at 28 jobs of one thread, each job ending inside its call.
# hybrid-rf on h200-pytorch is the heaviest job: on nvidia-h200-x4, 10 jobs of 5 and 7 threads at once
# (random and networks, two queues) were all still running when their budgets stopped them at 493 and
# 537 s; 5 jobs of 12 threads (one split) ended in 467-470 s, fits of 240-242 s (the entry's records);
# h100-pytorch networks at 5 jobs of 12 threads: 296-319 s a job, fits of 120-137 s (jobs.log in commit
# 5afe1b6's message). seq2seq-engines on h200 (one thread a fit, 445 to 535 s of fit on the 2-core
# development machine by its entries' records) ended none of 10 jobs at a time on nvidia-h200 (16 vCPUs)
# inside a 565 s call (2026-11-29): its seeds need a call longer than one fit.
set -u
QUEUE=${1:?give the queue file}
BUDGET=${2:?give the budget in seconds}
THREADS=${4:-2}
SLOTS=${3:-$(( $(nproc) / THREADS - 1 ))}
OUT=${OUT:-/tmp/out}
T0=$(date +%s)
mkdir -p "$OUT" /tmp/boards /tmp/board_logs
# WHEELS and SITE (defaults .whl and /tmp/site) let a GPU run of tools/device/run_on_device.sh share the call
WHEELS=${WHEELS:-.whl} SITE=${SITE:-/tmp/site}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl || exit 1
# editable, as here: the records name kbench's version and the commit in .kbench-source
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > /tmp/board_logs/install.log 2>&1 \
  || { tail -5 /tmp/board_logs/install.log; exit 1; }
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1 OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS \
  MKL_NUM_THREADS=$THREADS
[ "$THREADS" != 2 ] && export KBENCH_THREADS=$THREADS  # 2 is the baselines' own: records without the key
python3 -c "import kbench, kbench_baselines, numpy, pandas, sklearn, xgboost; from kbench.scoring.environment import git_state
print('kbench', kbench.__version__, 'numpy', numpy.__version__, 'pandas', pandas.__version__, 'sklearn',
      sklearn.__version__, 'xgboost', xgboost.__version__, git_state().describe())" || exit 1
echo "$(grep -c . "$QUEUE") jobs, $SLOTS at a time, $THREADS threads each, $BUDGET s"

pack() {  # one archive per dataset and split, so that none passes the 16 MiB a file that comes back
  for ds in /tmp/boards/*/*/; do
    [ -d "$ds" ] || continue
    local d s; d=$(basename "$(dirname "$ds")"); s=$(basename "$ds")
    tar -C /tmp/boards -czf "$OUT/boards_${d}_${s}.tgz.part" --exclude=error.log --exclude='fit-state.safetensors*' "$d/$s" && mv "$OUT/boards_${d}_${s}.tgz.part" "$OUT/boards_${d}_${s}.tgz"
  done
  tar -C /tmp -czf "$OUT/logs.tgz" board_logs 2>/dev/null
}

run_job() {  # run_job DATASET[,DATASET...] SPLIT BASELINE SEED: the datasets one after another
  local t=$(date +%s) rc=0 d left
  for d in ${1//,/ }; do
    left=$(( T0 + BUDGET - $(date +%s) ))
    [ "$left" -lt 60 ] && { echo "$d $2 $3 $4 skipped (no time)"; rc=124; break; }
    timeout -k 10 "$left" python3 -m kbench.cli run --dataset "$d" --split "$2" --baselines "$3" --seeds "$4" \
        --out /tmp/boards --no-progress > "/tmp/board_logs/$d.$2.$3.$4.log" 2>&1 || { rc=$?; break; }
  done
  echo "$1 $2 $3 $4 rc=$rc $(( $(date +%s) - t ))s"
}
export -f run_job
export T0 BUDGET

( while sleep 60; do pack; done ) &
PACKER=$!
grep . "$QUEUE" | xargs -P "$SLOTS" -L1 bash -c 'run_job "$@"' _ | tee "$OUT/jobs.log"
kill $PACKER 2>/dev/null
pack
echo "done in $(( $(date +%s) - T0 )) s: $(grep -c 'rc=0' "$OUT/jobs.log") of $(grep -c . "$QUEUE") jobs finished"
