#!/usr/bin/env bash
# Builds the release preset and runs the benchmarks: every goal is printed as a ratio
# of two figures measured in the same run (medians of 10 repetitions, run in random
# order so that neither position nor warm-up favours one benchmark), then the
# simulator's speed-up over real time. The async pipeline's benchmarks
# (bench/asio) run the same way, as a second binary. docs/performance.md quotes this output.
# Usage: bash scripts/bench.sh [benchmark filter regex]
#   BULWARK_BUILD_DIR=<dir>  measure the benchmarks of an existing release build (its
#                            bench/ and tools/lab/bench/ binaries) instead of building
#                            the release preset here: nothing is installed or rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BULWARK_BUILD_DIR:-}
if [[ -z "$build" ]]; then
  bash scripts/install-deps.sh
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(nproc)" --target bulwark_bench bulwark_lab_bench bulwark_asio_bench \
    bulwark_asio_bench_frames
  build=build/release
elif [[ ! -x "$build/bench/bulwark_bench" ]]; then
  echo "bench.sh: $build/bench/bulwark_bench not found: BULWARK_BUILD_DIR must be a release build" \
    "with the benchmarks built (cmake --build <dir> --target bulwark_bench bulwark_asio_bench bulwark_lab_bench)" >&2
  exit 2
fi
out=$(mktemp)
# Each binary is skipped when the filter names none of its benchmarks.
matches() { [[ -n "$("$1" --benchmark_list_tests --benchmark_filter="${2:-.}" 2>/dev/null)" ]]; }
if matches "$build/bench/bulwark_bench" "${1:-.}"; then
  "$build/bench/bulwark_bench" --benchmark_filter="${1:-.}" --benchmark_repetitions=10 \
    --benchmark_enable_random_interleaving=true --benchmark_min_time=0.1 --benchmark_format=json >"$out"
  python3 bench/ratios.py "$out"
  echo
fi
# The async pipeline (bulwark::asio): a binary of its own, so bulwark_bench needs no Asio.
asio=$build/bench/asio/bulwark_asio_bench
if matches "$asio" "${1:-.}"; then
  "$asio" --benchmark_filter="${1:-.}" --benchmark_repetitions=10 \
    --benchmark_enable_random_interleaving=true --benchmark_min_time=0.1 \
    --benchmark_format=json >"$out"
  python3 bench/ratios.py "$out"
  echo "coroutine frames per call (Asio's frame cache off; timings not comparable):"
  "${asio}_frames" --benchmark_filter="${1:-.}" --benchmark_min_time=0.05 2>/dev/null |
    grep -o '^BM_[A-Za-z_]*\|frames_per_call=[0-9.]*' | paste - -
fi
echo
"$build/tools/lab/bench/bulwark_lab_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
