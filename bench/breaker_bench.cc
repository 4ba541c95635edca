// The breaker's hot paths against baselines measured in the same run. Read the
// results as ratios (docs/performance.md); absolute figures depend on the machine.
//
//   build/release/bench/bulwark_bench --benchmark_filter='Baseline|Closed_Acquire|Open_|HalfOpen_'

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bulwark/circuit_breaker.h"

namespace {

using namespace std::chrono_literals;

// ---------------------------------------------------------------------------
// Baselines
// ---------------------------------------------------------------------------

// One uncontended (1 thread) or contended (2 threads) atomic add: the unit the
// goals are expressed in.
void BM_Baseline_AtomicFetchAdd(benchmark::State& state) {
  alignas(64) static std::atomic<std::uint64_t> counter{0};
  for (auto _ : state) counter.fetch_add(1, std::memory_order_relaxed);
  benchmark::DoNotOptimize(counter.load());
}
BENCHMARK(BM_Baseline_AtomicFetchAdd)->Threads(1)->Threads(2);

// Work of about the closed path's cost that shares nothing: each thread loads a word
// and adds one to counters with plain stores (as a ledger cell is counted), all on a
// line of its own stack. What two threads doing completely unshared work reach on this
// machine: the scale against which "2 threads / 1" of the shared paths is read (ideal
// 0.5; hardware threads of one core, or a busy host, give more).
void BM_Baseline_ShareNothing(benchmark::State& state) {
  struct alignas(64) Line {
    std::atomic<std::uint64_t> word{0};
    std::atomic<std::uint64_t> count[4]{};
  } own;
  for (auto _ : state) {
    benchmark::DoNotOptimize(own.word.load(std::memory_order_relaxed));
    for (auto& c : own.count) {
      c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      benchmark::ClobberMemory();
    }
  }
}
BENCHMARK(BM_Baseline_ShareNothing)
    ->DenseThreadRange(1, static_cast<int>(std::max(2u, std::thread::hardware_concurrency())));

void BM_Baseline_SteadyClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
}
BENCHMARK(BM_Baseline_SteadyClockNow)->Threads(1)->Threads(2);

void BM_Baseline_CoarseClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(bulwark::SteadyClock::coarse_now());
}
BENCHMARK(BM_Baseline_CoarseClockNow)->Threads(1)->Threads(2);

// A breaker built the way gobreaker is: a mutex, and a clock read in each of the two
// critical sections (beforeRequest / afterRequest), counting requests and outcomes.
class MutexBreaker {
 public:
  bool before_request() {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (state_ == 1 && now >= expiry_) state_ = 2;
    if (state_ == 1) return false;
    ++requests_;
    return true;
  }
  void after_request(bool success) {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (success) {
      ++successes_;
      consecutive_failures_ = 0;
    } else if (++consecutive_failures_ >= 5) {
      state_ = 1;
      expiry_ = now + 60s;
    }
  }

 private:
  std::mutex mu_;
  int state_ = 0;
  std::uint64_t requests_ = 0, successes_ = 0, consecutive_failures_ = 0;
  std::chrono::steady_clock::time_point expiry_{};
};

void BM_Baseline_MutexBreaker(benchmark::State& state) {
  static MutexBreaker breaker;
  for (auto _ : state) {
    if (breaker.before_request()) breaker.after_request(true);
  }
}
BENCHMARK(BM_Baseline_MutexBreaker)->Threads(1)->Threads(2);

// ---------------------------------------------------------------------------
// The breaker
// ---------------------------------------------------------------------------

void BM_Closed_AcquireRecordSuccess(benchmark::State& state) {
  static bulwark::CircuitBreaker breaker({.name = "closed"});
  for (auto _ : state) {
    auto permit = breaker.try_acquire();
    permit->record_success();
  }
}
BENCHMARK(BM_Closed_AcquireRecordSuccess)->Threads(1)->Threads(2);

// One breaker shared by 1, 2, ... as many threads as the machine has cores: the
// scaling curve (wall time per call at n threads / at 1; ideal 1/n).
void BM_Closed_SharedByEveryCore(benchmark::State& state) {
  static bulwark::CircuitBreaker breaker({.name = "every core"});
  for (auto _ : state) breaker.try_acquire()->record_success();
}
BENCHMARK(BM_Closed_SharedByEveryCore)
    ->DenseThreadRange(1, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));

bulwark::CircuitBreaker& open_breaker() {
  static bulwark::CircuitBreaker breaker(
      {.name = "open", .consecutive_failures = 1, .open_duration = 24h});
  static const bool tripped = [] {
    breaker.try_acquire()->record_failure();
    return true;
  }();
  (void)tripped;
  return breaker;
}

// A rejection while OPEN reads the clock once: that is how recovery is noticed
// without a timer. Compare with BM_Baseline_SteadyClockNow.
void BM_Open_Reject(benchmark::State& state) {
  auto& breaker = open_breaker();
  for (auto _ : state) benchmark::DoNotOptimize(breaker.try_acquire());
}
BENCHMARK(BM_Open_Reject)->Threads(1)->Threads(2);

// The same rejection with a clock behind a virtual interface, as a library with a
// runtime-injectable clock would read it; the template parameter avoids this.
struct ClockInterface {
  virtual ~ClockInterface() = default;
  virtual std::chrono::steady_clock::time_point now() const noexcept = 0;
};
struct SystemClockImpl final : ClockInterface {
  std::chrono::steady_clock::time_point now() const noexcept override {
    return std::chrono::steady_clock::now();
  }
};
struct VirtualClock {
  using duration = std::chrono::steady_clock::duration;
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr bool is_steady = true;
  time_point now() const noexcept { return impl->now(); }
  const ClockInterface* impl;
};

void BM_Open_Reject_VirtualClock(benchmark::State& state) {
  static const std::unique_ptr<ClockInterface> impl = std::make_unique<SystemClockImpl>();
  static const VirtualClock clock{impl.get()};
  static bulwark::BasicCircuitBreaker<VirtualClock> breaker(
      {.name = "open-virtual", .consecutive_failures = 1, .open_duration = 24h}, clock);
  static const bool tripped = [] {
    breaker.try_acquire()->record_failure();
    return true;
  }();
  (void)tripped;
  for (auto _ : state) benchmark::DoNotOptimize(breaker.try_acquire());
}
BENCHMARK(BM_Open_Reject_VirtualClock)->Threads(1)->Threads(2);

// The steady clock's ~30 ns read hides what a virtual call costs. With a clock that
// is one relaxed load (a ManualClock, as tests and the simulator use), the difference
// shows: the template parameter inlines the read, the interface pays an indirect call
// that the compiler cannot see through.
struct ManualClockImpl final : ClockInterface {
  std::chrono::steady_clock::time_point now() const noexcept override {
    return std::chrono::steady_clock::time_point(clock.now().time_since_epoch());
  }
  bulwark::ManualClock clock;
};

template <class Clock>
void open_reject_loop(benchmark::State& state, const Clock& clock) {
  static bulwark::BasicCircuitBreaker<Clock> breaker(
      {.name = "open-cheap", .consecutive_failures = 1, .open_duration = 24h}, clock);
  static const bool tripped = [] {
    breaker.try_acquire()->record_failure();
    return true;
  }();
  (void)tripped;
  for (auto _ : state) benchmark::DoNotOptimize(breaker.try_acquire());
}

void BM_Open_Reject_ManualClock(benchmark::State& state) {
  static const bulwark::ManualClock clock;
  open_reject_loop(state, clock);
}
BENCHMARK(BM_Open_Reject_ManualClock);

void BM_Open_Reject_ManualClock_Virtual(benchmark::State& state) {
  static const std::unique_ptr<ClockInterface> impl = std::make_unique<ManualClockImpl>();
  static const VirtualClock clock{impl.get()};
  open_reject_loop(state, clock);
}
BENCHMARK(BM_Open_Reject_ManualClock_Virtual);

// HALF_OPEN with its only probe slot held: every other request is rejected. With the
// default half_open_max_wait this reads the clock (to notice a leaked probe).
void BM_HalfOpen_Reject(benchmark::State& state) {
  static bulwark::CircuitBreaker breaker({.name = "half-open",
                                          .consecutive_failures = 1,
                                          .open_duration = 1ns,
                                          .half_open = {.max_wait = 24h}});
  static const auto probe = [] {
    breaker.try_acquire()->record_failure();
    while (breaker.state() != bulwark::State::half_open) {
      if (auto p = breaker.try_acquire())
        return std::make_unique<bulwark::CircuitBreaker::Permit>(std::move(*p));
    }
    return std::unique_ptr<bulwark::CircuitBreaker::Permit>();
  }();
  (void)probe;
  for (auto _ : state) benchmark::DoNotOptimize(breaker.try_acquire());
}
BENCHMARK(BM_HalfOpen_Reject)->Threads(1)->Threads(2);

// ---------------------------------------------------------------------------
// Sliding windows (rate rules)
// ---------------------------------------------------------------------------

// What measuring one call's duration costs: two readings of the clock the breaker
// uses for durations (the coarse one), and a subtraction.
void BM_Baseline_MeasureDuration(benchmark::State& state) {
  for (auto _ : state) {
    const auto start = bulwark::SteadyClock::coarse_now();
    benchmark::ClobberMemory();
    benchmark::DoNotOptimize(bulwark::SteadyClock::coarse_now() - start);
  }
}
BENCHMARK(BM_Baseline_MeasureDuration)->Threads(1)->Threads(2);

void BM_Closed_CountWindow(benchmark::State& state) {
  static bulwark::CountWindowBreaker breaker(
      {.name = "count", .window = {.size = 100}, .failure_rate = 0.5});
  for (auto _ : state) breaker.try_acquire()->record_success();
}
BENCHMARK(BM_Closed_CountWindow)->Threads(1)->Threads(2);

// A failure makes the breaker read its window (is a rate over its threshold now?).
// With running totals that read costs the same for 100 calls as for 65,535: the
// ratio of the two sizes is the goal (about 1; a window that rescans its ring on every
// failure would cost hundreds of times more at the larger size).
void BM_CountWindow_Failures(benchmark::State& state) {
  static std::vector<std::unique_ptr<bulwark::CountWindowBreaker>> breakers;
  const auto size = static_cast<std::uint32_t>(state.range(0));
  auto b = std::make_unique<bulwark::CountWindowBreaker>(
      bulwark::CountWindowConfig{.name = "count-failures",
                                 .window = {.size = size},
                                 .minimum_calls = 1,
                                 .failure_rate = 0.99});
  for (std::uint32_t i = 0; i < size; ++i) b->try_acquire()->record_success();  // fill it
  bool fail = false;
  for (auto _ : state) {
    b->try_acquire()->record(fail ? bulwark::Outcome::failure : bulwark::Outcome::success);
    fail = !fail;  // half of the calls fail: under the threshold, every failure evaluates
  }
  breakers.push_back(std::move(b));
}
BENCHMARK(BM_CountWindow_Failures)->Arg(100)->Arg(65535);

void BM_Closed_TimeWindow(benchmark::State& state) {
  static bulwark::TimeWindowBreaker breaker(
      {.name = "time", .window = {.length = 10s}, .failure_rate = 0.5});
  for (auto _ : state) breaker.try_acquire()->record_success();
}
BENCHMARK(BM_Closed_TimeWindow)->Threads(1)->Threads(2);

// The same with the buckets striped by thread (4 stripes): two threads write no common line.
void BM_Closed_TimeWindow_Striped(benchmark::State& state) {
  static bulwark::StripedTimeWindowBreaker<4> breaker(
      {.name = "time-striped", .window = {.length = 10s}, .failure_rate = 0.5});
  for (auto _ : state) breaker.try_acquire()->record_success();
}
BENCHMARK(BM_Closed_TimeWindow_Striped)->Threads(1)->Threads(2);

// The breaker measures each call's duration itself (no duration passed to record) to
// judge slowness.
void BM_Closed_TimeWindow_SlowTracking(benchmark::State& state) {
  static bulwark::TimeWindowBreaker breaker({.name = "time-slow",
                                             .window = {.length = 10s},
                                             .failure_rate = 0.5,
                                             .slow_call_rate = 0.5,
                                             .slow_call_duration = 1s,
                                             .count_in_flight_slow_calls = false});
  for (auto _ : state) breaker.try_acquire()->record_success();
}
BENCHMARK(BM_Closed_TimeWindow_SlowTracking)->Threads(1)->Threads(2);

// ...and also counts calls in flight, so that slow ones count before they end.
void BM_Closed_TimeWindow_SlowTracking_InFlight(benchmark::State& state) {
  static bulwark::TimeWindowBreaker breaker({.name = "time-slow-in-flight",
                                             .window = {.length = 10s},
                                             .failure_rate = 0.5,
                                             .slow_call_rate = 0.5,
                                             .slow_call_duration = 1s,
                                             .count_in_flight_slow_calls = true});
  for (auto _ : state) breaker.try_acquire()->record_success();
}
BENCHMARK(BM_Closed_TimeWindow_SlowTracking_InFlight)->Threads(1)->Threads(2);

}  // namespace
