// An OPEN breaker checks its open period on the clock's coarse reading: it answers
// rejections at the cost of a coarse read, admits the first probe at most one coarse
// tick after the period ends, and never before it — the precise clock confirms an end
// the coarse one reports, even from a clock whose coarse reading runs ahead.

#include <gtest/gtest.h>

#include <chrono>

#include "bulwark/circuit_breaker.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

// Precise time from a ManualClock; coarse time is the precise time rounded down to a
// 4 ms tick (as CLOCK_MONOTONIC_COARSE lags CLOCK_MONOTONIC), or `ahead` ahead of it
// (a clock that breaks the contract). Counts the reads of each.
struct TickClock {
  using duration = Nanos;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<TickClock, Nanos>;
  static constexpr bool is_steady = true;
  static constexpr Ticks kTick = 4'000'000;

  ManualClock* base;
  Ticks ahead = 0;
  mutable int precise_reads = 0, coarse_reads = 0;

  time_point now() const noexcept {
    ++precise_reads;
    return time_point(base->now().time_since_epoch());
  }
  time_point coarse_now() const noexcept {
    ++coarse_reads;
    const Ticks t = base->now().time_since_epoch().count();
    return time_point(Nanos(ahead != 0 ? t + ahead : t - t % kTick));
  }
};
static_assert(Clock<TickClock>);

using Breaker = BasicCircuitBreaker<TickClock>;

TEST(OpenCoarseClock, RejectionsReadOnlyTheCoarseClock) {
  ManualClock base;
  base.set(1s + 1ms);  // not on a tick: the opening is stamped between two ticks
  TickClock clock{&base};
  Breaker b({.consecutive_failures = 1, .open_duration = 10s}, clock);
  b.try_acquire()->record_failure();
  ASSERT_EQ(b.state(), State::open);
  clock.precise_reads = clock.coarse_reads = 0;
  for (int i = 0; i < 100; ++i) {
    base.advance(10ms);
    EXPECT_FALSE(b.try_acquire());
  }
  EXPECT_EQ(clock.coarse_reads, 100);
  EXPECT_EQ(clock.precise_reads, 0) << "a rejection read the precise clock";
}

TEST(OpenCoarseClock, AProbeComesAtMostOneTickLateAndNeverEarly) {
  ManualClock base;
  base.set(1s + 1ms);
  TickClock clock{&base};
  Breaker b({.consecutive_failures = 1, .open_duration = 10s}, clock);
  b.try_acquire()->record_failure();
  // The period ends at 11.001 s; the coarse clock reads 11.000 s until 11.004 s.
  base.set(11s + 1ms - 1ns);
  EXPECT_FALSE(b.try_acquire()) << "admitted before the period ended";
  base.set(11s + 1ms);
  EXPECT_FALSE(b.try_acquire()) << "the coarse clock has not seen the end yet";
  base.set(11s + 4ms - 1ns);
  EXPECT_FALSE(b.try_acquire()) << "still within the coarse tick";
  base.set(11s + 4ms);
  auto probe = b.try_acquire();
  ASSERT_TRUE(probe) << "more than one coarse tick late";
  EXPECT_TRUE(probe->is_probe());
  // The transition is stamped with the precise time.
  EXPECT_EQ(b.snapshot().time_in_state, 0ns);
}

TEST(OpenCoarseClock, ACoarseClockAheadOfThePreciseOneAdmitsNothingEarly) {
  ManualClock base;
  base.set(1s);
  TickClock clock{&base, /*ahead=*/to_ticks(5s)};
  Breaker b({.consecutive_failures = 1, .open_duration = 10s}, clock);
  b.try_acquire()->record_failure();
  base.set(6s);  // the coarse clock says 11 s: the period's end, if it were believed
  EXPECT_FALSE(b.try_acquire()) << "a coarse clock ahead of time admitted a probe early";
  base.set(11s);
  EXPECT_TRUE(b.try_acquire());
}

TEST(OpenCoarseClock, ManualClockHasNoCoarseReadingAndStaysExact) {
  ManualClock clock;
  BasicCircuitBreaker<ManualClock> b({.consecutive_failures = 1, .open_duration = 10s}, clock);
  b.try_acquire()->record_failure();
  clock.advance(10s - 1ns);
  EXPECT_FALSE(b.try_acquire());
  clock.advance(1ns);
  EXPECT_TRUE(b.try_acquire());
}

}  // namespace
}  // namespace bulwark
