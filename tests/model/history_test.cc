// Concurrent histories: several threads hammer one breaker (one of them moves the
// ManualClock, the others nudge it on when rejected), each logging what it did; afterwards the log
// and the breaker's events and snapshot must satisfy the contract's invariants:
//  - probes of one half-open round in flight never exceed half_open_max_calls;
//  - every transition is a legal from/to pair with a matching reason, each event starts
//    where the previous one ended, and generations strictly increase;
//  - a rejection's retry_after never exceeds the longest open period (or max wait);
//  - the snapshot's totals equal the sums of what the threads did;
//  - at rest, a CLOSED count window never holds rates over a threshold with the
//    minimum volume (no trip was lost to a race).
// Iterations are bounded so the test stays quick under TSan on a loaded machine.

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "../support/patience.h"
#include "adapter.h"

namespace bulwark::model {
namespace {

constexpr int kThreads = 4;
constexpr int kOpsPerThread = 40000;
constexpr std::uint32_t kMaxProbes = 2;
constexpr Ticks kOpen = 1'000'000;
constexpr Ticks kMaxOpen = 4'000'000;
constexpr Ticks kMaxWait = 3'000'000;

struct Totals {
  std::uint64_t successes = 0, failures = 0, ignored = 0, cancelled = 0, rejected = 0;
};

bool legal(const TransitionEvent& e) {
  using S = State;
  using R = TransitionReason;
  if (e.reason == R::manual) return e.from != e.to;
  switch (e.reason) {
    case R::consecutive_failures:
    case R::failure_rate:
    case R::slow_call_rate:
      return e.from == S::closed && e.to == S::open;
    case R::open_period_elapsed:
      return e.from == S::open && e.to == S::half_open;
    case R::probes_succeeded:
      return e.from == S::half_open && e.to == S::closed;
    case R::probe_failed:
      return e.from == S::half_open && e.to == S::open;
    default:
      return false;
  }
}

std::uint64_t next_random(std::uint64_t& x) {
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return x;
}

template <class B>
void hammer(Window w, bool with_manual, bool in_flight = false) {
  Config c;
  c.window = w;
  c.consecutive_failures = 4;
  if (w != Window::none) {
    c.failure_rate = 0.5;
    c.minimum_calls = 6;
    c.window_size = 10;
    c.window_length = 10'000'000, c.window_buckets = 5;
    if (in_flight) {
      c.slow_call_rate = 0.5;
      c.slow_call_duration = 1'000'000;
      c.count_in_flight_slow_calls = true;
    }
  }
  c.open_duration = kOpen;
  c.open_duration_multiplier = 2.0;
  c.max_open_duration = kMaxOpen;
  c.half_open_max_calls = kMaxProbes;
  c.half_open_successes = 3;
  c.half_open_max_wait = kMaxWait;
  c.flapping_period = 5'000'000;

  ManualClock clock;
  B breaker(to_breaker_config<B>(c, [] { return 0.5; }), clock);
  std::mutex mu;
  std::vector<TransitionEvent> events;
  std::atomic<std::size_t> event_count{0};
  breaker.policy().on_transition([&](const TransitionEvent& e) {
    std::lock_guard lock(mu);
    events.push_back(e);
    event_count.fetch_add(1);
  });
  // Each thread does kOpsPerThread operations, and goes on until the history has moved
  // the breaker through kEvents transitions, however the scheduler interleaved them.
  constexpr std::size_t kEvents = 10;
  test::Patience patience;

  // Probes in flight per half-open generation, as the threads hold them.
  constexpr std::size_t kGens = 1u << 19;
  std::vector<std::atomic<std::uint32_t>> probes(kGens);
  std::atomic<std::uint32_t> max_probes_seen{0};
  std::atomic<Ticks> max_retry_open{0}, max_retry_half_open{0};
  std::array<Totals, kThreads> totals{};

  std::atomic<int> ready{0};
  auto worker = [&](int id) {
    // Start together, so that the histories really overlap.
    ready.fetch_add(1);
    while (ready.load() < kThreads) std::this_thread::yield();
    std::uint64_t rng = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(id + 1);
    Totals& t = totals[static_cast<std::size_t>(id)];
    std::vector<typename B::Permit> held;
    for (int i = 0; i < kOpsPerThread || (event_count.load() <= kEvents && !patience.exhausted());
         ++i) {
      const std::uint64_t r = next_random(rng);
      if (id == 0 && r % 2 == 0) clock.advance(Nanos(static_cast<Ticks>(r % 1'000'000)));
      if (with_manual && id == 1 && r % 997 == 0) {
        breaker.reset();
        continue;
      }
      if (with_manual && id == 1 && r % 1499 == 0) {
        (void)breaker.transition_to(r % 2 ? State::forced_open : State::half_open);
        continue;
      }
      if (held.size() < 3 && r % 3 != 0) {
        auto p = breaker.try_acquire();
        if (!p) {
          ++t.rejected;
          // Move the clock on a little (thread 0 moves it most): waiting for thread 0
          // to be scheduled would make the run's length depend on the machine's load.
          if (id != 0) clock.advance(Nanos(static_cast<Ticks>(r % 20'000)));
          const Ticks ra = p.error().retry_after.count();
          auto& slot = p.error().reason == RejectReason::open          ? max_retry_open
                       : p.error().reason == RejectReason::forced_open ? max_retry_open
                                                                       : max_retry_half_open;
          if (p.error().reason != RejectReason::forced_open) {
            Ticks cur = slot.load();
            while (ra > cur && !slot.compare_exchange_weak(cur, ra)) {
            }
          }
          continue;
        }
        if (p->is_probe()) {
          const std::uint32_t n = probes[p->generation()].fetch_add(1) + 1;
          std::uint32_t cur = max_probes_seen.load();
          while (n > cur && !max_probes_seen.compare_exchange_weak(cur, n)) {
          }
        }
        held.push_back(std::move(*p));
        continue;
      }
      if (held.empty()) continue;
      const std::size_t k = static_cast<std::size_t>(r >> 8) % held.size();
      typename B::Permit p = std::move(held[k]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
      if (p.is_probe()) probes[p.generation()].fetch_sub(1);
      switch ((r >> 20) % 10) {
        case 0:
          ++t.ignored;
          p.ignore();
          break;
        case 1:
          ++t.cancelled;
          {
            auto dropped = std::move(p);  // destroyed unreported: cancelled
          }
          break;
        case 2:
        case 3:
        case 4:
          ++t.failures;
          p.record_failure();
          break;
        default:
          ++t.successes;
          p.record_success();
          break;
      }
    }
    for (auto& p : held) {
      if (p.is_probe()) probes[p.generation()].fetch_sub(1);
      ++t.successes;
      p.record_success();
    }
  };

  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) threads.emplace_back(worker, id);
  for (auto& th : threads) th.join();

  EXPECT_LE(max_probes_seen.load(), kMaxProbes);
  EXPECT_LE(max_retry_open.load(), kMaxOpen);
  EXPECT_LE(max_retry_half_open.load(), std::max(kMaxWait, kMaxOpen));

  ASSERT_GT(events.size(), kEvents) << "in 120 s the history hardly moved the breaker";
  ::testing::Test::RecordProperty("events", static_cast<int>(events.size()));
  if (std::getenv("BULWARK_HISTORY_VERBOSE")) std::printf("events %zu\n", events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TransitionEvent& e = events[i];
    EXPECT_TRUE(legal(e)) << "event " << i << ": " << to_string(e.from) << " -> " << to_string(e.to)
                          << " (" << to_string(e.reason) << ")";
    if (i > 0) {
      EXPECT_GT(e.generation, events[i - 1].generation) << "event " << i;
      // Silent transitions (a reset while CLOSED, a fresh half-open round) keep the
      // state, so each event starts where the previous one ended.
      EXPECT_EQ(e.from, events[i - 1].to) << "event " << i;
    }
  }

  Totals sum;
  for (const Totals& t : totals) {
    sum.successes += t.successes, sum.failures += t.failures, sum.ignored += t.ignored;
    sum.cancelled += t.cancelled, sum.rejected += t.rejected;
  }
  const BreakerSnapshot s = breaker.snapshot();
  EXPECT_EQ(s.successes, sum.successes);
  EXPECT_EQ(s.failures, sum.failures);
  EXPECT_EQ(s.ignored, sum.ignored);
  EXPECT_EQ(s.cancelled, sum.cancelled);
  EXPECT_EQ(s.rejected, sum.rejected);
  EXPECT_EQ(s.permitted, sum.successes + sum.failures + sum.ignored + sum.cancelled);
  if (std::getenv("BULWARK_HISTORY_VERBOSE")) {
    std::printf(
        "permitted %llu rejected %llu opens %llu\n", static_cast<unsigned long long>(s.permitted),
        static_cast<unsigned long long>(s.rejected), static_cast<unsigned long long>(s.opens));
  }
  EXPECT_GE(s.generation, events.back().generation) << "silent transitions only add to it";
  if (s.state == State::closed && s.window) {
    EXPECT_LE(s.window->failures, s.window->calls);
    if (w == Window::count) {
      EXPECT_LE(s.window->calls, c.window_size);
      if (s.failure_rate) {
        EXPECT_LT(*s.failure_rate, *c.failure_rate) << "a trip was lost";
      }
    }
  }
}

TEST(History, NoWindowBreakerUnderConcurrentTraffic) {
  hammer<NoWindowBreaker>(Window::none, false);
}
TEST(History, CountWindowBreakerUnderConcurrentTraffic) {
  hammer<CountBreaker>(Window::count, false);
}
TEST(History, TimeWindowBreakerUnderConcurrentTraffic) { hammer<TimeBreaker>(Window::time, false); }
TEST(History, CountWindowBreakerWithManualTransitionsUnderConcurrentTraffic) {
  hammer<CountBreaker>(Window::count, true);
}
TEST(History, TimeWindowBreakerCountingSlowCallsInFlightUnderConcurrentTraffic) {
  hammer<TimeBreaker>(Window::time, true, true);
}
TEST(History, NoWindowBreakerWithManualTransitionsUnderConcurrentTraffic) {
  hammer<NoWindowBreaker>(Window::none, true);
}
// A time window striped by thread: with kThreads threads on as many stripes, each
// records into buckets of its own and a judgement sums them all.
using StripedTimeBreaker = BasicCircuitBreaker<ManualClock, TimeWindow<10, kThreads>>;
TEST(History, StripedTimeWindowBreakerUnderConcurrentTraffic) {
  hammer<StripedTimeBreaker>(Window::time, false);
}
TEST(History, StripedTimeWindowBreakerWithManualTransitionsCountingSlowCallsInFlight) {
  hammer<StripedTimeBreaker>(Window::time, true, true);
}

}  // namespace
}  // namespace bulwark::model
