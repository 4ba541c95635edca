// The cost of the resilience pipeline on a call that succeeds first time, against
// the bare call in the same binary (and BM_Baseline_AtomicFetchAdd in
// breaker_bench.cc, the unit the goal is stated in: the whole pipeline — breaker,
// bulkhead, retry with a budget, fallback — should cost at most 15 of those).
//
//   build/release/bench/bulwark_bench
//   --benchmark_filter='Pipeline|RetryBudget|Bulkhead|DirectCall|AtomicFetchAdd'

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>

#include "bulwark/pipeline.h"

namespace {

using namespace std::chrono_literals;

using Result = bulwark::Expected<int, int>;

// The call: does nothing, but the compiler cannot know that.
Result noop_call(const bulwark::Context&) {
  int v = 1;
  benchmark::DoNotOptimize(v);
  return v;
}

void BM_Baseline_DirectCall(benchmark::State& state) {
  const bulwark::Context ctx;
  for (auto _ : state) {
    auto r = noop_call(ctx);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_Baseline_DirectCall);

// The composition machinery alone: a pipeline with no stage should cost what the
// direct call costs.
void BM_Pipeline_Empty(benchmark::State& state) {
  const auto p = bulwark::pipeline();
  const bulwark::Context ctx;
  for (auto _ : state) {
    auto r = p(ctx, noop_call);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_Pipeline_Empty);

struct Stack {
  explicit Stack(std::uint32_t bulkhead_stripes = 1)
      : bulkhead({.name = "bench", .max_concurrent = 64, .stripes = bulkhead_stripes}) {}
  bulwark::CircuitBreaker breaker{[] {
    bulwark::BreakerConfig c;  // field by field: designated initializers would track its growth
    c.name = "bench";
    c.consecutive_failures = 5;
    return c;
  }()};
  bulwark::Bulkhead bulkhead;
  bulwark::RetryBudget budget{{.name = "bench"}};
  bulwark::Retry retry{{.name = "bench", .max_attempts = 3}, &budget};
};

// Every stage around a no-op; `stack` is shared by every thread, as one dependency's
// policies are.
void run_noop_pipeline(benchmark::State& state, Stack& stack) {
  const auto p = bulwark::pipeline(bulwark::fallback(0), bulwark::breaker(stack.breaker),
                                   bulwark::bulkhead(stack.bulkhead), bulwark::retry(stack.retry));
  const bulwark::Context ctx;
  for (auto _ : state) {
    auto r = p(ctx, noop_call);
    benchmark::DoNotOptimize(r);
  }
}

void BM_Pipeline_NoOp(benchmark::State& state) {
  static Stack stack;
  run_noop_pipeline(state, stack);
}
BENCHMARK(BM_Pipeline_NoOp)->Threads(1)->Threads(2);

// The same with the bulkhead striped (BulkheadConfig::stripes): each thread takes and
// gives back its slot on its own stripe's cache line.
void BM_Pipeline_NoOp_StripedBulkhead(benchmark::State& state) {
  static Stack stack(2);
  run_noop_pipeline(state, stack);
}
BENCHMARK(BM_Pipeline_NoOp_StripedBulkhead)->Threads(1)->Threads(2);

// The same stages but the bulkhead: an unstriped bulkhead is a count of calls in flight
// shared by every thread (its admission is a CAS on it), so this is what scales.
void BM_Pipeline_NoOp_NoBulkhead(benchmark::State& state) {
  static Stack stack;
  const auto p = bulwark::pipeline(bulwark::fallback(0), bulwark::breaker(stack.breaker),
                                   bulwark::retry(stack.retry));
  const bulwark::Context ctx;
  for (auto _ : state) {
    auto r = p(ctx, noop_call);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_Pipeline_NoOp_NoBulkhead)->Threads(1)->Threads(2);

// The same with a per-attempt timeout and a request deadline (two precise clock reads).
void BM_Pipeline_NoOpWithDeadline(benchmark::State& state) {
  static Stack stack;
  const auto p = bulwark::pipeline(bulwark::fallback(0), bulwark::breaker(stack.breaker),
                                   bulwark::bulkhead(stack.bulkhead), bulwark::retry(stack.retry),
                                   bulwark::timeout(800ms));
  const bulwark::Context ctx(bulwark::SteadyClock{}, {},
                             bulwark::Deadline::after(bulwark::SteadyClock{}, 1h));
  for (auto _ : state) {
    auto r = p(ctx, noop_call);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_Pipeline_NoOpWithDeadline);

void BM_RetryBudget_Acquire(benchmark::State& state) {
  static bulwark::RetryBudget budget(
      {.name = "bench", .ratio = 1.0, .min_retries_per_second = 0, .max_tokens = 1e9});
  for (auto _ : state) {
    budget.deposit();
    auto ticket = budget.try_withdraw();
    if (ticket) ticket->commit();
    benchmark::DoNotOptimize(ticket);
  }
}
BENCHMARK(BM_RetryBudget_Acquire)->Threads(1)->Threads(2);

void BM_RetryBudget_Deposit(benchmark::State& state) {
  static bulwark::RetryBudget budget(
      {.name = "bench", .ratio = 0.2, .min_retries_per_second = 0, .max_tokens = 1e12});
  for (auto _ : state) budget.deposit();
}
BENCHMARK(BM_RetryBudget_Deposit)->Threads(1)->Threads(2);

void BM_Bulkhead_AcquireRelease(benchmark::State& state) {
  static bulwark::Bulkhead bulkhead({.name = "bench", .max_concurrent = 64});
  for (auto _ : state) {
    auto permit = bulkhead.try_acquire();
    benchmark::DoNotOptimize(permit);
  }
}
BENCHMARK(BM_Bulkhead_AcquireRelease)->Threads(1)->Threads(2);

// Two stripes: with two threads, each on its own.
void BM_Bulkhead_AcquireRelease_Striped(benchmark::State& state) {
  static bulwark::Bulkhead bulkhead({.name = "bench", .max_concurrent = 64, .stripes = 2});
  for (auto _ : state) {
    auto permit = bulkhead.try_acquire();
    benchmark::DoNotOptimize(permit);
  }
}
BENCHMARK(BM_Bulkhead_AcquireRelease_Striped)->Threads(1)->Threads(2);

}  // namespace
