// The adaptive limit (bulwark/adaptive_limit.h) in the async pipeline's bulkhead place,
// in virtual time: admitted or refused at once (never queued), completed with the
// call's virtual round trip, dropped on a timeout, ignored when the caller cancels.

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "asio/virtual_call.h"
#include "bulwark/adaptive_limit.h"
#include "bulwark/asio/pipeline.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;

AdaptiveLimitConfig limit_config() {
  AdaptiveLimitConfig c;
  c.name = "upstream";
  c.algorithm = AdaptiveAlgorithm::aimd;
  c.min_limit = 1;
  c.max_limit = 10;
  c.initial_limit = 2;
  c.window_samples = 1;  // every settled call closes a window
  c.aimd.timeout = 1s;
  return c;
}

class AsyncAdaptiveLimitTest : public VirtualTimeTest {
 protected:
  BasicAdaptiveLimit<VClock> limit{limit_config(), clock};

  static auto slow(Nanos d, VReply answer) {
    return [d, answer](const VCtx&) -> ::asio::awaitable<VReply> {
      if (!co_await sleep_for(d)) co_return aborted();
      co_return answer;
    };
  }
};

TEST_F(AsyncAdaptiveLimitTest, ASuccessCompletesWithItsVirtualRoundTrip) {
  auto p = bulwark::asio::pipeline(adaptive_limit(limit));
  auto r = run(p, VCtx(clock), slow(300ms, std::string("ok")));
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(took, 300ms);
  const auto s = limit.snapshot();
  EXPECT_EQ(s.windows, 1u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.limit, 3u);  // 300 ms < the AIMD timeout, limit in use: +1
}

TEST_F(AsyncAdaptiveLimitTest, ARoundTripPastTheAimdTimeoutBacksOff) {
  auto p = bulwark::asio::pipeline(adaptive_limit(limit));
  auto r = run(p, VCtx(clock), slow(2s, std::string("late")));
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(limit.limit(), 1u);  // 2 × 0.9
}

TEST_F(AsyncAdaptiveLimitTest, AFullLimitRefusesAtOnce) {
  auto a = limit.try_acquire(), b = limit.try_acquire();
  ASSERT_TRUE(a && b);
  auto p = bulwark::asio::pipeline(adaptive_limit(limit));
  auto r = run(p, VCtx(clock), slow(1ms, std::string("never")));
  ASSERT_TRUE(r);
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().reason, Reason::bulkhead_full);
  EXPECT_EQ(r->error().stage, Stage::bulkhead);
  EXPECT_EQ(took, 0ms);
  EXPECT_EQ(limit.snapshot().rejected, 1u);
}

TEST_F(AsyncAdaptiveLimitTest, ATimedOutAttemptIsADrop) {
  auto p = bulwark::asio::pipeline(adaptive_limit(limit), timeout(100ms));
  auto r = run(p, VCtx(clock), slow(1s, std::string("late")));
  ASSERT_TRUE(r);
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().reason, Reason::timeout);
  const auto s = limit.snapshot();
  EXPECT_EQ(s.dropped, 1u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.limit, 1u);
}

}  // namespace
}  // namespace bulwark::testing
