// A pipeline takes std::error_code errors out of the box: a cancelled operation is the
// caller's doing (ignored, never retried), any other error is a failure (retried, and
// counted by the breaker).

#include "bulwark/error_traits.h"

#include <gtest/gtest.h>

#include <system_error>

#include "bulwark/pipeline.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using Ctx = BasicContext<ManualClock>;

TEST(ErrorTraits, StdErrorCodeIsAFailureUnlessTheOperationWasCancelled) {
  EXPECT_EQ(ErrorTraits<std::error_code>::outcome(std::make_error_code(std::errc::timed_out)),
            Outcome::failure);
  EXPECT_EQ(
      ErrorTraits<std::error_code>::outcome(std::make_error_code(std::errc::connection_refused)),
      Outcome::failure);
  EXPECT_EQ(
      ErrorTraits<std::error_code>::outcome(std::make_error_code(std::errc::operation_canceled)),
      Outcome::ignored);
  EXPECT_FALSE(ErrorTraits<std::error_code>::retry_after(std::error_code()).has_value());
}

TEST(ErrorTraits, APipelineRetriesErrorCodesAndStopsAtACancelledOne) {
  ManualClock clock;
  BasicRetry<ManualClock, ManualSleeper> retry(
      RetryConfig{.name = "dep", .max_attempts = 3, .backoff = Backoff::constant(10ms)}, clock,
      ManualSleeper(clock));
  auto p = pipeline(bulwark::retry(retry));
  int calls = 0;
  auto refused = [&](const Ctx&) -> Expected<int, std::error_code> {
    ++calls;
    return Unexpected(std::make_error_code(std::errc::connection_refused));
  };
  auto r = p(Ctx(clock), refused);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::retries_exhausted);
  EXPECT_EQ(calls, 3);

  calls = 0;
  auto cancelled = [&](const Ctx&) -> Expected<int, std::error_code> {
    ++calls;
    return Unexpected(std::make_error_code(std::errc::operation_canceled));
  };
  auto c = p(Ctx(clock), cancelled);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().reason, Reason::call_error);
  EXPECT_EQ(calls, 1) << "an ignored error is never retried";
}

// A result type of the user's own, taught to the pipeline by a ResultTraits
// specialization (as one would for an absl::StatusOr-like type).
struct MyResult {
  int value = 0;
  int error = 0;  // 0: ok
};

}  // namespace

template <>
struct ResultTraits<MyResult> {
  using value_type = int;
  using error_type = int;
  static bool has_value(const MyResult& r) noexcept { return r.error == 0; }
  static int take_value(MyResult&& r) noexcept { return r.value; }
  static int& error(MyResult& r) noexcept { return r.error; }
};

namespace {

TEST(ErrorTraits, AUserResultTypeWorksThroughResultTraits) {
  ManualClock clock;
  BasicRetry<ManualClock, ManualSleeper> retry(
      RetryConfig{.name = "dep", .max_attempts = 2, .backoff = Backoff::constant(1ms)}, clock,
      ManualSleeper(clock));
  auto p = pipeline(bulwark::retry(retry));
  int calls = 0;
  auto r = p(Ctx(clock), [&] { return ++calls == 1 ? MyResult{0, 5} : MyResult{42, 0}; });
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 42);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace bulwark
