#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test: the release build (unit tests,
# packaging consumers, tools), the same tests under ASan+UBSan and TSan, then the fuzz
# stage.
#
# Usage: bash scripts/test.sh [stage...]   (default: release asan tsan fuzz)
#   release, asan, tsan   a CMake preset: configure, build, ctest (each replays the
#                         committed fuzz corpora and regression inputs too)
#   fuzz                  the libFuzzer stage: builds the `fuzz` preset (clang-14,
#                         ASan+UBSan+libFuzzer) and runs every harness in tests/fuzz/ for
#                         FUZZ_SECONDS (default 60) each, FUZZ_JOBS (default 2) at a time,
#                         from a temporary copy of its corpus, so nothing in the tree
#                         changes. A crash, a leak, a timeout (FUZZ_TIMEOUT, default 10 s
#                         per input) or running out of memory fails the run, and the input
#                         that did it is kept and its path printed.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

# The tests that start their own servers (redis-server, ...) fail instead of skipping
# when one is missing: this script installed them.
export BULWARK_REQUIRE_SERVERS=1

stages=("$@")
((${#stages[@]})) || stages=(release asan tsan fuzz)
jobs=$(nproc)

fuzz_stage() {
  local seconds=${FUZZ_SECONDS:-60} parallel=${FUZZ_JOBS:-2} timeout=${FUZZ_TIMEOUT:-10}
  local t0=$SECONDS
  echo "=== fuzz: configure and build (clang-14)"
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$jobs"
  local t1=$SECONDS
  local work
  work=$(mktemp -d "${TMPDIR:-/tmp}/bulwark-fuzz.XXXXXX")
  local harnesses=()
  for dir in tests/fuzz/*/; do
    [[ -f "$dir/fuzz.cc" ]] && harnesses+=("$(basename "$dir")")
  done
  echo "=== fuzz: ${harnesses[*]}, ${seconds} s each, ${parallel} at a time (work dir ${work})"
  run_one() {  # name: exit status of the fuzzer
    local name=$1 bin="build/fuzz/tests/fuzz/$1/fuzz_$1"
    mkdir -p "$work/$name/corpus" "$work/$name/artifacts"
    cp tests/fuzz/"$name"/corpus/* tests/fuzz/"$name"/regressions/* "$work/$name/corpus/" 2>/dev/null || true
    local dict=()
    [[ -f tests/fuzz/$name/fuzz.dict ]] && dict=(-dict="tests/fuzz/$name/fuzz.dict")
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
      "$bin" "${dict[@]}" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$work/$name/artifacts/" \
      "$work/$name/corpus" >"$work/$name/log" 2>&1
  }
  local failed=() pids=() names=()
  for name in "${harnesses[@]}"; do
    run_one "$name" &
    pids+=($!) names+=("$name")
    if ((${#pids[@]} >= parallel)); then
      wait "${pids[0]}" || failed+=("${names[0]}")
      pids=("${pids[@]:1}") names=("${names[@]:1}")
    fi
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed+=("${names[$i]}")
  done
  for name in "${harnesses[@]}"; do
    local execs
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$name/log" | grep -o '[0-9]*$' || echo "?")
    echo "    ${name}: ${execs} inputs run"
  done
  if ((${#failed[@]})); then
    for name in "${failed[@]}"; do
      echo "=== fuzz: ${name} FAILED; the end of its log:"
      tail -n 40 "$work/$name/log"
      for input in "$work/$name"/artifacts/*; do
        [[ -e "$input" ]] && echo "=== fuzz: ${name}: the input that did it: ${input}"
      done
    done
    echo "=== fuzz: reproduce with build/fuzz/tests/fuzz/<name>/fuzz_<name> <input>;" \
      "keep the input as tests/fuzz/<name>/regressions/<what-it-was> (docs/testing.md)"
    return 1
  fi
  rm -rf "$work"
  echo "=== fuzz: built in $((t1 - t0)) s, fuzzed in $((SECONDS - t1)) s"
}

start=$SECONDS
for stage in "${stages[@]}"; do
  if [[ $stage == fuzz ]]; then
    fuzz_stage
    continue
  fi
  t0=$SECONDS
  echo "=== ${stage}: configure and build"
  cmake --preset "$stage" >/dev/null
  cmake --build --preset "$stage" -j "$jobs"
  t1=$SECONDS
  echo "=== ${stage}: test"
  ctest --preset "$stage" -j "$jobs"
  echo "=== ${stage}: built in $((t1 - t0)) s, tested in $((SECONDS - t1)) s"
done
echo "=== all tests passed (${stages[*]}) in $((SECONDS - start)) s"
