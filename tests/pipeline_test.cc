#include "bulwark/pipeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "bulwark/metrics.h"
#include "support/counting.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

struct HttpError {
  int status = 503;
  Outcome outcome() const { return status >= 500 ? Outcome::failure : Outcome::ignored; }
};

using Clock = ManualClock;
using Ctx = BasicContext<Clock>;
using Breaker = BasicCircuitBreaker<Clock>;
using Result = Expected<int, HttpError>;

// BreakerConfig is built field by field: it is another component's struct, and
// designated initializers would break -Wmissing-field-initializers whenever it grows.
BreakerConfig breaker_config() {
  BreakerConfig c;
  c.name = "dep";
  c.consecutive_failures = 2;
  c.open_duration = 10s;
  return c;
}

class PipelineTest : public ::testing::Test {
 protected:
  Clock clock;
  Breaker breaker{breaker_config(), clock};
  BasicBulkhead<Clock> pool{BulkheadConfig{.name = "dep", .max_concurrent = 1}, clock};
  BasicRetryBudget<Clock> budget{
      RetryBudgetConfig{
          .name = "dep", .ratio = 0.5, .min_retries_per_second = 50, .max_tokens = 1000},
      clock};
  BasicRetry<Clock, ManualSleeper> retry{
      RetryConfig{.name = "dep", .max_attempts = 3, .backoff = Backoff::constant(100ms)}, clock,
      ManualSleeper(clock), &budget};
};

TEST_F(PipelineTest, AFallbackStageCountsWhatItAnswersFor) {
  ComponentCounters counters;
  auto p =
      pipeline(fallback(-1).counted_by(counters), bulwark::breaker(breaker), bulwark::retry(retry));
  auto failing = [](const Ctx&) -> Result { return Unexpected(HttpError{503}); };
  EXPECT_EQ(*p(Ctx(clock), failing), -1);  // three attempts failed: "failed"
  EXPECT_EQ(*p(Ctx(clock), failing), -1);  // the breaker opens on this sequence's outcome
  ASSERT_EQ(breaker.state(), State::open);
  EXPECT_EQ(*p(Ctx(clock), failing), -1);  // never called: "rejected"
  EXPECT_EQ(*p(Ctx(clock), [](const Ctx&) -> Result { return 5; }), -1) << "still open";
  ComponentReading r;
  counters.read_into(r);
  ASSERT_TRUE(r.has_fallback);
  EXPECT_EQ(r.fallbacks[static_cast<int>(FallbackKind::failed)], 2u);
  EXPECT_EQ(r.fallbacks[static_cast<int>(FallbackKind::rejected)], 2u);

  // A fallback that declines (hands the failure on) answered nothing: not counted.
  ComponentCounters declined;
  auto q = pipeline(fallback([](const Failure<HttpError>& f) -> Expected<int, Failure<HttpError>> {
                      return Unexpected(f);
                    }).counted_by(declined),
                    bulwark::breaker(breaker));
  EXPECT_FALSE(q(Ctx(clock), failing));
  ComponentReading none;
  declined.read_into(none);
  EXPECT_FALSE(none.has_fallback);
}

TEST_F(PipelineTest, AllStagesSuccess) {
  auto p = pipeline(fallback(-1), bulwark::breaker(breaker), bulkhead(pool), bulwark::retry(retry),
                    timeout(1s));
  auto r = p(Ctx(clock), [&](const Ctx& c) -> Result {
    EXPECT_EQ(pool.in_use(), 1u);
    EXPECT_EQ(c.remaining(), 1s);
    return 7;
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(breaker.snapshot().successes, 1u);
  EXPECT_DOUBLE_EQ(budget.tokens(), 50.5);
}

// The claim of pipeline.h: nothing on the call path allocates or locks, whether the
// call succeeds, is retried with backoff and budget, or is rejected and falls back.
TEST_F(PipelineTest, AllocatesNothingAndTakesNoLock) {
  ASSERT_TRUE(testing::counting_works());
  auto p =
      pipeline(fallback([](const Failure<HttpError>& f) { return -static_cast<int>(f.reason); }),
               bulwark::breaker(breaker), bulkhead(pool), bulwark::retry(retry), timeout(1s));
  const Ctx ctx(clock, {}, Deadline::after(clock, 1h));
  int calls = 0;
  auto flaky = [&](const Ctx&) -> Result {
    if (++calls % 3 != 0) return Unexpected(HttpError{503});
    return 1;
  };
  auto ok = [](const Ctx&) -> Result { return 2; };
  auto down = [](const Ctx&) -> Result { return Unexpected(HttpError{500}); };
  for (int i = 0; i < 4; ++i) (void)p(ctx, ok);  // warm up (thread_locals, first calls)

  std::optional<Expected<int, Failure<HttpError>>> failed, opened, rejected;
  const testing::Counts c = testing::count([&] {
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(p(ctx, ok));
    for (int i = 0; i < 10; ++i) ASSERT_EQ(*p(ctx, flaky), 1);
    failed.emplace(p(ctx, down));    // exhausts the retries: one failure for the breaker
    opened.emplace(p(ctx, down));    // the second consecutive failure opens it
    rejected.emplace(p(ctx, down));  // and this one never runs
  });
  EXPECT_EQ(c.allocations, 0u);
  if (testing::kCountsLocks) {
    EXPECT_EQ(c.locks, 0u);
  }
  EXPECT_EQ(breaker.state(), State::open);
  EXPECT_EQ(**failed, -static_cast<int>(Reason::retries_exhausted));
  EXPECT_EQ(**opened, -static_cast<int>(Reason::retries_exhausted));
  EXPECT_EQ(**rejected, -static_cast<int>(Reason::breaker_open));
}

TEST_F(PipelineTest, BreakerSeesTheWholeRetrySequenceByDefault) {
  auto p = pipeline(bulwark::breaker(breaker), bulwark::retry(retry));
  int calls = 0;
  auto twice_then_ok = [&](const Ctx&) -> Result {
    if (++calls % 3 != 0) return Unexpected(HttpError{503});
    return 1;
  };
  ASSERT_TRUE(p(Ctx(clock), twice_then_ok));
  auto snap = breaker.snapshot();
  EXPECT_EQ(snap.successes, 1u);
  EXPECT_EQ(snap.failures, 0u) << "the failed attempts were absorbed by the retry";

  auto always = [&](const Ctx&) -> Result {
    ++calls;
    return Unexpected(HttpError{503});
  };
  calls = 0;
  auto r = p(Ctx(clock), always);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::retries_exhausted);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(breaker.snapshot().failures, 1u) << "one failed call, not three attempts";
  EXPECT_EQ(breaker.state(), State::closed);
  (void)p(Ctx(clock), always);
  EXPECT_EQ(breaker.state(), State::open);

  auto rejected = p(Ctx(clock), always);
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.error().reason, Reason::breaker_open);
  EXPECT_EQ(rejected.error().stage, Stage::breaker);
  EXPECT_TRUE(rejected.error().rejected());
  EXPECT_EQ(rejected.error().retry_after, 10s);
  EXPECT_EQ(calls, 6);
}

TEST_F(PipelineTest, BreakerCanSeeEveryAttempt) {
  auto p = pipeline(bulwark::breaker(breaker, BreakerScope::attempt), bulwark::retry(retry));
  int calls = 0;
  auto r = p(Ctx(clock), [&](const Ctx&) -> Result {
    ++calls;
    return Unexpected(HttpError{503});
  });
  ASSERT_FALSE(r);
  // consecutive_failures = 2: the second attempt opened the breaker, the third was refused.
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r.error().reason, Reason::breaker_open);
  EXPECT_EQ(r.error().stage, Stage::breaker);
  EXPECT_EQ(r.error().attempts, 2u);
  ASSERT_TRUE(r.error().error);
  EXPECT_EQ(r.error().error->status, 503);
  EXPECT_EQ(breaker.snapshot().failures, 2u);
}

// A half-open probe turned away by a full bulkhead must give its probe slot back.
TEST_F(PipelineTest, ProbeRejectedByFullBulkheadDoesNotWedgeHalfOpen) {
  auto p = pipeline(bulwark::breaker(breaker), bulkhead(pool));
  auto fail = [](const Ctx&) -> Result { return Unexpected(HttpError{503}); };
  (void)p(Ctx(clock), fail);
  (void)p(Ctx(clock), fail);
  ASSERT_EQ(breaker.state(), State::open);
  clock.advance(10s);

  auto hog = pool.try_acquire();  // someone else holds the only slot
  ASSERT_TRUE(hog);
  auto r = p(Ctx(clock), [](const Ctx&) -> Result { return 1; });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::bulkhead_full);
  EXPECT_EQ(r.error().stage, Stage::bulkhead);
  EXPECT_EQ(breaker.state(), State::half_open);
  EXPECT_EQ(breaker.snapshot().half_open_in_flight, 0u) << "the probe slot was freed";
  EXPECT_EQ(breaker.snapshot().cancelled, 1u);

  hog->release();
  auto probe = p(Ctx(clock), [](const Ctx&) -> Result { return 1; });
  ASSERT_TRUE(probe);
  EXPECT_EQ(breaker.state(), State::closed);
}

TEST_F(PipelineTest, ExpiredDeadlineRunsNothingAndCancelsThePermit) {
  auto p = pipeline(bulwark::breaker(breaker), bulkhead(pool), bulwark::retry(retry));
  int calls = 0;
  auto r = p(Ctx(clock, {}, Deadline::at(0)), [&](const Ctx&) -> Result { return ++calls; });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::deadline_exceeded);
  EXPECT_EQ(r.error().attempts, 0u);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(breaker.snapshot().cancelled, 1u);
  EXPECT_EQ(pool.in_use(), 0u);
}

TEST_F(PipelineTest, IgnoredErrorsCountNowhere) {
  auto p = pipeline(bulwark::breaker(breaker), bulwark::retry(retry));
  int calls = 0;
  for (int i = 0; i < 5; ++i) {
    auto r = p(Ctx(clock), [&](const Ctx&) -> Result {
      ++calls;
      return Unexpected(HttpError{404});
    });
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().reason, Reason::call_error);
  }
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(breaker.snapshot().ignored, 5u);
  EXPECT_EQ(breaker.state(), State::closed);
}

TEST_F(PipelineTest, FallbackChosenByReason) {
  auto degraded =
      fallback([](const Failure<HttpError>& f) { return f.is_breaker_rejection() ? 503 : 500; },
               Reasons::breaker() | Reason::retries_exhausted);
  auto p = pipeline(degraded, bulwark::breaker(breaker), bulkhead(pool), bulwark::retry(retry));
  auto fail = [](const Ctx&) -> Result { return Unexpected(HttpError{503}); };

  auto hog = pool.try_acquire();
  auto full = p(Ctx(clock), fail);
  ASSERT_FALSE(full) << "bulkhead_full is not in the fallback's reasons";
  EXPECT_EQ(full.error().reason, Reason::bulkhead_full);
  hog->release();

  auto exhausted = p(Ctx(clock), fail);
  ASSERT_TRUE(exhausted);
  EXPECT_EQ(*exhausted, 500);
  (void)p(Ctx(clock), fail);
  auto open = p(Ctx(clock), fail);
  ASSERT_TRUE(open);
  EXPECT_EQ(*open, 503);
}

TEST_F(PipelineTest, FallbackValueFunctionAndDecline) {
  auto fail = [](const Ctx&) -> Result { return Unexpected(HttpError{500}); };
  EXPECT_EQ(*pipeline(fallback(42)).execute(Ctx(clock), fail), 42);
  EXPECT_EQ(*pipeline(fallback([] { return 43; })).execute(Ctx(clock), fail), 43);
  auto decline = fallback([](const Failure<HttpError>& f) -> Expected<int, Failure<HttpError>> {
    if (f.error && f.error->status == 500) return Unexpected(f);
    return 0;
  });
  auto r = pipeline(decline).execute(Ctx(clock), fail);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::call_error);
  EXPECT_EQ(r.error().error->status, 500);

  auto text = pipeline(fallback("degraded"))
                  .execute(Ctx(clock),
                           [](const Ctx&) -> Expected<std::string, int> { return Unexpected(1); });
  EXPECT_EQ(*text, "degraded");
}

TEST_F(PipelineTest, VoidCalls) {
  int calls = 0;
  auto p = pipeline(bulwark::breaker(breaker), bulwark::retry(retry));
  auto r = p(Ctx(clock), [&]() -> Expected<void, HttpError> {
    if (++calls < 2) return Unexpected(HttpError{503});
    return {};
  });
  EXPECT_TRUE(r);
  EXPECT_EQ(calls, 2);
  int fell_back = 0;
  auto f = pipeline(fallback([&] {
             ++fell_back;
           })).execute(Ctx(clock), []() -> Expected<void, int> { return Unexpected(0); });
  EXPECT_TRUE(f);
  EXPECT_EQ(fell_back, 1);
}

TEST_F(PipelineTest, EmptyPipelineJustCalls) {
  auto r = pipeline().execute(Ctx(clock),
                              [](const Ctx&) -> Result { return Unexpected(HttpError{500}); });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::call_error);
  EXPECT_EQ(r.error().stage, Stage::call);
  EXPECT_EQ(r.error().attempts, 1u);
}

// Stages go outermost first, each at most once; Pipeline static_asserts this predicate.
using Fb = FallbackStage<int>;
using Br = BreakerStage<Breaker>;
using Bh = BulkheadStage<BasicBulkhead<Clock>>;
using Rt = RetryStage<BasicRetry<Clock, ManualSleeper>, RetryFailures>;
static_assert(detail::strictly_ordered<Fb, Br, Bh, Rt, TimeoutStage>());
static_assert(detail::strictly_ordered<Br, TimeoutStage>());
static_assert(detail::strictly_ordered<>());
static_assert(!detail::strictly_ordered<Rt, Br>(), "retry outside the breaker");
static_assert(!detail::strictly_ordered<TimeoutStage, Rt>(), "timeout outside the retry");
static_assert(!detail::strictly_ordered<Fb, Fb>(), "a stage twice");
static_assert(!detail::strictly_ordered<Br, Bh, Fb>(), "fallback inside");

#if defined(__cpp_exceptions)
TEST(PipelineConfig, TimeoutMustBePositive) {
  try {
    (void)timeout(0ms);
    FAIL() << "accepted a zero timeout";
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "timeout");
  }
  EXPECT_THROW((void)timeout(-1s), InvalidConfig);
  EXPECT_EQ(timeout(std::chrono::hours::max()).timeout, Nanos::max()) << "saturates: no timeout";
}
#endif

#if defined(__cpp_exceptions)
TEST_F(PipelineTest, ExceptionsReleaseEverythingAndPropagate) {
  auto p = pipeline(fallback(0), bulwark::breaker(breaker), bulkhead(pool), bulwark::retry(retry));
  int calls = 0;
  EXPECT_THROW((void)p(Ctx(clock),
                       [&](const Ctx&) -> Result {
                         ++calls;
                         throw std::runtime_error("boom");
                       }),
               std::runtime_error);
  EXPECT_EQ(calls, 1) << "exceptions are not retried";
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(breaker.snapshot().failures, 1u);
  EXPECT_DOUBLE_EQ(budget.tokens(), 50.5);

  auto per_attempt = pipeline(bulwark::breaker(breaker, BreakerScope::attempt));
  EXPECT_THROW((void)per_attempt(Ctx(clock), [](const Ctx&) -> Result { throw 1; }), int);
  EXPECT_EQ(breaker.snapshot().failures, 2u);
}

// An exception thrown before any attempt ran (here by the idempotency-key hook) is
// not the dependency's failure: with either breaker scope the permit is cancelled,
// and however often it happens the breaker never opens on a dependency it never called.
TEST_F(PipelineTest, ExceptionBeforeAnyAttemptCancelsThePermitInBothScopes) {
  RetryConfig config{.name = "dep", .max_attempts = 3, .backoff = Backoff::constant(100ms)};
  config.idempotency_key = []() -> std::string { throw std::runtime_error("no key"); };
  BasicRetry<Clock, ManualSleeper> keyed(std::move(config), clock, ManualSleeper(clock), &budget);
  int calls = 0;
  auto call = [&](const Ctx&) -> Result { return ++calls; };

  for (const BreakerScope scope : {BreakerScope::call, BreakerScope::attempt}) {
    auto p = pipeline(fallback(-1), bulwark::breaker(breaker, scope), bulkhead(pool),
                      bulwark::retry(keyed));
    for (int i = 0; i < 3; ++i) {
      EXPECT_THROW((void)p(Ctx(clock), call), std::runtime_error);
    }
    EXPECT_EQ(pool.in_use(), 0u);
  }
  EXPECT_EQ(calls, 0);
  const auto snap = breaker.snapshot();
  EXPECT_EQ(snap.failures, 0u) << "no attempt ran: nothing to blame the dependency for";
  EXPECT_EQ(snap.cancelled, 6u);
  EXPECT_EQ(breaker.state(), State::closed);
  EXPECT_EQ(*pipeline(bulwark::breaker(breaker), bulwark::retry(retry))(Ctx(clock), call), 1)
      << "the dependency is still reachable";
}
#endif

}  // namespace
}  // namespace bulwark
