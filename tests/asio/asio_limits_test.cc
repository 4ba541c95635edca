// The rate limiter and throttle stages of the async pipeline, in virtual time.

#include <gtest/gtest.h>

#include <chrono>
#include <optional>

#include "asio/asio_support.h"
#include "bulwark/asio/pipeline.h"
#include "bulwark/asio/rate_limit.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;
using bulwark::asio::ManualTimerClock;
using Clock = ManualClock;
using Ctx = BasicContext<Clock>;

// A 429-like pushback: the breaker ignores it (the caller's load, not a broken
// dependency); the throttle reads its retry-after hint as overload.
struct Err {
  std::optional<Nanos> hint;
  Outcome outcome() const { return Outcome::ignored; }
  std::optional<Nanos> retry_after() const { return hint; }
};
using Reply = Expected<int, Failure<Err>>;

RateLimiterConfig ten_per_second() {
  RateLimiterConfig c;
  c.name = "dep";
  c.permits = 10;
  c.period = 1s;
  return c;
}

class AsyncLimitsTest : public ::testing::Test {
 protected:
  Clock clock;
  ManualTimerClock::Binding bind{clock};
  ::asio::io_context io{1};
  ::asio::executor_work_guard<::asio::io_context::executor_type> work{io.get_executor()};
  int calls = 0;
  bool shed = false;

  auto call() {
    return [this](const Ctx&) -> ::asio::awaitable<Expected<int, Err>> {
      ++calls;
      if (shed) co_return Unexpected(Err{1s});
      co_return calls;
    };
  }
  template <class P>
  Reply run(const P& p, Ctx ctx) {
    std::optional<Reply> out;
    auto body = [&]() -> ::asio::awaitable<void> { out.emplace(co_await p(ctx, call())); };
    ::asio::co_spawn(io, body, ::asio::detached);
    EXPECT_TRUE(drive(io, clock, [&] { return out.has_value(); }));
    return std::move(*out);
  }
};

TEST_F(AsyncLimitsTest, RateLimitNeverWaitsUnlessAsked) {
  BasicRateLimiter<Clock> limiter(ten_per_second(), clock);
  auto p = bulwark::asio::pipeline(bulwark::rate_limit(limiter));
  ASSERT_TRUE(run(p, Ctx(clock)));
  auto r = run(p, Ctx(clock));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::rate_limited);
  EXPECT_EQ(r.error().retry_after, 100ms);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(now_ticks(clock), 0);
}

TEST_F(AsyncLimitsTest, RateLimitWaitsOnATimerUntilTheDeadlineAtMost) {
  BasicRateLimiter<Clock> limiter(ten_per_second(), clock);
  auto p = bulwark::asio::pipeline(bulwark::asio::rate_limit(limiter));
  ASSERT_TRUE(run(p, Ctx(clock)));
  // Due in 100 ms, deadline in 1 s: the call waits (virtual time) and goes through.
  ASSERT_TRUE(run(p, Ctx(clock, {}, Deadline::after(clock, 1s))));
  EXPECT_GE(now_ticks(clock), to_ticks(100ms));
  EXPECT_LE(now_ticks(clock), to_ticks(101ms));  // the driver moves time in 1 ms steps
  EXPECT_EQ(calls, 2);
  // Due in about 100 ms, deadline in 50 ms: refused at once.
  const Ticks before = now_ticks(clock);
  auto r = run(p, Ctx(clock, {}, Deadline::after(clock, 50ms)));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::rate_limited);
  EXPECT_EQ(now_ticks(clock), before);
  EXPECT_EQ(calls, 2);
}

TEST_F(AsyncLimitsTest, ThrottleRejectsLocallyWhenTheDependencyPushesBack) {
  BasicCircuitBreaker<Clock> breaker(
      [] {
        BreakerConfig c;
        c.name = "dep";
        c.consecutive_failures = 3;
        return c;
      }(),
      clock);
  ThrottleConfig tc;
  tc.name = "dep";
  tc.seed = 5;
  BasicThrottle<Clock> throttle(tc, clock);
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::throttle(throttle));
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(run(p, Ctx(clock)));
  EXPECT_EQ(throttle.snapshot().accepts, 20u);
  shed = true;
  int throttled = 0;
  for (int i = 0; i < 400; ++i) {
    auto r = run(p, Ctx(clock));
    ASSERT_FALSE(r);
    if (r.error().reason == Reason::throttled) ++throttled;
  }
  EXPECT_EQ(calls + throttled, 420);
  EXPECT_GT(throttled, 200);
  EXPECT_EQ(throttle.snapshot().accepts, 20u);
  // Local rejections cancel the breaker permit: neither successes nor failures.
  EXPECT_EQ(breaker.snapshot().successes, 20u);
  EXPECT_EQ(breaker.snapshot().failures, 0u);
  EXPECT_EQ(breaker.state(), State::closed);
}

}  // namespace
}  // namespace bulwark::testing
