// The load shedder's admission + release against a fixed bulkhead's acquire + release,
// in the same run (bench/ratios.py reads the ratio):
//
//   bulwark_bench --benchmark_filter='LoadShedder|Bulkhead_AcquireRelease|ClockNow'
//
// The shedder's fast path also reads the clock twice (the permit's start, and on
// release for the service-time EWMA and the LimitSource's sample); the bulkhead reads
// none. BM_LoadShedder_Admit_FixedClock isolates that by using a stateless clock whose
// reading is a constant.

#include <benchmark/benchmark.h>

#include <chrono>

#include "bulwark/bulkhead.h"
#include "bulwark/load_shedder.h"

namespace {

void BM_LoadShedder_AdmitRelease(benchmark::State& state) {
  static bulwark::LoadShedder shedder({.name = "bench"}, bulwark::FixedLimit(64));
  for (auto _ : state) {
    auto permit = shedder.try_acquire(bulwark::Priority::normal);
    benchmark::DoNotOptimize(permit);
  }
}
BENCHMARK(BM_LoadShedder_AdmitRelease)->Threads(1)->Threads(2);

// Permits timed with CLOCK_MONOTONIC_COARSE (LoadShedderConfig::coarse_timing).
void BM_LoadShedder_AdmitRelease_CoarseTiming(benchmark::State& state) {
  static bulwark::LoadShedder shedder({.name = "bench", .coarse_timing = true},
                                      bulwark::FixedLimit(64));
  for (auto _ : state) {
    auto permit = shedder.try_acquire(bulwark::Priority::normal);
    benchmark::DoNotOptimize(permit);
  }
}
BENCHMARK(BM_LoadShedder_AdmitRelease_CoarseTiming)->Threads(1)->Threads(2);

// A clock that costs nothing to read: the shedder's own work, without clock reads.
struct ConstantClock {
  using duration = bulwark::Nanos;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<ConstantClock, bulwark::Nanos>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept { return time_point(bulwark::Nanos(1)); }
};

void BM_LoadShedder_AdmitRelease_ConstantClock(benchmark::State& state) {
  static bulwark::BasicLoadShedder<bulwark::FixedLimit, ConstantClock> shedder(
      {.name = "bench"}, bulwark::FixedLimit(64));
  for (auto _ : state) {
    auto permit = shedder.try_acquire(bulwark::Priority::normal);
    benchmark::DoNotOptimize(permit);
  }
}
BENCHMARK(BM_LoadShedder_AdmitRelease_ConstantClock)->Threads(1)->Threads(2);

}  // namespace
