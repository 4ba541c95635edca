#include "bulwark/retry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/metrics.h"
#include "bulwark/pipeline.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

struct HttpError {
  int status = 503;
  std::optional<Nanos> after = std::nullopt;
  Outcome outcome() const { return status >= 500 ? Outcome::failure : Outcome::ignored; }
  std::optional<Nanos> retry_after() const { return after; }
};

using Ctx = BasicContext<ManualClock>;
using Result = Expected<int, HttpError>;

// Records every wait and moves virtual time, like ManualSleeper.
struct RecordingSleeper {
  ManualClock* clock;
  std::vector<Nanos>* waits;
  bool sleep_for(Nanos d, const std::stop_token& stop) {
    if (stop.stop_requested()) return false;
    waits->push_back(d);
    clock->advance(d);
    return true;
  }
};

using VirtualRetry = BasicRetry<ManualClock, RecordingSleeper>;

RetryConfig no_jitter(std::uint32_t attempts, Backoff backoff) {
  return RetryConfig{.name = "test", .max_attempts = attempts, .backoff = std::move(backoff)};
}

Ticks ms(const ManualClock& clock) { return clock.now().time_since_epoch().count() / 1'000'000; }

TEST(RetryPolicy, DecidesExhaustionDeadlineAndDelay) {
  const RetryPolicy policy(no_jitter(3, Backoff::exponential(100ms, 2.0, 1s)));
  const Ticks now = 0;
  auto d = policy.decide(1, 0ms, std::nullopt, now, Deadline::never(), 0);
  EXPECT_TRUE(d);
  EXPECT_EQ(d.delay, 100ms);
  EXPECT_EQ(policy.decide(2, 100ms, std::nullopt, now, Deadline::never(), 0).delay, 200ms);
  EXPECT_EQ(policy.decide(3, 200ms, std::nullopt, now, Deadline::never(), 0).verdict,
            RetryDecision::Verdict::exhausted);
  // A wait that would reach the deadline is refused before it starts.
  EXPECT_EQ(
      policy.decide(2, 100ms, std::nullopt, now, Deadline::at(Nanos(200ms).count()), 0).verdict,
      RetryDecision::Verdict::deadline_exceeded);
  EXPECT_TRUE(policy.decide(2, 100ms, std::nullopt, now, Deadline::at(Nanos(201ms).count()), 0));
}

TEST(RetryPolicy, ServerHintReplacesTheSchedule) {
  const RetryPolicy policy(
      no_jitter(5, Backoff::exponential(100ms, 2.0, 1s).with_jitter(Jitter::full)));
  auto d = policy.decide(1, 0ms, 3s, 0, Deadline::never(), ~std::uint64_t{0});
  EXPECT_TRUE(d);
  EXPECT_EQ(d.delay, 3s) << "no jitter, no cap on the dependency's own hint";
  EXPECT_EQ(d.hint, 3s);
  EXPECT_EQ(policy.decide(1, 0ms, 3s, 0, Deadline::at(Nanos(2s).count()), 0).verdict,
            RetryDecision::Verdict::deadline_exceeded);

  RetryConfig ignore = no_jitter(5, Backoff::constant(100ms));
  ignore.honor_retry_after = false;
  EXPECT_EQ(RetryPolicy(ignore).decide(1, 0ms, 3s, 0, Deadline::never(), 0).delay, 100ms);
}

TEST(RetryPolicy, HugeAttemptCounts) {
  const std::uint32_t max = std::numeric_limits<std::uint32_t>::max();
  const RetryPolicy policy(no_jitter(max, Backoff::exponential(1ms, 2.0, 5s)));
  auto d = policy.decide(max - 1, 5s, std::nullopt, 0, Deadline::never(), 0);
  EXPECT_TRUE(d);
  EXPECT_EQ(d.delay, 5s);
  EXPECT_EQ(policy.decide(max, 5s, std::nullopt, 0, Deadline::never(), 0).verdict,
            RetryDecision::Verdict::exhausted);
  // Near the end of time, now + delay saturates instead of wrapping into the past.
  EXPECT_EQ(
      policy.decide(1, 0ms, std::nullopt, kTicksMax - 10, Deadline::at(kTicksMax - 1), 0).verdict,
      RetryDecision::Verdict::deadline_exceeded);
}

TEST(RetryPolicy, ValidationNamesTheField) {
  auto field = [](RetryConfig c) {
    auto r = validate(c);
    return r ? std::string() : r.error().field;
  };
  EXPECT_EQ(field({.name = ""}), "name");
  EXPECT_EQ(field({.max_attempts = 0}), "max_attempts");
  EXPECT_EQ(field({.backoff = Backoff::exponential(0ms, 2.0, 1s)}), "backoff.initial");
  EXPECT_EQ(field({}), "");
#if defined(__cpp_exceptions)
  EXPECT_THROW(RetryPolicy({.name = "x", .max_attempts = 0}), InvalidConfig);
#endif
}

class RetryLoop : public ::testing::Test {
 protected:
  ManualClock clock;
  std::vector<Nanos> waits;
  RecordingSleeper sleeper{&clock, &waits};
};

// In virtual time: two 503s then 200, 5 attempts: exactly 3 calls.
TEST_F(RetryLoop, SucceedsAfterTransientFailures) {
  VirtualRetry retry(no_jitter(5, Backoff::exponential(100ms, 2.0, 1s)), clock, sleeper);
  int calls = 0;
  auto r = pipeline(bulwark::retry(retry)).execute(Ctx(clock), [&](const Ctx& c) -> Result {
    EXPECT_EQ(c.attempt(), static_cast<std::uint32_t>(calls + 1));
    if (++calls < 3) return Unexpected(HttpError{503});
    return 200;
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 200);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(waits, (std::vector<Nanos>{100ms, 200ms}));
  EXPECT_EQ(retry.snapshot().retries, 2u);
}

// Deadline 1000 ms, backoff 100/200/400/800 ms, attempts failing after 10 ms: the
// attempts end at 10, 120, 330 and 740 ms; 740 + 800 would pass the deadline, so the
// fourth failure returns at once, with its error and the reason.
TEST_F(RetryLoop, DeadlineCutsOffBeforeTheSleep) {
  VirtualRetry retry(no_jitter(10, Backoff::exponential(100ms, 2.0, 10s)), clock, sleeper);
  int calls = 0;
  const Ctx ctx(clock, {}, Deadline::after(clock, 1000ms));
  auto r = pipeline(bulwark::retry(retry)).execute(ctx, [&](const Ctx&) -> Result {
    clock.advance(10ms);
    return Unexpected(HttpError{500 + ++calls});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::deadline_exceeded);
  EXPECT_EQ(r.error().stage, Stage::retry);
  EXPECT_EQ(r.error().attempts, 4u);
  ASSERT_TRUE(r.error().error);
  EXPECT_EQ(r.error().error->status, 504) << "the last attempt's error";
  EXPECT_EQ(waits, (std::vector<Nanos>{100ms, 200ms, 400ms}));
  EXPECT_EQ(ms(clock), 740) << "returned at once, no sleep toward the deadline";
  EXPECT_EQ(retry.snapshot().deadline_stops, 1u);
}

TEST_F(RetryLoop, ExhaustsAttempts) {
  VirtualRetry retry(no_jitter(3, Backoff::constant(10ms)), clock, sleeper);
  int calls = 0;
  auto r = pipeline(bulwark::retry(retry)).execute(Ctx(clock), [&]() -> Result {
    ++calls;
    return Unexpected(HttpError{503});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::retries_exhausted);
  EXPECT_EQ(r.error().attempts, 3u);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(waits.size(), 2u);
  EXPECT_EQ(retry.snapshot().exhausted, 1u);
}

// Every call through the retry stage is counted once, by how it ended (Resilience4j's
// four kinds, as bulwark_retry_calls_total{kind} exposes them through the registry); a
// call stopped before its first attempt is not a call.
TEST_F(RetryLoop, CallsAreCountedByHowTheyEnded) {
  VirtualRetry retry(no_jitter(3, Backoff::constant(10ms)), clock, sleeper);
  auto run = [&](std::vector<int> statuses, const Ctx& ctx) {
    std::size_t i = 0;
    return pipeline(bulwark::retry(retry)).execute(ctx, [&]() -> Result {
      const int s = statuses[std::min(i++, statuses.size() - 1)];
      if (s == 200) return 200;
      return Unexpected(HttpError{s});
    });
  };
  EXPECT_TRUE(run({200}, Ctx(clock)));             // successful without retry
  EXPECT_TRUE(run({200}, Ctx(clock)));             // successful without retry
  EXPECT_TRUE(run({503, 200}, Ctx(clock)));        // successful with retry
  EXPECT_FALSE(run({503, 503, 503}, Ctx(clock)));  // failed with retry (exhausted)
  EXPECT_FALSE(run({404}, Ctx(clock)));            // failed without retry (not retryable)
  std::stop_source stopped;
  stopped.request_stop();
  EXPECT_FALSE(run({200}, Ctx(clock, stopped.get_token())));  // never attempted: not counted
  const RetrySnapshot s = retry.snapshot();
  EXPECT_EQ(s.successful_without_retry, 2u);
  EXPECT_EQ(s.successful_with_retry, 1u);
  EXPECT_EQ(s.failed_with_retry, 1u);
  EXPECT_EQ(s.failed_without_retry, 1u);
  EXPECT_EQ(s.retries, 3u);
  ComponentReading r;
  r.add_retry(retry);
  EXPECT_EQ(r.retry_calls, (std::array<std::uint64_t, 4>{2, 1, 1, 1}));
}

TEST_F(RetryLoop, IgnoredErrorsAreNeverRetried) {
  VirtualRetry retry(no_jitter(5, Backoff::constant(10ms)), clock, sleeper);
  int calls = 0;
  auto r = pipeline(bulwark::retry(retry)).execute(Ctx(clock), [&]() -> Result {
    ++calls;
    return Unexpected(HttpError{404});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::call_error);
  EXPECT_EQ(r.error().stage, Stage::call);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(waits.empty());
}

TEST_F(RetryLoop, RetryOnPredicateReplacesTheDefault) {
  VirtualRetry retry(no_jitter(5, Backoff::constant(10ms)), clock, sleeper);
  auto only_503 = [](const HttpError& e) { return e.status == 503; };
  int calls = 0;
  auto r = pipeline(bulwark::retry(retry, only_503)).execute(Ctx(clock), [&]() -> Result {
    return Unexpected(HttpError{++calls == 1 ? 503 : 500});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r.error().reason, Reason::call_error);
  EXPECT_EQ(r.error().error->status, 500);
}

TEST_F(RetryLoop, ServerRetryAfterOverridesTheSchedule) {
  VirtualRetry retry(no_jitter(3, Backoff::exponential(100ms, 2.0, 1s)), clock, sleeper);
  int calls = 0;
  auto r = pipeline(bulwark::retry(retry)).execute(Ctx(clock), [&]() -> Result {
    if (++calls == 1) return Unexpected(HttpError{503, 2s});
    if (calls == 2) return Unexpected(HttpError{503});
    return 1;
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(waits, (std::vector<Nanos>{2s, 200ms}));
}

TEST_F(RetryLoop, ServerRetryAfterPastTheDeadlineReturnsAtOnce) {
  VirtualRetry retry(no_jitter(3, Backoff::constant(1ms)), clock, sleeper);
  const Ctx ctx(clock, {}, Deadline::after(clock, 1s));
  auto r = pipeline(bulwark::retry(retry)).execute(ctx, [&]() -> Result {
    return Unexpected(HttpError{503, 30s});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::deadline_exceeded);
  EXPECT_EQ(r.error().retry_after, 30s) << "the hint is passed on to the caller";
  EXPECT_TRUE(waits.empty());
}

// A slow dependency that uses all the time it is given: each attempt gets 100 ms, but
// never more than the request's 1 s deadline has left.
TEST_F(RetryLoop, PerAttemptTimeoutInsideTheDeadline) {
  VirtualRetry retry(no_jitter(20, Backoff::constant(50ms)), clock, sleeper);
  std::vector<Nanos> given;
  const Ctx ctx(clock, {}, Deadline::after(clock, 1s));
  auto r =
      pipeline(bulwark::retry(retry), timeout(100ms)).execute(ctx, [&](const Ctx& c) -> Result {
        given.push_back(c.remaining());
        clock.advance(c.remaining());
        return Unexpected(HttpError{504});
      });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::deadline_exceeded);
  // 0-100, 150-250, 300-400, 450-550, 600-700, 750-850, 900-1000
  EXPECT_EQ(given, std::vector<Nanos>(7, 100ms));
  EXPECT_EQ(r.error().attempts, 7u);
  EXPECT_EQ(ms(clock), 1000);
}

TEST_F(RetryLoop, TimeoutWithoutRetryIsReportedAsTimeout) {
  auto r = pipeline(timeout(100ms)).execute(Ctx(clock), [&](const Ctx& c) -> Result {
    clock.advance(c.remaining());
    return Unexpected(HttpError{504});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::timeout);
  EXPECT_EQ(r.error().stage, Stage::timeout);
  EXPECT_TRUE(r.error().timed_out);
}

struct CancellingSleeper {
  std::stop_source* source;
  int* sleeps;
  bool sleep_for(Nanos, const std::stop_token& stop) {
    ++*sleeps;
    source->request_stop();  // the request is cancelled while we wait
    return !stop.stop_requested();
  }
};

TEST_F(RetryLoop, CancellationDuringBackoffEndsTheCallAndRefundsTheBudget) {
  std::stop_source source;
  int sleeps = 0;
  BasicRetryBudget<ManualClock> budget({.ratio = 1, .min_retries_per_second = 0, .max_tokens = 10},
                                       clock);
  BasicRetry<ManualClock, CancellingSleeper> retry(no_jitter(5, Backoff::constant(1h)), clock,
                                                   CancellingSleeper{&source, &sleeps}, &budget);
  int calls = 0;
  auto r = pipeline(bulwark::retry(retry)).execute(Ctx(clock, source.get_token()), [&]() -> Result {
    ++calls;
    return Unexpected(HttpError{503});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::cancelled);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(sleeps, 1);
  EXPECT_DOUBLE_EQ(budget.tokens(), 1.0) << "the retry never started: its token came back";
  EXPECT_EQ(budget.snapshot().refunded, 1u);
}

TEST(RetryRealTime, CancellationWakesABackoffAtOnce) {
  Retry retry(no_jitter(3, Backoff::constant(1h)));
  std::stop_source source;
  std::jthread canceller;
  auto r = pipeline(bulwark::retry(retry))
               .execute(Context(SteadyClock{}, source.get_token()), [&]() -> Result {
                 canceller = std::jthread([&] { source.request_stop(); });
                 return Unexpected(HttpError{503});
               });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::cancelled);
}

TEST_F(RetryLoop, BudgetStopsRetriesWithTheLastError) {
  BasicRetryBudget<ManualClock> budget(
      {.ratio = 0.1, .min_retries_per_second = 0, .max_tokens = 10}, clock);
  VirtualRetry retry(no_jitter(5, Backoff::constant(10ms)), clock, sleeper, &budget);
  auto r = pipeline(bulwark::retry(retry)).execute(Ctx(clock), [&]() -> Result {
    return Unexpected(HttpError{502});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::budget_exhausted);
  EXPECT_EQ(r.error().attempts, 1u);
  EXPECT_EQ(r.error().error->status, 502);
  EXPECT_EQ(retry.snapshot().budget_stops, 1u);
}

TEST_F(RetryLoop, OneIdempotencyKeyPerLogicalOperation) {
  int made = 0;
  RetryConfig config = no_jitter(4, Backoff::constant(1ms));
  config.idempotency_key = [&] { return "op-" + std::to_string(++made); };
  VirtualRetry retry(config, clock, sleeper);
  auto p = pipeline(bulwark::retry(retry), timeout(1s));
  std::vector<std::string> seen;
  for (int op = 0; op < 2; ++op) {
    int calls = 0;
    auto r = p.execute(Ctx(clock), [&](const Ctx& c) -> Result {
      seen.emplace_back(c.idempotency_key());
      if (++calls < 3) return Unexpected(HttpError{503});
      return 0;
    });
    ASSERT_TRUE(r);
  }
  EXPECT_EQ(made, 2);
  EXPECT_EQ(seen, (std::vector<std::string>{"op-1", "op-1", "op-1", "op-2", "op-2", "op-2"}));
}

TEST_F(RetryLoop, SeededJitterIsReproducible) {
  auto run = [&](std::uint64_t seed) {
    waits.clear();
    RetryConfig config{.name = "j",
                       .max_attempts = 6,
                       .backoff = Backoff::exponential(100ms, 2.0, 10s).with_jitter(Jitter::full),
                       .random = [rng = SplitMix64(seed)]() mutable { return rng(); }};
    VirtualRetry retry(config, clock, sleeper);
    (void)pipeline(bulwark::retry(retry)).execute(Ctx(clock), []() -> Result {
      return Unexpected(HttpError{});
    });
    return waits;
  };
  const auto a = run(5), b = run(5), c = run(6);
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_LE(a[i], Nanos(100ms) * (1 << i));
}

}  // namespace
}  // namespace bulwark
