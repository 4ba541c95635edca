// When an attempt counts as timed out, in virtual time: only if the pipeline cancelled
// it (its per-attempt deadline or the request's passed, and the pipeline emitted the
// cancellation). An answer that arrived before the cancellation was emitted is the
// attempt's own — a success, an ignored error, a failure — even when it arrived after
// the deadline; an answer that arrived after it is a timeout, unless it is a success.
//
// The order of the answer and the deadline's timer is set by the test: the call waits
// on a gate (a timer of the test's that never expires); the test moves the clock past
// the deadline and opens the gate (cancel() posts the call's completion) before the
// io_context runs again, so the call's answer is handled before the deadline's timer.

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "asio/virtual_call.h"
#include "bulwark/asio/pipeline.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;

BreakerConfig breaker_config() {
  BreakerConfig c;
  c.name = "upstream";
  c.consecutive_failures = 3;
  c.open_duration = 10s;
  return c;
}

NetError rejected() { return NetError{{}, true}; }  // an ignored outcome: the caller's fault

class AttemptEndTest : public VirtualTimeTest {
 protected:
  BasicCircuitBreaker<VClock> breaker{breaker_config(), clock};
  BasicRetryBudget<VClock> budget{
      {.name = "upstream", .ratio = 0.5, .min_retries_per_second = 50, .max_tokens = 100}, clock};
  BasicRetry<VClock, ManualSleeper> retry{
      {.name = "upstream", .max_attempts = 3, .backoff = Backoff::constant(100ms)},
      clock,
      ManualSleeper(clock),
      &budget};
  bulwark::asio::Timer<VClock> gate{io.get_executor()};
  bool opened = false;  // the gate was opened by the test, not cancelled by the pipeline
  int started = 0;

  // The first attempt waits at the gate and answers `answer` when the test opens it
  // (operation_aborted if the pipeline cancels it first); later ones fail at once.
  auto gated(VReply answer) {
    return [this, answer](const VCtx&) -> ::asio::awaitable<VReply> {
      if (++started > 1) co_return Unexpected(NetError{});
      gate.expires_at(bulwark::asio::ManualTimerClock::time_point::max());
      co_await gate.async_wait(::asio::experimental::as_tuple(::asio::use_awaitable));
      if (!opened) co_return aborted();
      co_return answer;
    };
  }

  // Starts `p`'s call, lets it reach the gate, moves the clock to `at` (past the
  // deadline) and opens the gate before the io_context runs again; then drives the
  // call to its end.
  template <class P, class F>
  std::optional<VResult> answer_at(const P& p, VCtx ctx, F f, Nanos at) {
    std::optional<VResult> out;
    ::asio::co_spawn(
        io, [&]() -> ::asio::awaitable<void> { out.emplace(co_await p(ctx, f)); },
        ::asio::detached);
    settle();
    EXPECT_EQ(started, 1);
    EXPECT_FALSE(out.has_value());
    clock.advance(at);
    opened = true;
    gate.cancel();  // the call's completion is queued now, the deadline's timer not yet
    drive(io, clock, [&] { return out.has_value(); });
    return out;
  }
  void settle() {
    drive(
        io, clock, [] { return false; }, Nanos::zero());
  }
};

TEST_F(AttemptEndTest, AnIgnoredErrorJustAfterTheTimeoutButBeforeItsCancellationIsTheCallsOwn) {
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::retry(retry),
                                   bulwark::timeout(100ms));
  auto r = answer_at(p, VCtx(clock), gated(Unexpected(rejected())), 100ms + 1us);
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::call_error);
  EXPECT_FALSE(r->error().timed_out);
  ASSERT_TRUE(r->error().error.has_value());
  EXPECT_TRUE(r->error().error->ignored);
  EXPECT_EQ(started, 1);  // not retried
  EXPECT_EQ(retry.snapshot().retries, 0u);
  const auto s = breaker.snapshot();
  EXPECT_EQ(s.ignored, 1u);
  EXPECT_EQ(s.failures, 0u);
}

TEST_F(AttemptEndTest, AnIgnoredErrorJustAfterTheRequestDeadlineButBeforeItsCancellationIsOwn) {
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::retry(retry));
  auto r = answer_at(p, VCtx(clock, {}, Deadline::after(clock, 100ms)),
                     gated(Unexpected(rejected())), 100ms + 1us);
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::call_error);
  EXPECT_FALSE(r->error().timed_out);
  EXPECT_EQ(started, 1);
  const auto s = breaker.snapshot();
  EXPECT_EQ(s.ignored, 1u);
  EXPECT_EQ(s.failures, 0u);
}

TEST_F(AttemptEndTest, AFailureJustAfterTheTimeoutButBeforeItsCancellationIsACallError) {
  // Its own failure goes through the retry-on predicate (here: retry nothing the call
  // answers); a timeout would have been retried.
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker),
                                   bulwark::retry(retry, [](const NetError&) { return false; }),
                                   bulwark::timeout(100ms));
  auto r = answer_at(p, VCtx(clock), gated(Unexpected(NetError{})), 100ms + 1us);
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::call_error);
  EXPECT_FALSE(r->error().timed_out);
  EXPECT_EQ(started, 1);
  EXPECT_EQ(breaker.snapshot().failures, 1u);
}

TEST_F(AttemptEndTest, AnAnswerAfterTheCancellationWasEmittedIsATimeout) {
  // The call is slow to honour the cancellation: the pipeline cancels it at 100 ms,
  // it answers with an ignored error at 100.5 ms. That is a timeout: a failure.
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::timeout(100ms));
  auto call = [](const VCtx&) -> ::asio::awaitable<VReply> {
    co_await sleep_deaf(100ms + 500us);
    co_return Unexpected(rejected());
  };
  auto r = run(p, VCtx(clock), call);
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::timeout);
  EXPECT_TRUE(r->error().timed_out);
  EXPECT_EQ(breaker.snapshot().failures, 1u);
  EXPECT_EQ(breaker.snapshot().ignored, 0u);
}

TEST_F(AttemptEndTest, ASuccessAfterTheCancellationWasEmittedIsASuccess) {
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::timeout(100ms));
  auto call = [](const VCtx&) -> ::asio::awaitable<VReply> {
    co_await sleep_deaf(100ms + 500us);
    co_return std::string("late");
  };
  auto r = run(p, VCtx(clock), call);
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(**r, "late");
  EXPECT_EQ(breaker.snapshot().successes, 1u);
}

TEST_F(AttemptEndTest, ARequestDeadlineThatCancelsTheAttemptEndsTheCall) {
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::retry(retry));
  auto call = [](const VCtx&) -> ::asio::awaitable<VReply> {
    co_await sleep_deaf(100ms + 500us);
    co_return Unexpected(rejected());
  };
  auto r = run(p, VCtx(clock, {}, Deadline::after(clock, 100ms)), call);
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::deadline_exceeded);
  EXPECT_EQ(breaker.snapshot().failures, 1u);
}

}  // namespace
}  // namespace bulwark::testing
