#!/usr/bin/env bash
# Installs dependencies, builds the release preset, and runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
exec build/release/examples/trip_and_recover
