#!/usr/bin/env bash
# Builds the release preset and runs the benchmarks: every goal is printed as a ratio
# of two figures measured in the same run (medians of 10 repetitions, run in random
# order so that neither position nor warm-up favours one benchmark), then the
# simulator's speed-up over real time. docs/performance.md quotes this output.
# Usage: bash scripts/bench.sh [benchmark filter regex]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target bulwark_bench bulwark_lab_bench
out=$(mktemp)
build/release/bench/bulwark_bench --benchmark_filter="${1:-.}" --benchmark_repetitions=10 \
  --benchmark_enable_random_interleaving=true --benchmark_min_time=0.1 --benchmark_format=json >"$out"
python3 bench/ratios.py "$out"
echo
build/release/tools/lab/bench/bulwark_lab_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
