// The adaptive limit's admission and completion against the fixed bulkhead's
// acquire+release (BM_Bulkhead_AcquireRelease in pipeline_bench.cc), in the same binary.
// bench/ratios.py states the goal: at most 2x.
//
//   build/release/bench/bulwark_bench --benchmark_filter='AdaptiveLimit|Bulkhead_AcquireRelease'

#include <benchmark/benchmark.h>

#include <chrono>

#include "bulwark/adaptive_limit.h"

namespace {

using namespace std::chrono_literals;

bulwark::AdaptiveLimitConfig bench_config(bulwark::AdaptiveAlgorithm a) {
  bulwark::AdaptiveLimitConfig c;
  c.name = "bench";
  c.algorithm = a;
  c.max_limit = 1000;
  c.initial_limit = 64;
  return c;
}

// try_acquire() and complete(): two steady-clock reads (admission and completion), a
// window folded every 10 calls (window_samples' default).
void BM_AdaptiveLimit_AcquireComplete(benchmark::State& state) {
  static bulwark::AdaptiveLimit limit(bench_config(bulwark::AdaptiveAlgorithm::gradient2));
  for (auto _ : state) {
    auto p = limit.try_acquire();
    benchmark::DoNotOptimize(p);
    p->complete();
  }
}
BENCHMARK(BM_AdaptiveLimit_AcquireComplete)->Threads(1)->Threads(2);

// The same with the round trip given by the caller (who timed the call already): the
// completion reads no clock.
void BM_AdaptiveLimit_AcquireCompleteGiven(benchmark::State& state) {
  static bulwark::AdaptiveLimit limit(bench_config(bulwark::AdaptiveAlgorithm::gradient2));
  for (auto _ : state) {
    auto p = limit.try_acquire();
    benchmark::DoNotOptimize(p);
    p->complete(1ms);
  }
}
BENCHMARK(BM_AdaptiveLimit_AcquireCompleteGiven)->Threads(1);

// The same with coarse_clock: two coarse clock reads.
void BM_AdaptiveLimit_AcquireComplete_Coarse(benchmark::State& state) {
  static bulwark::AdaptiveLimit limit([] {
    auto c = bench_config(bulwark::AdaptiveAlgorithm::gradient2);
    c.coarse_clock = true;
    return c;
  }());
  for (auto _ : state) {
    auto p = limit.try_acquire();
    benchmark::DoNotOptimize(p);
    p->complete();
  }
}
BENCHMARK(BM_AdaptiveLimit_AcquireComplete_Coarse)->Threads(1);

// A permit dropped unsettled (cancelled): admission and the in-flight subtract only.
void BM_AdaptiveLimit_AcquireCancel(benchmark::State& state) {
  static bulwark::AdaptiveLimit limit(bench_config(bulwark::AdaptiveAlgorithm::aimd));
  for (auto _ : state) {
    auto p = limit.try_acquire();
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_AdaptiveLimit_AcquireCancel)->Threads(1);

}  // namespace
