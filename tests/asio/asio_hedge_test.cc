// Hedged attempts in virtual time: the first success of a group wins when it ends,
// however it ends (a hedge whose call answers without ever suspending included), the
// other attempts are cancelled, and the latency recorded is the winner's own.

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "asio/virtual_call.h"
#include "bulwark/asio/hedge.h"
#include "bulwark/asio/pipeline.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;
using bulwark::asio::HedgeDelay;
using bulwark::asio::LatencyTracker;

BreakerConfig breaker_config() {
  BreakerConfig c;
  c.name = "upstream";
  c.consecutive_failures = 3;
  c.open_duration = 10s;
  return c;
}

class AsyncHedgeTest : public VirtualTimeTest {
 protected:
  BasicCircuitBreaker<VClock> breaker{breaker_config(), clock};
  BasicRetryBudget<VClock> budget{
      {.name = "upstream", .ratio = 0.5, .min_retries_per_second = 50, .max_tokens = 100}, clock};
  BasicRetry<VClock, ManualSleeper> retry{
      {.name = "upstream", .max_attempts = 3, .backoff = Backoff::constant(100ms)},
      clock,
      ManualSleeper(clock),
      &budget};
};

TEST_F(AsyncHedgeTest, AHedgeThatAnswersAtOnceWinsAtOnceAndThePrimaryIsCancelled) {
  LatencyTracker latency;
  auto p = bulwark::asio::pipeline(
      bulwark::breaker(breaker), bulwark::retry(retry),
      bulwark::asio::hedge(
          {.max_hedges = 1, .delay = HedgeDelay::fixed(50ms), .record_to = &latency}),
      bulwark::timeout(20s));
  // Enough calls for the tracker to answer a percentile.
  for (std::uint64_t i = 0; i < LatencyTracker::min_samples(); ++i) {
    int started = 0;
    bool primary_cancelled = false;
    auto call = [&](const VCtx&) -> ::asio::awaitable<VReply> {
      if (++started == 1) {
        if (!co_await sleep_for(10s)) {
          primary_cancelled = true;
          co_return aborted();
        }
        co_return std::string("primary");
      }
      co_return std::string("hedge");  // without suspending
    };
    auto r = run(p, VCtx(clock), call);
    ASSERT_TRUE(r && *r) << (r ? to_string(r->error().reason) : "no answer");
    EXPECT_EQ(**r, "hedge");
    EXPECT_EQ(took, 50ms);  // when the hedge started, not when the primary would have ended
    EXPECT_EQ(started, 2);
    EXPECT_TRUE(primary_cancelled);
  }
  const auto s = breaker.snapshot();
  EXPECT_EQ(s.successes, LatencyTracker::min_samples());
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(latency.count(), LatencyTracker::min_samples());
  // The winner's own latency: the hedge answered as soon as it started. Never the
  // primary's 10 s, and not the 50 ms the caller waited (that is the hedge delay).
  EXPECT_EQ(latency.percentile(1.0), Nanos::zero());
}

TEST_F(AsyncHedgeTest, TheFirstSuccessToEndWinsNotTheFirstStarted) {
  // The primary answers at 80 ms, the hedge (started at 50 ms) at 60 ms: the hedge
  // wins with its own 10 ms, and the primary, still running, is cancelled.
  LatencyTracker latency;
  auto p = bulwark::asio::pipeline(
      bulwark::asio::hedge(
          {.max_hedges = 1, .delay = HedgeDelay::fixed(50ms), .record_to = &latency}, budget),
      bulwark::timeout(1s));
  int started = 0;
  bool primary_cancelled = false;
  auto call = [&](const VCtx&) -> ::asio::awaitable<VReply> {
    if (++started == 1) {
      if (!co_await sleep_for(80ms)) {
        primary_cancelled = true;
        co_return aborted();
      }
      co_return std::string("primary");
    }
    co_await sleep_for(10ms);
    co_return std::string("hedge");
  };
  auto r = run(p, VCtx(clock), call);
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(**r, "hedge");
  EXPECT_EQ(took, 60ms);
  EXPECT_TRUE(primary_cancelled);
  EXPECT_EQ(latency.count(), 1u);
}

TEST_F(AsyncHedgeTest, AHedgeThatFailsAtOnceLeavesThePrimaryToAnswer) {
  // The hedge's own failure is looked at when it ends; the group goes on with the
  // primary, whose success is the call's.
  auto p = bulwark::asio::pipeline(
      bulwark::breaker(breaker),
      bulwark::asio::hedge({.max_hedges = 1, .delay = HedgeDelay::fixed(50ms)}, budget),
      bulwark::timeout(1s));
  int started = 0;
  auto call = [&](const VCtx&) -> ::asio::awaitable<VReply> {
    if (++started == 1) {
      co_await sleep_for(200ms);
      co_return std::string("primary");
    }
    co_return Unexpected(NetError{});
  };
  auto r = run(p, VCtx(clock), call);
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(**r, "primary");
  EXPECT_EQ(took, 200ms);
  EXPECT_EQ(breaker.snapshot().successes, 1u);
  EXPECT_EQ(breaker.snapshot().failures, 0u);
}

}  // namespace
}  // namespace bulwark::testing
