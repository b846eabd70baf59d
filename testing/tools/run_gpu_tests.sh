#!/usr/bin/env bash
# The GPU tests (`-m gpu`) on the GPU machine, one pytest process per test file, P files at once; a
# summary line per file, then the totals and the first errors of each failing file.
#   bash testing/tools/run_gpu_tests.sh [P] [path ...]      (default: 6 files at once, testing examples)
# Logs go to $GPULOGS (default /tmp/gpulogs; point it under $OUT to bring them back). Each file gets a line,
# in live.txt and on stdout, as it finishes, so a run cut off by a time limit still says how far it got
# (do not pipe it through `tail`, which prints only at the end).
P=${1:-6}; shift
paths=${*:-testing examples}
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/gputest-cache} PYTHONUNBUFFERED=1
export GPULOGS=${GPULOGS:-/tmp/gpulogs}
logs=$GPULOGS; rm -rf $logs; mkdir -p $logs
files=$(grep -rlE "mark\.gpu|pytestmark" --include='test_*.py' $paths | sort)
one() {
  f=$1; n=$(echo "$f" | tr / _)
  timeout -k 5 500 python -m pytest -q -m gpu -p no:cacheprovider -rfE "$f" > "$GPULOGS/$n.log" 2>&1
  echo "$f: $(grep -E 'passed|failed|error|no tests' "$GPULOGS/$n.log" | tail -1)" | tee -a "$GPULOGS/live.txt"
}
export -f one
echo "$files" | xargs -P "$P" -I{} bash -c 'one {}'
echo "== summary"
sort $logs/live.txt > $logs/summary
grep -v " passed\| deselected" $logs/summary | grep -v "^$"
count() { grep -oE "[0-9]+ $1" $logs/summary | awk '{s+=$1} END {print s+0}'; }
echo "files: $(wc -l < $logs/summary); passed: $(count passed); failed: $(count failed)"
for f in $(grep -l "failed\|error" $logs/*.log 2>/dev/null); do
  echo "== $f"; grep -E "^E |FAILED|Error" "$f" | head -8 | cut -c1-250
done
