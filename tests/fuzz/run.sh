#!/usr/bin/env bash
# Runs the service fuzzer once per RPC for a bounded time, each from its
# committed seed corpus (copied to a scratch directory, so the repository
# is not written). Fails on the first crash, leak or sanitizer report (the
# reproducer is kept under the scratch directory and its path printed).
# Prints each target's executions, coverage (libFuzzer's final cov: and ft:,
# edges and features) and the total.
#
#   tests/fuzz/run.sh FUZZER_BINARY [SECONDS_PER_RPC (15)] [RPC...]
set -euo pipefail
fuzzer=$(realpath "$1")
seconds=${2:-15}
shift $(( $# >= 2 ? 2 : $# ))
here=$(cd "$(dirname "$0")" && pwd)
if [[ $# -gt 0 ]]; then
  rpcs=("$@")
else
  rpcs=($(ls "$here/corpus"))
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/tensord-fuzz.XXXXXX")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
total=0
failed=0
printf '== fuzz: %d targets, %s s each\n' "${#rpcs[@]}" "$seconds"
for rpc in "${rpcs[@]}"; do
  mkdir -p "$work/$rpc/corpus" "$work/$rpc/artifacts"
  cp "$here/corpus/$rpc/"* "$work/$rpc/corpus/"
  log="$work/$rpc/log"
  start=$(date +%s)
  if TENSORD_FUZZ_RPC="$rpc" "$fuzzer" -max_total_time="$seconds" \
      -print_final_stats=1 -timeout=30 -rss_limit_mb=4096 \
      -artifact_prefix="$work/$rpc/artifacts/" "$work/$rpc/corpus" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\).*/\1\/\2/p' "$log" | tail -1)
  corpus=$(ls "$work/$rpc/corpus" | wc -l)
  printf 'fuzz: %-15s %-6s executions=%-8s cov/ft=%-11s corpus=%-5s %ss\n' \
    "$rpc" "$status" "${execs:-0}" "${cov:-?}" "$corpus" \
    "$(( $(date +%s) - start ))"
  total=$(( total + ${execs:-0} ))
  if [[ $status != ok ]]; then
    echo "---- $rpc: last 60 lines of $log"
    tail -60 "$log"
    ls "$work/$rpc/artifacts/" | sed "s|^|reproducer: $work/$rpc/artifacts/|"
  fi
done
printf 'fuzz: total executions=%d over %d targets\n' "$total" "${#rpcs[@]}"
if [[ $failed -ne 0 ]]; then
  echo "fuzz: FAILED (inputs and logs kept in $work)"
  exit 1
fi
rm -rf "$work"
echo "fuzz: PASS"
