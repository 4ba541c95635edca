// The rate limiter and throttle stages of the sync pipeline.

#include <gtest/gtest.h>

#include <chrono>
#include <optional>

#include "bulwark/pipeline.h"
#include "support/counting.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

struct HttpError {
  int status = 503;
  std::optional<Nanos> hint = std::nullopt;
  Outcome outcome() const { return status >= 500 ? Outcome::failure : Outcome::ignored; }
  std::optional<Nanos> retry_after() const { return hint; }
};

using Clock = ManualClock;
using Ctx = BasicContext<Clock>;
using Result = Expected<int, HttpError>;

BreakerConfig breaker_config() {
  BreakerConfig c;
  c.name = "dep";
  c.consecutive_failures = 3;
  c.open_duration = 10s;
  return c;
}

RateLimiterConfig ten_per_second() {
  RateLimiterConfig c;
  c.name = "dep";
  c.permits = 10;
  c.period = 1s;
  return c;
}

// The new stages' places: fallback, rate_limit, breaker, throttle, bulkhead, ...
using Fb = FallbackStage<int>;
using Rl = RateLimitStage<BasicRateLimiter<Clock>, NoRateWait>;
using Br = BreakerStage<BasicCircuitBreaker<Clock>>;
using Th = ThrottleStage<BasicThrottle<Clock>, ThrottleAccepts>;
using Bh = BulkheadStage<BasicBulkhead<Clock>>;
static_assert(detail::strictly_ordered<Fb, Rl, Br, Th, Bh, TimeoutStage>());
static_assert(!detail::strictly_ordered<Br, Rl>(), "rate limit inside the breaker");
static_assert(!detail::strictly_ordered<Rl, Fb>(), "rate limit outside the fallback");
static_assert(!detail::strictly_ordered<Th, Br>(), "throttle outside the breaker");
static_assert(!detail::strictly_ordered<Bh, Th>(), "throttle inside the bulkhead");

TEST(PipelineRateLimit, RefusesAtOnceWithTheExactWaitAndNeverCallsTheDependency) {
  Clock clock;
  BasicCircuitBreaker<Clock> breaker(breaker_config(), clock);
  BasicRateLimiter<Clock> limiter(ten_per_second(), clock);
  auto p = pipeline(rate_limit(limiter), bulwark::breaker(breaker));
  int calls = 0;
  auto call = [&](const Ctx&) -> Result { return ++calls; };
  ASSERT_TRUE(p(Ctx(clock), call));
  clock.advance(30ms);
  auto r = p(Ctx(clock), call);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::rate_limited);
  EXPECT_EQ(r.error().stage, Stage::rate_limiter);
  EXPECT_EQ(r.error().attempts, 0u);
  EXPECT_EQ(r.error().retry_after, 70ms);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(breaker.snapshot().successes, 1u);
  EXPECT_EQ(limiter.snapshot().refused, 1u);
  EXPECT_EQ(now_ticks(clock), to_ticks(30ms)) << "never waits";
}

TEST(PipelineRateLimit, WaitsOnTheSleeperOnlyWithinTheDeadline) {
  Clock clock;
  BasicRateLimiter<Clock> limiter(ten_per_second(), clock);
  ManualSleeper sleeper(clock);
  auto p = pipeline(rate_limit(limiter, sleeper));
  auto call = [&](const Ctx&) -> Result { return 1; };
  ASSERT_TRUE(p(Ctx(clock), call));
  // Due in 100 ms, deadline in 1 s: waits (virtual time) and calls.
  ASSERT_TRUE(p(Ctx(clock, {}, Deadline::after(clock, 1s)), call));
  EXPECT_EQ(now_ticks(clock), to_ticks(100ms));
  // Due in 100 ms, deadline in 50 ms: refused at once, with the wait.
  auto r = p(Ctx(clock, {}, Deadline::after(clock, 50ms)), call);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::rate_limited);
  EXPECT_EQ(r.error().retry_after, 100ms);
  EXPECT_EQ(now_ticks(clock), to_ticks(100ms));
  // A cancelled request does not wait.
  std::stop_source stop;
  stop.request_stop();
  auto c = p(Ctx(clock, stop.get_token()), call);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().reason, Reason::cancelled);
}

TEST(PipelineThrottle, ThrottlesAnOverloadedDependencyWithoutBlamingItTwice) {
  Clock clock;
  BasicCircuitBreaker<Clock> breaker(breaker_config(), clock);
  ThrottleConfig tc;
  tc.name = "dep";
  tc.seed = 9;
  BasicThrottle<Clock> throttle(tc, clock);
  auto p = pipeline(bulwark::breaker(breaker), bulwark::throttle(throttle));
  int calls = 0;
  // Overloaded: every answer is a 429-like pushback that the breaker ignores (4xx),
  // so only the throttle reacts to it.
  auto shed = [&](const Ctx&) -> Result {
    ++calls;
    return Unexpected(HttpError{429, 1s});
  };
  int throttled = 0;
  for (int i = 0; i < 1000; ++i) {
    auto r = p(Ctx(clock), shed);
    ASSERT_FALSE(r);
    if (r.error().reason == Reason::throttled) {
      ++throttled;
      EXPECT_EQ(r.error().stage, Stage::throttle);
      EXPECT_EQ(r.error().attempts, 0u);
    }
  }
  EXPECT_EQ(calls + throttled, 1000);
  EXPECT_GT(throttled, 900);  // p → requests/(requests+1): almost everything stays home
  EXPECT_EQ(throttle.snapshot().accepts, 0u);
  // A local rejection cancels the breaker permit: neither success nor failure.
  EXPECT_EQ(breaker.state(), State::closed);
  EXPECT_EQ(breaker.snapshot().failures, 0u);
}

TEST(PipelineThrottle, HealthyCallsAreNeverThrottledAndCountAsAccepted) {
  Clock clock;
  ThrottleConfig tc;
  tc.name = "dep";
  tc.seed = 1;
  BasicThrottle<Clock> throttle(tc, clock);
  auto p = pipeline(bulwark::throttle(throttle));
  int calls = 0;
  auto flaky = [&](const Ctx&) -> Result {
    // Every other call fails without an overload signal: still "accepted".
    if (++calls % 2 == 0) return Unexpected(HttpError{500});
    return 1;
  };
  for (int i = 0; i < 1000; ++i) {
    auto r = p(Ctx(clock), flaky);
    if (!r) {
      ASSERT_EQ(r.error().reason, Reason::call_error);
    }
  }
  EXPECT_EQ(calls, 1000);
  EXPECT_EQ(throttle.snapshot().accepts, 1000u);
  EXPECT_EQ(throttle.reject_probability(), 0.0);
}

TEST(PipelineLimits, AdmissionAllocatesNothing) {
  ASSERT_TRUE(testing::counting_works());
  Clock clock;
  BasicRateLimiter<Clock> limiter(ten_per_second(), clock);
  ThrottleConfig tc;
  tc.name = "dep";
  tc.seed = 1;
  BasicThrottle<Clock> throttle(tc, clock);
  auto p = pipeline(rate_limit(limiter), bulwark::throttle(throttle));
  auto ok = [](const Ctx&) -> Result { return 1; };
  const Ctx ctx(clock);
  const testing::Counts c = testing::count([&] {
    for (int i = 0; i < 100; ++i) {
      (void)p(ctx, ok);
      clock.advance(50ms);
    }
  });
  EXPECT_EQ(c.allocations, 0u);
  if (testing::kCountsLocks) {
    EXPECT_EQ(c.locks, 0u);
  }
  EXPECT_EQ(limiter.snapshot().refused, 50u);  // 20 per second asked, 10 admitted
}

}  // namespace
}  // namespace bulwark
