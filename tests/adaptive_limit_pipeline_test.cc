// The adaptive limit as the synchronous pipeline's bulkhead stage (pipeline.h).

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <stdexcept>

#include "bulwark/adaptive_limit.h"
#include "bulwark/pipeline.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

struct HttpError {
  int status = 503;
  Outcome outcome() const { return status >= 500 ? Outcome::failure : Outcome::ignored; }
};

using Ctx = BasicContext<ManualClock>;
using Result = Expected<int, HttpError>;

class AdaptivePipeline : public ::testing::Test {
 protected:
  static AdaptiveLimitConfig limit_config() {
    AdaptiveLimitConfig c;
    c.name = "dep";
    c.algorithm = AdaptiveAlgorithm::aimd;
    c.min_limit = 1;
    c.max_limit = 10;
    c.initial_limit = 2;
    c.window_samples = 1;  // every settled call closes a window
    return c;
  }
  ManualClock clock;
  BasicAdaptiveLimit<ManualClock> limit{limit_config(), clock};
};

TEST_F(AdaptivePipeline, ASuccessCompletesWithItsRoundTrip) {
  auto p = pipeline(adaptive_limit(limit));
  auto r = p(Ctx(clock), [&](const Ctx&) -> Result {
    EXPECT_EQ(limit.in_flight(), 1u);
    clock.advance(5ms);
    return 7;
  });
  ASSERT_TRUE(r);
  const auto s = limit.snapshot();
  EXPECT_EQ(s.windows, 1u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.limit, 3u);  // AIMD: 1 of 2 in flight is "in use": +1
}

TEST_F(AdaptivePipeline, AFullLimitRefusesAtOnceWithoutCalling) {
  auto a = limit.try_acquire(), b = limit.try_acquire();
  ASSERT_TRUE(a && b);
  auto p = pipeline(fallback([](const Failure<HttpError>& f) {
                      EXPECT_EQ(f.reason, Reason::bulkhead_full);
                      EXPECT_EQ(f.stage, Stage::bulkhead);
                      EXPECT_EQ(f.attempts, 0u);
                      return -1;
                    }),
                    adaptive_limit(limit));
  int calls = 0;
  EXPECT_EQ(*p(Ctx(clock), [&]() -> Result { return ++calls; }), -1);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(limit.snapshot().rejected, 1u);
}

TEST_F(AdaptivePipeline, ATimedOutAttemptIsADrop) {
  auto p = pipeline(adaptive_limit(limit), timeout(1s));
  auto r = p(Ctx(clock), [&](const Ctx&) -> Result {
    clock.advance(2s);
    return Unexpected(HttpError{504});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::timeout);
  const auto s = limit.snapshot();
  EXPECT_EQ(s.dropped, 1u);
  EXPECT_EQ(s.windows, 1u);
  EXPECT_EQ(s.limit, 1u);  // AIMD: 2 × 0.9
}

TEST_F(AdaptivePipeline, TheDependencysOwnErrorsAreIgnored) {
  auto p = pipeline(adaptive_limit(limit));
  EXPECT_FALSE(p(Ctx(clock), [&]() -> Result { return Unexpected(HttpError{500}); }));
  EXPECT_FALSE(p(Ctx(clock), [&]() -> Result { return Unexpected(HttpError{404}); }));
  const auto s = limit.snapshot();
  EXPECT_EQ(s.windows, 0u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.limit, 2u);
}

// An error that says the dependency is overloaded (its own overloaded(), here a 503 or
// 429) is a drop, like a timeout: the limit shrinks.
struct ShedError {
  int status = 503;
  Outcome outcome() const { return Outcome::failure; }
  bool overloaded() const { return status == 503 || status == 429; }
};

TEST_F(AdaptivePipeline, AnOverloadErrorIsADrop) {
  auto p = pipeline(adaptive_limit(limit));
  auto r = p(Ctx(clock), [&]() -> Expected<int, ShedError> { return Unexpected(ShedError{503}); });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::call_error);
  auto s = limit.snapshot();
  EXPECT_EQ(s.dropped, 1u);
  EXPECT_EQ(s.limit, 1u);  // AIMD: 2 × 0.9
  // Another error of the same type that does not say so is ignored.
  EXPECT_FALSE(
      p(Ctx(clock), [&]() -> Expected<int, ShedError> { return Unexpected(ShedError{500}); }));
  s = limit.snapshot();
  EXPECT_EQ(s.dropped, 1u);
  EXPECT_EQ(s.windows, 1u);
}

// Without overloaded(), an error carrying the server's retry-after hint (come back
// later) is the overload signal.
struct HintedError {
  std::optional<Nanos> hint;
  Outcome outcome() const { return Outcome::failure; }
  std::optional<Nanos> retry_after() const { return hint; }
};

TEST_F(AdaptivePipeline, AnErrorWithARetryAfterHintIsADrop) {
  EXPECT_TRUE(is_overload(HintedError{Nanos(1s)}));
  EXPECT_FALSE(is_overload(HintedError{}));
  EXPECT_FALSE(is_overload(HttpError{503}));  // no hint, no overloaded(): not said
  auto p = pipeline(adaptive_limit(limit));
  EXPECT_FALSE(p(Ctx(clock), [&]() -> Expected<int, HintedError> {
    return Unexpected(HintedError{Nanos(2s)});
  }));
  EXPECT_EQ(limit.snapshot().dropped, 1u);
  EXPECT_FALSE(
      p(Ctx(clock), [&]() -> Expected<int, HintedError> { return Unexpected(HintedError{}); }));
  EXPECT_EQ(limit.snapshot().dropped, 1u);
}

#if defined(__cpp_exceptions)
TEST_F(AdaptivePipeline, AnExceptionFreesTheSlotUnsettled) {
  auto p = pipeline(adaptive_limit(limit));
  EXPECT_THROW(p(Ctx(clock), []() -> Result { throw std::runtime_error("boom"); }),
               std::runtime_error);
  EXPECT_EQ(limit.in_flight(), 0u);
  EXPECT_EQ(limit.snapshot().windows, 0u);
}
#endif

}  // namespace
}  // namespace bulwark
