#!/usr/bin/env bash
# A long random campaign over the core and the async bulkhead, with fresh seeds: what CI
# runs with fixed seeds and fixed counts, run for longer and from seeds nobody ran
# before. Prints every seed it uses, and for a failure the command that replays it (for
# a property, rapidcheck's RC_PARAMS="reproduce=..." string).
#
# Usage: bash scripts/campaign.sh [rounds]        (default 1; each round takes new seeds)
#
# Stages, each on or off by its count (0 skips it):
#   MODEL_ITERATIONS=20000  cases per property of model_differential_test and
#                           model_metamorphic_test, all under one fresh seed per binary
#   SCHEDULES=100000        random schedules of window_schedule_test,
#                           asio_bulkhead_schedule_test and asio_hedge_schedule_test
#                           (per scenario), from a fresh seed
#   STRESS_REPEAT=20        runs of each stress test (tests/*_stress_test.cc,
#                           tests/asio/*_stress_test.cc, model_history_test),
#                           stopping at the first failure
#   STRESS_LOAD=1           run the stress tests beside two CPU-burning processes
#   FUZZ_SECONDS=0          > 0: the fuzz stage of scripts/test.sh for that long per harness
#   PRESET=release          the CMake preset to build and run (release, asan, tsan)
# The exit status is 0 only if every stage of every round passed.
set -uo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-1}
preset=${PRESET:-release}
model_iterations=${MODEL_ITERATIONS:-20000}
schedules=${SCHEDULES:-100000}
stress_repeat=${STRESS_REPEAT:-20}
stress_load=${STRESS_LOAD:-1}
fuzz_seconds=${FUZZ_SECONDS:-0}
build=build/$preset
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/bulwark-campaign.XXXXXX")

fresh_seed() { od -An -N8 -tu8 /dev/urandom | tr -d ' '; }

stress_tests=()
for f in tests/*_stress_test.cc tests/asio/*_stress_test.cc; do
  stress_tests+=("$(basename "$f" .cc)")
done
stress_tests+=(model_history_test)

echo "=== campaign: ${rounds} round(s), preset ${preset}, logs in ${log_dir}"
cmake --preset "$preset" >/dev/null || exit 1
cmake --build --preset "$preset" -j2 --target model_differential_test model_metamorphic_test \
  window_schedule_test asio_bulkhead_schedule_test asio_hedge_schedule_test "${stress_tests[@]}" || exit 1

failures=()
burners=()
stop_burners() {
  ((${#burners[@]})) && kill "${burners[@]}" 2>/dev/null
  burners=()
}
trap stop_burners EXIT

for ((round = 1; round <= rounds; round++)); do
  echo "=== round ${round}"
  if ((model_iterations > 0)); then
    for bin in model_differential_test model_metamorphic_test; do
      seed=$(fresh_seed)
      log=$log_dir/$bin.$round.log
      echo "--- ${bin}: seed ${seed}, ${model_iterations} cases per property"
      if BULWARK_MODEL_SEED=$seed BULWARK_MODEL_ITERATIONS=$model_iterations \
        "$build/tests/model/$bin" >"$log" 2>&1; then
        echo "    passed"
      else
        echo "    FAILED (log: ${log})"
        grep -E '^\[  FAILED  \] .*\(' "$log" | sed 's/^/    /'
        grep -E '^replay this case: ' "$log" | sed 's/^/    /'
        echo "    all of them again: BULWARK_MODEL_SEED=${seed}" \
          "BULWARK_MODEL_ITERATIONS=${model_iterations} ${build}/tests/model/${bin}"
        failures+=("${bin} seed ${seed}")
      fi
    done
  fi

  if ((schedules > 0)); then
    for bin in tests/window_schedule_test tests/asio/asio_bulkhead_schedule_test \
      tests/asio/asio_hedge_schedule_test; do
      name=$(basename "$bin")
      seed=$(fresh_seed | cut -c1-15)
      log=$log_dir/$name.$round.log
      echo "--- ${name}: ${schedules} random schedules from seed ${seed}"
      if BULWARK_SCHEDULE_SEED=$seed BULWARK_SCHEDULES=$schedules "$build/$bin" >"$log" 2>&1; then
        echo "    passed"
      else
        echo "    FAILED (log: ${log})"
        grep -E '^seed [0-9]+: |BULWARK_SCHEDULE_SEED=' "$log" | sed 's/^/    /'
        echo "    replay one: BULWARK_SCHEDULE_SEED=<that seed> BULWARK_SCHEDULES=1" \
          "${build}/${bin}; the log shows the schedule"
        failures+=("${name} seed ${seed}")
      fi
    done
  fi

  if ((stress_repeat > 0)); then
    if ((stress_load)); then
      for _ in 1 2; do
        (while :; do :; done) &
        burners+=($!)
      done
    fi
    regex="^($(IFS='|'; echo "${stress_tests[*]}"))\$"
    log=$log_dir/stress.$round.log
    echo "--- stress tests, each up to ${stress_repeat} times$( ((stress_load)) && echo ' beside two CPU burners')"
    if ctest --test-dir "$build" -R "$regex" --repeat "until-fail:${stress_repeat}" \
      --output-on-failure >"$log" 2>&1; then
      echo "    passed"
    else
      echo "    FAILED (log: ${log})"
      grep -E 'Failed|\*\*\*' "$log" | sed 's/^/    /' | head -20
      failures+=("stress round ${round}")
    fi
    stop_burners
  fi

  if ((fuzz_seconds > 0)); then
    echo "--- fuzz stage, ${fuzz_seconds} s per harness"
    if FUZZ_SECONDS=$fuzz_seconds bash scripts/test.sh fuzz; then
      echo "    passed"
    else
      failures+=("fuzz round ${round}")
    fi
  fi
done

if ((${#failures[@]})); then
  echo "=== campaign FAILED: ${failures[*]}"
  exit 1
fi
echo "=== campaign passed (${rounds} round(s)); logs in ${log_dir}"
