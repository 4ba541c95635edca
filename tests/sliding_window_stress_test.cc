// Threads record into one breaker's window while the clock moves; at the end the
// window's counts equal what the threads recorded, exactly. Run under TSan in CI.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "bulwark/circuit_breaker.h"
#include "bulwark/detail/thread_slot.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kPerThread = 4'000;
#else
constexpr int kPerThread = 15'000;
#endif
constexpr int kThreads = 4;

struct Tally {
  std::uint64_t calls = 0, failures = 0, slow_successes = 0, slow_failures = 0;
};

// Rules that never fire, so the breaker stays CLOSED and the window keeps everything.
template <class Config>
Config never_trips() {
  Config c{.minimum_calls = 1'000'000,
           .failure_rate = 1.0,
           .slow_call_rate = 1.0,
           .slow_call_duration = 10ms,
           .count_in_flight_slow_calls = true};
  if constexpr (std::is_same_v<Config, CountWindowConfig>) {
    c.window.size = 65'535;
  } else {
    c.window = {.length = 1h, .buckets = 10};
  }
  return c;
}

// Every thread takes its thread index (a striped window's stripe) before any of them
// records: live at once, they hold different indices, so 4 stripes give each its own.
void take_index_and_wait(std::atomic<int>& ready) {
  (void)detail::thread_slot();
  ready.fetch_add(1);
  while (ready.load() < kThreads) std::this_thread::yield();
}

// Each thread records random outcomes with reported durations; one of them also moves
// the clock forward (within the window, so every call stays countable), making the
// others race with bucket rotation. Some permits are held across other calls, some
// are cancelled or ignored (those count nowhere).
template <class Breaker>
Tally hammer(ManualClock& clock, Breaker& breaker, bool move_clock) {
  std::vector<Tally> tallies(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&, id] {
      take_index_and_wait(ready);
      std::mt19937 rng(99 + id);
      std::uniform_int_distribution<int> pick(0, 99);
      Tally& t = tallies[id];
      std::vector<typename Breaker::Permit> held;
      for (int i = 0; i < kPerThread; ++i) {
        if (move_clock && id == 0 && i % 50 == 0) clock.advance(9s);  // 1,5 min per 1000 calls
        auto p = breaker.try_acquire();
        ASSERT_TRUE(p);
        held.push_back(std::move(*p));
        if (held.size() < 3 && pick(rng) < 50) continue;
        auto permit = std::move(held.back());
        held.pop_back();
        const int r = pick(rng);
        const bool slow = pick(rng) < 20;
        const Nanos took = slow ? 50ms : 1ms;
        if (r < 60) {
          permit.record_success(took);
          ++t.calls, t.slow_successes += slow;
        } else if (r < 90) {
          permit.record_failure(took);
          ++t.calls, ++t.failures, t.slow_failures += slow;
        } else if (r < 95) {
          permit.ignore();
        }  // else: cancelled when it goes out of scope
      }
      for (auto& permit : held) {
        permit.record_success(1ms);
        ++t.calls;
      }
    });
  }
  for (auto& th : threads) th.join();
  Tally sum;
  for (const Tally& t : tallies) {
    sum.calls += t.calls, sum.failures += t.failures;
    sum.slow_successes += t.slow_successes, sum.slow_failures += t.slow_failures;
  }
  return sum;
}

template <class Breaker>
void expect_window_equals(const Breaker& breaker, const Tally& expected) {
  const BreakerSnapshot s = breaker.snapshot();
  ASSERT_EQ(s.state, State::closed);
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->calls, expected.calls);
  EXPECT_EQ(s.window->failures, expected.failures);
  EXPECT_EQ(s.window->slow_successes, expected.slow_successes);
  EXPECT_EQ(s.window->slow_failures, expected.slow_failures);
  EXPECT_EQ(s.window->in_flight_slow, 0u) << "every admitted call has resolved";
  EXPECT_EQ(s.successes + s.failures, expected.calls);
}

// The time-window tests run for one stripe and for striped windows: 4 stripes (each of
// the 4 threads has one of its own) and 3 (two threads share one).
template <class Window>
class TimeWindowStress : public ::testing::Test {
 protected:
  using Breaker = BasicCircuitBreaker<ManualClock, Window>;
};
using TimeWindows = ::testing::Types<TimeWindow<10>, TimeWindow<10, 4>, TimeWindow<10, 3>>;
TYPED_TEST_SUITE(TimeWindowStress, TimeWindows);

TYPED_TEST(TimeWindowStress, CountsAddUpWhileBucketsRotate) {
  ManualClock clock;
  typename TestFixture::Breaker breaker(never_trips<TimeWindowConfig>(), clock);
  const Tally expected = hammer(clock, breaker, /*move_clock=*/true);
  EXPECT_GE(now_ticks(clock), Nanos(12min).count()) << "the run should span several buckets";
  EXPECT_LT(now_ticks(clock), Nanos(1h).count()) << "and stay inside the window";
  expect_window_equals(breaker, expected);
}

TEST(WindowStress, CountWindowCountsAddUp) {
  ManualClock clock;
  BasicCircuitBreaker<ManualClock, CountWindow> breaker(never_trips<CountWindowConfig>(), clock);
  const Tally expected = hammer(clock, breaker, /*move_clock=*/false);
  ASSERT_LE(expected.calls, 65'535u) << "the ring must hold every call for an exact comparison";
  expect_window_equals(breaker, expected);
}

// Maximum contention on one bucket (and the count window's cursor): tight loops, no
// other work between calls. Lost updates would show as a short count.
template <class Breaker>
void tight_loops(ManualClock& clock, Breaker& breaker) {
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&, id] {
      take_index_and_wait(ready);
      for (int i = 0; i < kPerThread; ++i) {
        auto p = breaker.try_acquire();
        if ((i + id) % 3 == 0) {
          p->record_failure(1ms);
        } else {
          p->record_success(i % 5 == 0 ? 20ms : 1ms);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  (void)clock;
  const BreakerSnapshot s = breaker.snapshot();
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->calls, static_cast<std::uint64_t>(kThreads) * kPerThread);
  std::uint64_t failures = 0, slow = 0;
  for (int id = 0; id < kThreads; ++id) {
    for (int i = 0; i < kPerThread; ++i) {
      if ((i + id) % 3 == 0) {
        ++failures;
      } else if (i % 5 == 0) {
        ++slow;
      }
    }
  }
  EXPECT_EQ(s.window->failures, failures);
  EXPECT_EQ(s.window->slow_successes, slow);
}

TYPED_TEST(TimeWindowStress, TightLoops) {
  ManualClock clock;
  typename TestFixture::Breaker breaker(never_trips<TimeWindowConfig>(), clock);
  tight_loops(clock, breaker);
}

// The same contention while another thread moves the clock through the buckets (but
// stays inside the window, so every call still counts): rotation and clearing race the
// bucket updates, and nothing may be lost or counted twice.
TYPED_TEST(TimeWindowStress, TightLoopsWhileBucketsRotate) {
  ManualClock clock;
  typename TestFixture::Breaker breaker(never_trips<TimeWindowConfig>(), clock);
  std::atomic<bool> started{false}, done{false};
  std::thread mover([&] {
    for (int step = 0; step < 9; ++step) {  // one 6-minute bucket per step: 54 min of a 1 h window
      clock.advance(6min);
      started.store(true);
      if (done.load()) break;
      std::this_thread::yield();
    }
  });
  while (!started.load()) std::this_thread::yield();
  tight_loops(clock, breaker);
  done.store(true);
  mover.join();
}

TEST(WindowStress, CountWindowTightLoops) {
  ManualClock clock;
  BasicCircuitBreaker<ManualClock, CountWindow> breaker(never_trips<CountWindowConfig>(), clock);
  tight_loops(clock, breaker);
}

// The window wraps many times: nothing is exact any more, but nothing may go wrong:
// no count above what was recorded, no failures above calls, no torn state.
TYPED_TEST(TimeWindowStress, SurvivesWrappingUnderLoad) {
  ManualClock clock;
  TimeWindowConfig config = never_trips<TimeWindowConfig>();
  config.window.length = 10s;
  typename TestFixture::Breaker breaker(config, clock);
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::thread watcher([&] {
    while (!done.load()) {
      const BreakerSnapshot s = breaker.snapshot();
      if (!s.window || s.window->failures > s.window->calls || s.window->slow() > s.window->calls)
        bad.fetch_add(1);
    }
  });
  const Tally sum = hammer(clock, breaker, /*move_clock=*/true);
  done.store(true);
  watcher.join();
  EXPECT_EQ(bad.load(), 0);
  const BreakerSnapshot s = breaker.snapshot();
  EXPECT_LE(s.window->calls, sum.calls);
  EXPECT_EQ(s.successes + s.failures, sum.calls);
}

}  // namespace
}  // namespace bulwark
