// How much faster than real time the simulator runs the built-in incident (10 minutes
// of 400 req/s through both of its configurations, in virtual time). The goal is at
// least 1,000x; the `speedup` counter is simulated seconds per wall-clock second, and
// `requests_per_s` counts simulated requests (all configurations) per wall-clock second.
//
//   build/release/tools/lab/bench/bulwark_lab_bench --benchmark_filter=Simulate

#include <benchmark/benchmark.h>

#include <chrono>

#include "bulwark/lab/config.h"
#include "bulwark/lab/simulate.h"

namespace {

void BM_Simulate_DefaultIncident(benchmark::State& state) {
  const bulwark::lab::Scenario scenario = bulwark::lab::builtin_scenario();
  const double simulated = std::chrono::duration<double>(scenario.duration).count();
  std::uint64_t requests = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const bulwark::lab::SimulationResult r = bulwark::lab::simulate(scenario);
    benchmark::DoNotOptimize(r.configurations.data());
    for (const auto& c : r.configurations) requests += c.requests;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Simulated time over wall-clock time, for the whole scenario (every configuration).
  state.counters["speedup"] = simulated * static_cast<double>(state.iterations()) / wall;
  state.counters["requests_per_s"] =
      benchmark::Counter(static_cast<double>(requests), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Simulate_DefaultIncident)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
