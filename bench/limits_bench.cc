// The rate limiter's admission and the throttle's healthy path, against the baselines of
// breaker_bench.cc (one atomic fetch_add, one clock read) measured in the same run.

#include <benchmark/benchmark.h>

#include <chrono>

#include "bulwark/rate_limiter.h"
#include "bulwark/throttle.h"

namespace {

using namespace std::chrono_literals;

// Admitted every time: a rate far above what one core can ask (T = 1 ns, a second of
// tolerance), so the benchmark measures admission, not refusal.
bulwark::RateLimiterConfig wide_open() {
  bulwark::RateLimiterConfig c;
  c.name = "bench";
  c.permits = 1'000'000'000;
  c.period = 1s;
  c.tolerance = 1s;
  return c;
}

void BM_RateLimiter_Admit(benchmark::State& state) {
  static bulwark::RateLimiter limiter(wide_open());
  for (auto _ : state) benchmark::DoNotOptimize(limiter.try_acquire().has_value());
}
BENCHMARK(BM_RateLimiter_Admit)->Threads(1)->Threads(2);

// The same admission on a clock that costs nothing to read (a ManualClock that never
// moves, with the bucket deep enough never to run dry): the CAS alone.
void BM_RateLimiter_Admit_ManualClock(benchmark::State& state) {
  static bulwark::ManualClock clock;
  bulwark::RateLimiterConfig c = wide_open();
  c.mode = bulwark::RateLimitMode::bursty;
  c.tolerance = bulwark::Nanos::zero();
  c.capacity = std::uint64_t{1} << 40;
  static bulwark::BasicRateLimiter<bulwark::ManualClock> limiter(c, clock);
  for (auto _ : state) benchmark::DoNotOptimize(limiter.try_acquire().has_value());
}
BENCHMARK(BM_RateLimiter_Admit_ManualClock)->Threads(1);

// A rejection: the bucket is empty and stays so (one permit a day).
void BM_RateLimiter_Refuse(benchmark::State& state) {
  static bulwark::RateLimiter limiter([] {
    bulwark::RateLimiterConfig c;
    c.name = "bench";
    c.permits = 1;
    c.period = 24h;
    return c;
  }());
  for (auto _ : state) benchmark::DoNotOptimize(limiter.try_acquire().has_value());
}
BENCHMARK(BM_RateLimiter_Refuse)->Threads(1);

// The throttle with a healthy dependency: try_acquire (coarse clock, 12 loads, p = 0)
// and record(true) (one CAS).
void BM_Throttle_Healthy(benchmark::State& state) {
  static bulwark::Throttle throttle(bulwark::ThrottleConfig{.name = "bench"});
  for (auto _ : state) {
    if (throttle.try_acquire()) throttle.record(true);
  }
}
BENCHMARK(BM_Throttle_Healthy)->Threads(1)->Threads(2);

}  // namespace
