#include "bulwark/rate_limiter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using Limiter = BasicRateLimiter<ManualClock>;

RateLimiterConfig smooth(std::uint64_t permits, Nanos period, Nanos tolerance = Nanos::zero()) {
  RateLimiterConfig c;
  c.name = "api";
  c.permits = permits;
  c.period = period;
  c.tolerance = tolerance;
  return c;
}

RateLimiterConfig bursty(std::uint64_t permits, Nanos period, std::uint64_t capacity) {
  RateLimiterConfig c;
  c.name = "bulk";
  c.mode = RateLimitMode::bursty;
  c.permits = permits;
  c.period = period;
  c.capacity = capacity;
  return c;
}

TEST(RateLimiter, SmoothSpacesPermitsEvenly) {
  ManualClock clock(ManualClock::time_point(1000s));
  Limiter l(smooth(10, 1s), clock);  // T = 100 ms, no tolerance
  EXPECT_EQ(l.interval(), 100ms);
  EXPECT_EQ(l.burst(), 1u);
  EXPECT_TRUE(l.try_acquire());
  auto r = l.try_acquire();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().retry_after, 100ms);
  clock.advance(99ms);
  r = l.try_acquire();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().retry_after, 1ms);
  clock.advance(1ms);
  EXPECT_TRUE(l.try_acquire());
  EXPECT_EQ(l.snapshot().refused, 2u);
}

TEST(RateLimiter, RateIsExactOverALongRun) {
  // Hammer the limiter every 7 ms for an hour of virtual time: it admits exactly one
  // permit per 30 ms slot plus the tolerance's burst.
  ManualClock clock;
  Limiter l(smooth(100, 3s, 60ms), clock);  // T = 30 ms, burst 3
  EXPECT_EQ(l.burst(), 3u);
  std::uint64_t admitted = 0;
  const Ticks end = to_ticks(1h);
  while (now_ticks(clock) <= end) {
    while (l.try_acquire()) ++admitted;
    clock.advance(7ms);
  }
  // The three of the burst at time 0, then one per 30 ms slot due by the last probe:
  // probes that come late (up to 6 ms) never let the schedule drift.
  const Ticks last_probe = end / to_ticks(7ms) * to_ticks(7ms);
  EXPECT_EQ(admitted, 3 + static_cast<std::uint64_t>(last_probe / to_ticks(30ms)));
}

TEST(RateLimiter, RefusalWaitIsExactThenAdmits) {
  ManualClock clock;
  Limiter l(smooth(3, 1s), clock);  // T = ceil(333333333.3) ns
  EXPECT_EQ(l.interval(), Nanos(333'333'334));
  ASSERT_TRUE(l.try_acquire());
  for (int i = 0; i < 50; ++i) {
    auto r = l.try_acquire();
    ASSERT_FALSE(r);
    clock.advance(r.error().retry_after - 1ns);
    ASSERT_FALSE(l.try_acquire()) << i;  // a nanosecond early is still too early
    clock.advance(1ns);
    ASSERT_TRUE(l.try_acquire()) << i;
  }
}

TEST(RateLimiter, BurstyBucketStartsFullAndRefills) {
  ManualClock clock(ManualClock::time_point(5s));
  Limiter l(bursty(10, 1s, 50), clock);
  EXPECT_EQ(l.burst(), 50u);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(l.try_acquire()) << i;
  auto r = l.try_acquire();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().retry_after, 100ms);
  clock.advance(1s);  // ten tokens back
  EXPECT_TRUE(l.try_acquire(10));
  EXPECT_FALSE(l.try_acquire());
  clock.advance(1h);  // refill stops at the capacity
  EXPECT_TRUE(l.try_acquire(50));
  EXPECT_FALSE(l.try_acquire());
}

TEST(RateLimiter, MultiPermitWaitAndOverCapacity) {
  ManualClock clock;
  Limiter l(bursty(10, 1s, 5), clock);
  ASSERT_TRUE(l.try_acquire(4));
  auto r = l.try_acquire(3);  // one left, two missing: 200 ms
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().retry_after, 200ms);
  EXPECT_EQ(l.time_until_available(3), 200ms);
  auto never = l.try_acquire(6);
  ASSERT_FALSE(never);
  EXPECT_TRUE(never.error().exceeds_burst);
  EXPECT_EQ(never.error().retry_after, Nanos::max());
}

TEST(RateLimiter, ReserveTakesAFuturePermitWithinTheWait) {
  ManualClock clock;
  Limiter l(smooth(10, 1s), clock);
  ASSERT_TRUE(l.try_acquire());
  auto w = l.reserve(1, 150ms);
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, 100ms);
  auto w2 = l.reserve(1, 150ms);  // due at 200 ms: too late
  ASSERT_FALSE(w2);
  EXPECT_EQ(w2.error().retry_after, 200ms);
  EXPECT_EQ(l.snapshot().delayed, 1u);
  clock.advance(100ms);
  EXPECT_FALSE(l.try_acquire());  // the reserved permit is taken
}

TEST(RateLimiter, ClockSteppingBackOnlyDelays) {
  ManualClock clock(ManualClock::time_point(10s));
  Limiter l(smooth(10, 1s), clock);
  ASSERT_TRUE(l.try_acquire());
  clock.set(5s);
  auto r = l.try_acquire();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().retry_after, 5s + 100ms);
}

TEST(RateLimiter, InvalidConfigNamesTheField) {
  auto field = [](RateLimiterConfig c) {
    auto v = validate(c);
    return v ? std::string() : v.error().field;
  };
  EXPECT_EQ(field(smooth(10, 1s)), "");
  EXPECT_EQ(field(bursty(10, 1s, 0)), "");
  EXPECT_EQ(field(smooth(0, 1s)), "permits");
  EXPECT_EQ(field(smooth(10, 0s)), "period");
  EXPECT_EQ(field(smooth(10, -1s)), "period");
  EXPECT_EQ(field(smooth(1000, Nanos(999))), "permits");
  EXPECT_EQ(field(smooth(10, 1s, -1ms)), "tolerance");
  auto c = smooth(10, 1s);
  c.capacity = 3;
  EXPECT_EQ(field(c), "capacity");
  c = bursty(10, 1s, 5);
  c.tolerance = 1ms;
  EXPECT_EQ(field(c), "tolerance");
  EXPECT_EQ(field(bursty(1, 1h, std::uint64_t{1} << 62)), "capacity");
  c = smooth(10, 1s);
  c.name = "";
  EXPECT_EQ(field(c), "name");
#if defined(__cpp_exceptions)
  EXPECT_THROW(Limiter(smooth(0, 1s)), InvalidConfig);
#endif
}

}  // namespace
}  // namespace bulwark
