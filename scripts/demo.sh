#!/usr/bin/env bash
# Installs dependencies, builds the release preset, and runs the main job: bulwark simulate,
# which replays the hotel-reviews incident in virtual time, before vs after its fixes.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake --preset release >/dev/null
# Only what the job runs: the CLI and the libraries it links (scripts/test.sh builds the rest).
cmake --build --preset release -j "$(nproc)" --target bulwark
exec build/release/tools/bulwark/bulwark simulate "$@"
