set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
echo "== collector before issue 16 ($(date +%T))"
timeout 55 python3 .gpu/collect_v1.py .gpu/cases_corpus.csv /tmp/raw_old 36 2>&1 | tail -3
tar czf $OUT/raw_old.tgz -C /tmp/raw_old . 2>/dev/null
echo "== verify-on-gpu resume ($(date +%T))"
timeout 100 python3 .gpu/verify_on_gpu.py --out .gpu/verify_hybrid --time-only --time-budget 85 2>&1 | tail -3
cp .gpu/verify_hybrid/raw.jsonl $OUT/verify_hybrid_raw.jsonl
echo "== end ($(date +%T))"
} 2>&1 | tee $OUT/log2.txt
