// How much faster than real time the simulator runs the built-in incident (10 minutes
// of 400 req/s through both of its configurations, in virtual time). The goal is at
// least 10,000x; the `speedup` counter is simulated seconds per wall-clock second, and
// `requests_per_s` counts simulated requests (all configurations) per wall-clock second.
// /threads:1 runs the configurations one after another; /threads:2 side by side, as
// `bulwark simulate` does on a machine of two cores or more.
//
//   build/release/tools/lab/bench/bulwark_lab_bench --benchmark_filter=Simulate

#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "bulwark/lab/calibrate.h"
#include "bulwark/lab/config.h"
#include "bulwark/lab/replay.h"
#include "bulwark/lab/simulate.h"

namespace {

void BM_Simulate_DefaultIncident(benchmark::State& state) {
  const bulwark::lab::Scenario scenario = bulwark::lab::builtin_scenario();
  const bulwark::lab::SimulateOptions options{.threads = static_cast<unsigned>(state.range(0))};
  const double simulated = std::chrono::duration<double>(scenario.duration).count();
  std::uint64_t requests = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const bulwark::lab::SimulationResult r = bulwark::lab::simulate(scenario, options);
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
BENCHMARK(BM_Simulate_DefaultIncident)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

// Trace rows per wall-clock second through `bulwark replay` (one pass: each row checked
// and replayed) and through `bulwark calibrate` (both passes: the statistics and the
// three check replays), on 500,000 rows of the reviews service's normal traffic
// (400/s, lognormal latency around 120 ms, 2 % errors) held in memory.
//
//   build/release/tools/lab/bench/bulwark_lab_bench --benchmark_filter='Replay|Calibrate'

namespace trace_bench {

std::string reviews_trace(std::size_t rows) {
  std::uint64_t state = 2;
  const auto next = [&] {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  std::string csv = "t_ms,key,duration_ms,outcome\n";
  double t = 0;
  char line[128];
  for (std::size_t i = 0; i < rows; ++i) {
    t += -std::log1p(-next()) * 2.5;  // 400/s
    const double z = std::sqrt(-2 * std::log(1 - next())) * std::cos(6.283185307179586 * next());
    std::snprintf(line, sizeof line, "%.3f,reviews,%.3f,%s\n", t, 120 * std::exp(0.46 * z),
                  next() < 0.02 ? "failure" : "success");
    csv += line;
  }
  return csv;
}

const std::string& trace() {
  static const std::string csv = reviews_trace(500'000);
  return csv;
}

constexpr const char* kBreaker = R"([breaker]
kind = "time"
window.length = "5s"
minimum_calls = 100
failure_rate = 0.11
slow_call_duration = "510ms"
slow_call_rate = 0.05
count_in_flight_slow_calls = true
consecutive_failures = 5
open_duration = "30s"
half_open.fraction = 0.037
half_open.probes = 30
)";

void BM_Replay_Rows(benchmark::State& state) {
  const bulwark::lab::BreakerSpec spec = bulwark::lab::parse_breaker(kBreaker, "bench.toml");
  const std::string& csv = trace();
  for (auto _ : state) {
    const std::string out = bulwark::lab::replay_text(spec, csv);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["rows_per_s"] = benchmark::Counter(
      500'000.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Replay_Rows)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Calibrate_Rows(benchmark::State& state) {
  const std::string& csv = trace();
  for (auto _ : state) {
    const bulwark::lab::Calibration c = bulwark::lab::calibrate_text(csv, {});
    benchmark::DoNotOptimize(c.keys.data());
  }
  state.counters["rows_per_s"] = benchmark::Counter(
      500'000.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Calibrate_Rows)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace trace_bench
