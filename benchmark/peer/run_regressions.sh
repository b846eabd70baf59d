#!/usr/bin/env bash
# The public TileLang v0.1.13 examples' performance scripts (regression_*.py: each times its
# examples' kernels with do_bench and prints one JSON line of latencies) run one file at a time,
# under our package (`ours`) or under the public 0.1.15 wheel (`anchor`), on the GPU machine.
# Compare two runs with compare.py; ../shared/peer/README.md says how to get the examples
# (.gpu/peer/examples) and the wheel (.gpu/peer/anchor.tar.xz). They are somebody else's code:
# they are run from outside the project tree, never copied into it.
#
# usage (from the project's root): bash benchmark/peer/run_regressions.sh ours|anchor BUDGET_S [filter ...]
#   writes $OUT/perf_<which>.jsonl (one line per file: rc, seconds, the latencies); logs in /tmp/perf-logs.
set -u
which=$1; budget=$2; shift 2
root=$(pwd); OUT=${OUT:-/tmp}; extra=/tmp/peer-wheels
[ -d .gpu/peer/examples ] || { echo "no .gpu/peer/examples (see ../shared/peer/README.md)"; exit 2; }
[ -d $extra/einops ] ||
  python3 -m pip install -q --no-index --no-deps --target $extra .gpu/peer/wheels/*.whl 2>/dev/null
case $which in
  anchor) [ -d /tmp/anchor ] || tar -C /tmp -xJf .gpu/peer/anchor.tar.xz; export PYTHONPATH=/tmp/anchor:$extra ;;
  ours) export PYTHONPATH=$root:$extra:${PYTHONPATH:-} ;;
  *) echo "usage: run_regressions.sh ours|anchor BUDGET_S [filter ...]"; exit 2 ;;
esac
export TILELANG_CACHE_DIR=/tmp/perf-cache-$which TL_PERF_REGRESSION_FORMAT=json PYTHONUNBUFFERED=1
logs=/tmp/perf-logs/$which; mkdir -p "$logs"
res=$OUT/perf_$which.jsonl; : > "$res"
# Other vendors' and later architectures' examples do not run on an H200.
files=$(find .gpu/peer/examples -name 'regression_*.py' | grep -v -e amd -e sm100 -e sm120 | sort)
if [ $# -gt 0 ]; then files=$(for n in "$@"; do echo "$files" | grep -F "$n"; done | sort -u); fi
start=$SECONDS
for f in $files; do
  left=$(( budget - (SECONDS - start) )); [ $left -lt 20 ] && { echo "budget spent before $f"; break; }
  name=$(basename "$f" .py); t0=$SECONDS
  limit=$(( left < 240 ? left : 240 ))
  (cd "$(dirname "$f")" && timeout -k 5 $limit python3 "$(basename "$f")" > "$logs/$name.log" 2>&1)
  rc=$?
  line=$(grep -a '__TILELANG_PERF_RESULTS_JSON__=' "$logs/$name.log" | tail -1 |
         sed 's/^.*__TILELANG_PERF_RESULTS_JSON__=//')
  echo "{\"file\": \"$name\", \"rc\": $rc, \"secs\": $(( SECONDS - t0 )), \"results\": ${line:-null}}" >> "$res"
  echo "$name rc=$rc $(( SECONDS - t0 ))s"
  [ -z "$line" ] && tail -3 "$logs/$name.log" | cut -c1-200
done
