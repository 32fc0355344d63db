#!/usr/bin/env bash
# run-gpu-validation.sh: the GPU validation of a tensord bundle (see
# docs/gpu-validation.md). Shipped at the top of the bundle made by
# deploy/bundle.sh; needs only bash, coreutils and the NVIDIA driver.
#
#   ./run-gpu-validation.sh [RESULTS_DIR]     (default: ./gpu-validation-<date>)
#
# Environment: JOBS test binaries at a time (default: the CPU count; the
# device conformance suite runs first, alone), TEST_TIMEOUT seconds per
# binary (default 1800), EXAMPLE_TIMEOUT seconds per example (default 300),
# GPU_BENCH_FLAGS passed to gpu_bench.
#
# 1. machine facts: nvidia-smi, driver, BUILD-INFO;
# 2. every test binary in bin/ through its own gtest runner (there is no
#    ctest on the GPU machine), a log and a JUnit XML per binary; the
#    device conformance suite must have run on cuda:0 (not skipped);
# 3. an end-to-end smoke test without Python: the daemon on a loopback
#    port, `tensorctl devices` must list cuda:0, every example that runs
#    against one server (quickstart, the seed walkthrough, matmul_devices,
#    the logging exercise, linear_forward, net_on_gpu, train_regression,
#    train_cifar_net on a small synthetic set) runs against it on cuda:0,
#    SIGTERM stops it cleanly (the e2e
#    tests under tests/e2e and tests/python need Debian's python3 and the
#    source tree and are not run here);
# 4. bench/gpu_bench: matmul TFLOP/s (service and cuBLAS alone) and
#    upload/fetch GB/s as JSON.
# Writes RESULTS_DIR/summary.txt; exits 0 only if everything passed.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin="$here/bin"
results=${1:-"$PWD/gpu-validation-$(date -u +%Y%m%dT%H%M%SZ)"}
mkdir -p "$results"
results=$(cd "$results" && pwd)
summary="$results/summary.txt"
: >"$summary"
failures=0

say() { echo "$*" | tee -a "$summary"; }
fail() { say "FAIL: $*"; failures=$((failures + 1)); }

# A bundle must not pick up a build tree's or the system's libraries; a lean
# one (deploy/bundle.sh --lean) takes CUDA's from the machine.
if ! grep -q "^cuda_libraries: the machine's" "$here/BUILD-INFO" 2>/dev/null; then
  unset LD_LIBRARY_PATH
fi
jobs=${JOBS:-$(nproc)}
test_timeout=${TEST_TIMEOUT:-1800}

say "tensord GPU validation, $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname)"
[[ -f "$here/BUILD-INFO" ]] && { cat "$here/BUILD-INFO" >>"$summary"; cp "$here/BUILD-INFO" "$results/"; }
if command -v nvidia-smi >/dev/null; then
  nvidia-smi >"$results/nvidia-smi.txt" 2>&1
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap \
             --format=csv,noheader >"$results/gpus.csv" 2>&1
  say "GPUs: $(tr '\n' ';' <"$results/gpus.csv")"
  have_gpu=1
else
  say "nvidia-smi not found: no NVIDIA driver on this machine"
  have_gpu=0
fi

# --- 2. Test binaries ---------------------------------------------------------
say ""
say "== test binaries (gtest) =="
if ldd "$bin/tensord" 2>&1 | grep -q "not found"; then
  fail "tensord's libraries are missing: $(ldd "$bin/tensord" | grep 'not found' | tr -s ' \t\n' ' ')"
fi
# Each binary writes $name.log, $name.xml and $name.rc, in a scratch
# directory of its own (some tests write files where they run).
run_test() {
  local t=$1 name
  name=$(basename "$t")
  mkdir -p "$results/scratch/$name"
  (cd "$results/scratch/$name" && timeout "$test_timeout" "$t" --gtest_color=no \
      --gtest_output="xml:$results/$name.xml") >"$results/$name.log" 2>&1
  echo $? >"$results/$name.rc"
}
tests=()
for t in "$bin"/*; do
  [[ -x "$t" && -f "$t" ]] || continue
  grep -q -a -- "gtest_list_tests" "$t" || continue   # not a gtest binary
  tests+=("$t")
done
tests_run=${#tests[@]}
[[ -x "$bin/device_conformance_test" ]] && run_test "$bin/device_conformance_test"
running=0
for t in "${tests[@]}"; do
  [[ $(basename "$t") == device_conformance_test ]] && continue
  run_test "$t" &
  running=$((running + 1))
  if [[ $running -ge $jobs ]]; then wait -n; running=$((running - 1)); fi
done
wait
for t in "${tests[@]}"; do
  name=$(basename "$t")
  rc=$(cat "$results/$name.rc" 2>/dev/null || echo "?")
  line=$(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$results/$name.log" | tail -2 | tr '\n' ' ')
  if [[ $rc == 0 ]]; then
    say "ok    $name  $line"
  else
    fail "$name (exit $rc)  $line -- see $name.log"
    grep -E '^\[  FAILED  \] [A-Za-z]' "$results/$name.log" | sed 's/^/      /' | sort -u | tee -a "$summary" >/dev/null
  fi
done
[[ $tests_run -gt 0 ]] || fail "no test binaries in $bin"

conf="$results/device_conformance_test.log"
if [[ $have_gpu -eq 1 && -f "$conf" ]]; then
  if grep -q "no CUDA device" "$conf"; then
    fail "device_conformance_test skipped its CUDA instantiation on a GPU machine: $(grep -m1 'no CUDA device' "$conf")"
  elif ! grep -q "Devices/ConformanceTest.*/cuda_0" "$conf"; then
    fail "device_conformance_test did not run on cuda_0"
  else
    say "conformance: ran on $(grep -o 'ConformanceTest\.[A-Za-z]*/cuda_[0-9]*' "$conf" | sed 's/.*\///' | sort -u | tr '\n' ' ')"
  fi
fi

# --- 3. End-to-end smoke --------------------------------------------------------
say ""
say "== daemon smoke test =="
port_file="$results/tensord.port"
rm -f "$port_file"
"$bin/tensord" --listen 127.0.0.1:0 --port-file "$port_file" \
    >"$results/tensord.log" 2>&1 &
daemon=$!
for _ in $(seq 1 100); do
  [[ -s "$port_file" ]] && break
  sleep 0.1
done
if [[ ! -s "$port_file" ]]; then
  fail "tensord did not start (see tensord.log)"
else
  address="127.0.0.1:$(cat "$port_file")"
  say "tensord on $address: $(grep -m1 -o 'CUDA:.*' "$results/tensord.log" || true)"
  if "$bin/tensorctl" --address "$address" devices >"$results/tensorctl-devices.txt" 2>&1; then
    cat "$results/tensorctl-devices.txt" >>"$summary"
    if [[ $have_gpu -eq 1 ]] && ! grep -q "cuda:0" "$results/tensorctl-devices.txt"; then
      fail "tensorctl devices does not list cuda:0"
    fi
  else
    fail "tensorctl devices (see tensorctl-devices.txt)"
  fi
  for example in quickstart seed_walkthrough matmul_devices logging_exercise \
                 linear_forward net_on_gpu train_regression \
                 "train_cifar_net --epochs 2 --train 4000 --test 500 --batch-size 8 --lr 0.01 --min-accuracy 60"; do
    prog=${example%% *}
    args=${example#"$prog"}
    [[ -x "$bin/$prog" ]] || continue
    # shellcheck disable=SC2086  # args are words
    if timeout "${EXAMPLE_TIMEOUT:-300}" "$bin/$prog" --address "$address" $args >"$results/$prog.log" 2>&1; then
      say "ok    $prog"
    else
      fail "$prog (see $prog.log)"
    fi
  done
  kill -TERM "$daemon"
  if wait "$daemon"; then
    say "ok    tensord stopped cleanly on SIGTERM"
  else
    fail "tensord exited $? on SIGTERM"
  fi
fi

# --- 4. Benchmark -----------------------------------------------------------------
say ""
say "== gpu_bench =="
if [[ -x "$bin/gpu_bench" ]]; then
  # shellcheck disable=SC2086  # flags are words
  if "$bin/gpu_bench" ${GPU_BENCH_FLAGS:-} >"$results/gpu_bench.json" 2>"$results/gpu_bench.txt"; then
    cat "$results/gpu_bench.txt" >>"$summary"
    say "$(cat "$results/gpu_bench.json")"
  else
    fail "gpu_bench (see gpu_bench.txt, gpu_bench.json)"
  fi
else
  fail "no gpu_bench in the bundle"
fi

say ""
if [[ $failures -eq 0 ]]; then
  say "RESULT: PASS ($tests_run test binaries) -- results in $results"
else
  say "RESULT: FAIL ($failures failure(s)) -- results in $results"
fi
[[ $failures -eq 0 ]]
