#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test: the release build (unit tests,
# packaging consumers, tools) and the same tests under ASan+UBSan and TSan.
# Usage: bash scripts/test.sh [preset...]   (default: release asan tsan)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

presets=("$@")
((${#presets[@]})) || presets=(release asan tsan)
jobs=$(nproc)

start=$SECONDS
for preset in "${presets[@]}"; do
  t0=$SECONDS
  echo "=== ${preset}: configure and build"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  t1=$SECONDS
  echo "=== ${preset}: test"
  ctest --preset "$preset" -j "$jobs"
  echo "=== ${preset}: built in $((t1 - t0)) s, tested in $((SECONDS - t1)) s"
done
echo "=== all tests passed (${presets[*]}) in $((SECONDS - start)) s"
