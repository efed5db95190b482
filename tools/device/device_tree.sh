#!/usr/bin/env bash
# Thin the working tree for a call on the lent GPU machine, which takes at most 64 MiB of tree plus
# carried files (docs/architecture.md, "Repository size"), and put everything back afterwards.
# Run from the repository root:
#
#   bash tools/device/device_tree.sh out  STASH [DATASET ...]  # move what the collector does not need to STASH
#   bash tools/device/device_tree.sh back STASH                # move it all back, then remove STASH
#   bash tools/device/device_tree.sh size [CARRY ...]          # bytes that would travel (tree + carried paths)
#
# 'out' moves the leaderboard, the scripts' results (bench/, experiments/, tools/), every packaged dataset but the DATASETs named
# (the ones a 'verify' call scores against) and every file under raw/ but the corpora
# (raw/*/corpus.csv.gz) and the autotune folders (raw/*/autotune/: the problems an 'autotune' call
# probes and the records it resumes from): a collecting call resumes from the raw folder it carries
# (for example .gpu/h200_raw), not from raw/. Files move one by one with their paths kept, so 'back' restores the
# same tree; neither overwrites a file that exists at its destination. 'out' also writes .kbench-source
# (the commit and its tracked files' blob ids), so that records made from the copy name the commit
# and whether the code that travelled differs from it (kbench.scoring.environment.copy_state); 'back' removes it.
set -eu
MODE=${1:-}
case "$MODE" in
  out|back) [ $# -ge 2 ] || { echo "device_tree.sh $MODE: give the stash folder (outside the repository)" >&2; exit 2; }
            STASH=$(realpath -m "$2"); shift 2 ;;
  size) shift ;;
  *) echo "usage: device_tree.sh out STASH [DATASET ...] | back STASH | size [CARRY ...]" >&2; exit 2 ;;
esac
[ -d .git ] || [ -f .git ] || { echo "device_tree.sh: run it from the repository root" >&2; exit 2; }

if [ "$MODE" = size ]; then
  # what the device tool sends: tracked and untracked-not-ignored files that exist, plus carried paths
  { git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
      if [ -f "$f" ]; then stat -c %s "$f"; fi; done  # a moved-out tracked file does not travel
    for c in "$@"; do find "$c" -type f -exec stat -c %s {} +; done; } |
    awk '{s += $1} END {printf "%d bytes travel (limit 67108864): %s\n", s, (s <= 67108864 ? "fits" : "too large")}'
  exit 0
fi

case "$STASH/" in "$(realpath .)"/*) echo "device_tree.sh: the stash $STASH is inside the repository" >&2; exit 2 ;; esac

move_file() {  # move_file FROM TO: one file, refusing to overwrite
  [ -e "$2" ] && { echo "device_tree.sh: $2 exists already; nothing more moved" >&2; exit 2; }
  mkdir -p "$(dirname "$2")" && mv "$1" "$2"
}

if [ "$MODE" = out ]; then
  KEEP=" $* "
  mkdir -p "$STASH"
  {
    for p in leaderboard bench/results experiments/results tools/results raw; do [ -d "$p" ] && find "$p" -type f; done
    for d in kbench/datasets/*/; do
      name=$(basename "$d"); case "$KEEP" in *" $name "*) ;; *) find "$d" -type f ;; esac
    done
  } | grep -v -e '^raw/[^/]*/corpus\.csv\.gz$' -e '^raw/[^/]*/autotune/' | sed 's|//|/|g' | while IFS= read -r f; do move_file "$f" "$STASH/$f"; done
  { echo "commit $(git rev-parse HEAD)"; git -c core.quotepath=off ls-files -s; } > .kbench-source
  echo "device_tree.sh: moved $(find "$STASH" -type f | wc -l) files to $STASH"
else
  [ -d "$STASH" ] || { echo "device_tree.sh back: $STASH not found" >&2; exit 2; }
  (cd "$STASH" && find . -type f | sed 's|^\./||') | while IFS= read -r f; do move_file "$STASH/$f" "$f"; done
  find "$STASH" -depth -type d -empty -delete
  rm -f .kbench-source
  echo "device_tree.sh: moved everything back from $STASH"
fi
