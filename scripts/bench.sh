#!/usr/bin/env bash
# Builds the release preset and runs the benchmarks, printing each goal as a ratio of
# two benchmarks measured in the same run (medians of 5 repetitions).
# Usage: bash scripts/bench.sh [benchmark filter regex]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target bulwark_bench
out=$(mktemp)
build/release/bench/bulwark_bench --benchmark_filter="${1:-.}" --benchmark_repetitions=5 \
  --benchmark_min_time=0.2 --benchmark_format=json >"$out"
python3 bench/ratios.py "$out"
