// Under C++23 a call may return std::expected<T, E> directly.

#include <gtest/gtest.h>

#include <expected>

#include "bulwark/pipeline.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using Ctx = BasicContext<ManualClock>;

struct Unavailable {
  int status = 503;
};

TEST(StdExpected, APipelineCallMayReturnStdExpected) {
  ManualClock clock;
  BasicRetry<ManualClock, ManualSleeper> retry(
      RetryConfig{.name = "dep", .max_attempts = 3, .backoff = Backoff::constant(10ms)}, clock,
      ManualSleeper(clock));
  auto p = pipeline(bulwark::retry(retry));
  int calls = 0;
  auto r = p(Ctx(clock), [&](const Ctx&) -> std::expected<int, Unavailable> {
    if (++calls < 3) return std::unexpected(Unavailable{});
    return 7;
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(calls, 3);

  auto v = p(Ctx(clock), [](const Ctx&) -> std::expected<void, Unavailable> {
    return std::unexpected(Unavailable{500});
  });
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().reason, Reason::retries_exhausted);
  ASSERT_TRUE(v.error().error.has_value());
  EXPECT_EQ(v.error().error->status, 500);
}

}  // namespace
}  // namespace bulwark
