// The async pipeline on a real io_context with real sockets on 127.0.0.1, in virtual
// time: every timer (backoff, timeout, deadline, the upstream's own delay) runs on a
// ManualClock bound to ManualTimerClock, and the test moves the time.

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

#include "asio/asio_support.h"
#include "bulwark/asio/pipeline.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;
using bulwark::asio::ManualTimerClock;
using Clock = ManualClock;
using Ctx = BasicContext<Clock>;
using Breaker = BasicCircuitBreaker<Clock>;
using Reply = Expected<std::string, Failure<NetError>>;

BreakerConfig breaker_config(std::uint32_t failures = 3) {
  BreakerConfig c;
  c.name = "upstream";
  c.consecutive_failures = failures;
  c.open_duration = 10s;
  return c;
}

class AsyncPipelineTest : public ::testing::Test {
 protected:
  Clock clock;
  ManualTimerClock::Binding bind{clock};
  ::asio::io_context io{1};
  ::asio::executor_work_guard<::asio::io_context::executor_type> work{io.get_executor()};
  Upstream<Clock> up{io.get_executor()};
  Breaker breaker{breaker_config(), clock};
  bulwark::asio::BasicAsyncBulkhead<Clock> pool{
      {.name = "upstream", .max_concurrent = 2, .max_queue = 4, .max_wait = 1s}, clock};
  BasicRetryBudget<Clock> budget{
      {.name = "upstream", .ratio = 0.5, .min_retries_per_second = 50, .max_tokens = 100}, clock};
  BasicRetry<Clock, ManualSleeper> retry{
      {.name = "upstream", .max_attempts = 3, .backoff = Backoff::constant(100ms)},
      clock,
      ManualSleeper(clock),
      &budget};

  auto call() {
    return [this](const Ctx& c) { return fetch<Clock>(up.endpoint(), c); };
  }
  Ctx ctx_with_deadline(Nanos d) { return Ctx(clock, {}, Deadline::after(clock, d)); }

  // Runs `p(ctx, call)` in its own coroutine (bound to `cancel`, if given) and drives
  // the io_context until it ends. The answer, and the virtual time it took.
  template <class P, class F>
  std::optional<Reply> run(const P& p, Ctx ctx, F f, ::asio::cancellation_signal* cancel = nullptr,
                           Nanos cancel_after = Nanos::zero()) {
    std::optional<Reply> out;
    const Ticks start = now_ticks(clock);
    auto body = [&]() -> ::asio::awaitable<void> { out.emplace(co_await p(ctx, f)); };
    if (cancel != nullptr) {
      ::asio::co_spawn(io, body(),
                       ::asio::bind_cancellation_slot(cancel->slot(), ::asio::detached));
      EXPECT_FALSE(drive(
          io, clock, [&] { return out.has_value(); }, cancel_after));
      cancel->emit(::asio::cancellation_type::terminal);
    } else {
      ::asio::co_spawn(io, body, ::asio::detached);
    }
    EXPECT_TRUE(drive(io, clock, [&] { return out.has_value(); }));
    took = Nanos(now_ticks(clock) - start);
    return out;
  }
  // Every socket the client opened has been closed (the upstream saw EOF).
  bool all_closed() {
    return drive(
        io, clock, [&] { return up.open() == 0; }, 1s);
  }
  Nanos took{};
};

TEST_F(AsyncPipelineTest, ASuccessGoesThroughEveryStage) {
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::asio::bulkhead(pool),
                                   bulwark::retry(retry), bulwark::timeout(300ms));
  auto r = run(p, ctx_with_deadline(1s), call());
  ASSERT_TRUE(r && *r) << to_string(r->error().reason);
  EXPECT_EQ(**r, "1");
  EXPECT_EQ(breaker.snapshot().successes, 1u);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(took, Nanos::zero());  // nothing waited: loopback I/O took no virtual time
  EXPECT_TRUE(all_closed());
}

TEST_F(AsyncPipelineTest, BackoffWaitsOnAVirtualTimerBetweenRetries) {
  up.fail_next(2);
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::retry(retry));
  auto r = run(p, Ctx(clock), call());
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(up.accepted(), 3);
  // Two backoffs of 100 ms, measured in 1 ms steps.
  EXPECT_GE(took, 200ms);
  EXPECT_LE(took, 202ms);
  EXPECT_EQ(retry.snapshot().retries, 2u);
  EXPECT_EQ(breaker.snapshot().successes, 1u);  // one outcome for the whole call
  EXPECT_EQ(breaker.snapshot().failures, 0u);
  // The call is counted once, by how it ended; a first-time success too.
  EXPECT_EQ(retry.snapshot().successful_with_retry, 1u);
  ASSERT_TRUE(run(p, Ctx(clock), call()).value());
  EXPECT_EQ(retry.snapshot().successful_without_retry, 1u);
  EXPECT_EQ(retry.snapshot().failed_with_retry + retry.snapshot().failed_without_retry, 0u);
}

TEST_F(AsyncPipelineTest, ATimeoutCancelsTheAttemptAndItsSocket) {
  up.set(Mode::ok, 500ms);  // answers too late for a 100 ms timeout
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::retry(retry),
                                   bulwark::timeout(100ms));
  auto r = run(p, ctx_with_deadline(10s), call());
  ASSERT_TRUE(r && !*r);
  const auto& f = r->error();
  EXPECT_EQ(f.reason, Reason::retries_exhausted);
  EXPECT_TRUE(f.timed_out);
  EXPECT_EQ(f.attempts, 3u);
  ASSERT_TRUE(f.error.has_value());
  EXPECT_EQ(f.error->code, ::asio::error::operation_aborted);  // the read was aborted
  // 3 attempts cut at 100 ms, 2 backoffs of 100 ms: 500 ms, not 3 x 500 ms.
  EXPECT_GE(took, 500ms);
  EXPECT_LE(took, 505ms);
  EXPECT_EQ(breaker.snapshot().failures, 1u);
  EXPECT_TRUE(all_closed());
  EXPECT_EQ(up.accepted(), 3);
}

TEST_F(AsyncPipelineTest, ATimedOutAttemptIsRetriedAndTheRetrySucceeds) {
  up.set(Mode::ok, 500ms);
  auto p = bulwark::asio::pipeline(bulwark::retry(retry), bulwark::timeout(100ms));
  std::optional<Reply> out;
  auto ctx = ctx_with_deadline(10s);
  auto f = call();
  ::asio::co_spawn(
      io, [&]() -> ::asio::awaitable<void> { out.emplace(co_await p(ctx, f)); }, ::asio::detached);
  ASSERT_TRUE(drive(io, clock, [&] { return up.accepted() == 1; }));
  up.set(Mode::ok);  // healed while the first attempt hangs
  ASSERT_TRUE(drive(io, clock, [&] { return out.has_value(); }));
  ASSERT_TRUE(*out) << to_string(out->error().reason);
  EXPECT_EQ(up.accepted(), 2);
  EXPECT_TRUE(all_closed());
}

TEST_F(AsyncPipelineTest, TheRequestDeadlineEndsANeverAnsweringCallOnTime) {
  up.set(Mode::never);
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::asio::bulkhead(pool),
                                   bulwark::retry(retry));
  auto r = run(p, ctx_with_deadline(200ms), call());
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::deadline_exceeded);
  EXPECT_EQ(r->error().attempts, 1u);
  EXPECT_FALSE(r->error().timed_out);  // the request's deadline, not a per-attempt timeout
  EXPECT_GE(took, 200ms);
  EXPECT_LE(took, 201ms);
  EXPECT_EQ(breaker.snapshot().failures, 1u);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_TRUE(all_closed());
}

TEST_F(AsyncPipelineTest, ACallerCancellationReleasesEveryPermitAsCancelled) {
  up.set(Mode::never);
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::asio::bulkhead(pool),
                                   bulwark::retry(retry), bulwark::timeout(1s));
  ::asio::cancellation_signal cancel;
  auto r = run(p, ctx_with_deadline(10s), call(), &cancel, 50ms);
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::cancelled);
  EXPECT_LE(took, 51ms);
  const auto s = breaker.snapshot();
  EXPECT_EQ(s.failures, 0u);  // never a failure
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_TRUE(all_closed());
}

TEST_F(AsyncPipelineTest, ACancellationDuringTheBackoffRefundsTheRetryToken) {
  up.set(Mode::fail);
  BasicRetry<Clock, ManualSleeper> slow{
      {.name = "upstream", .max_attempts = 3, .backoff = Backoff::constant(1s)},
      clock,
      ManualSleeper(clock),
      &budget};
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::retry(slow));
  const auto before = budget.snapshot();
  ::asio::cancellation_signal cancel;
  auto r = run(p, Ctx(clock), call(), &cancel, 500ms);
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::cancelled);
  EXPECT_EQ(r->error().attempts, 1u);
  EXPECT_LE(took, 501ms);
  EXPECT_EQ(slow.snapshot().cancelled, 1u);
  EXPECT_EQ(budget.snapshot().refunded, before.refunded + 1);
  EXPECT_EQ(breaker.snapshot().failures, 0u);
  EXPECT_EQ(breaker.snapshot().cancelled, 1u);
}

TEST_F(AsyncPipelineTest, ACallerCancellationReachesADirectlyAwaitedCall) {
  // No deadline, no timeout: the attempt is awaited in place, on the caller's slot.
  up.set(Mode::never);
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker));
  ::asio::cancellation_signal cancel;
  auto r = run(p, Ctx(clock), call(), &cancel, 20ms);
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::cancelled);
  EXPECT_EQ(breaker.snapshot().cancelled, 1u);
  EXPECT_EQ(breaker.snapshot().failures, 0u);
  EXPECT_TRUE(all_closed());
}

TEST_F(AsyncPipelineTest, AnOpenBreakerRejectsWithRetryAfterAndTheFallbackAnswersTheRest) {
  up.set(Mode::fail);
  Breaker quick{breaker_config(1), clock};
  auto p = bulwark::asio::pipeline(
      bulwark::fallback(std::string("degraded"), Reasons::all().except(Reasons::breaker())),
      bulwark::breaker(quick), bulwark::timeout(100ms));
  auto first = run(p, ctx_with_deadline(1s), call());
  ASSERT_TRUE(first && *first);
  EXPECT_EQ(**first, "degraded");  // the failure, answered by the fallback
  auto second = run(p, ctx_with_deadline(1s), call());
  ASSERT_TRUE(second && !*second);
  EXPECT_TRUE(second->error().is_breaker_rejection());
  EXPECT_EQ(second->error().retry_after, 10s);
  EXPECT_EQ(up.accepted(), 1);  // the rejection never reached the upstream
}

TEST_F(AsyncPipelineTest, AnIgnoredErrorIsNeitherRetriedNorAFailure) {
  up.set(Mode::reject);
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::retry(retry));
  auto r = run(p, Ctx(clock), call());
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::call_error);
  EXPECT_EQ(up.accepted(), 1);
  EXPECT_EQ(breaker.snapshot().ignored, 1u);
}

TEST_F(AsyncPipelineTest, APerAttemptBreakerStopsTheRetriesWhenItOpens) {
  up.set(Mode::fail);
  Breaker b{breaker_config(2), clock};
  auto p =
      bulwark::asio::pipeline(bulwark::breaker(b, BreakerScope::attempt), bulwark::retry(retry));
  auto r = run(p, Ctx(clock), call());
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::breaker_open);
  EXPECT_EQ(r->error().attempts, 2u);
  EXPECT_EQ(up.accepted(), 2);
}

TEST_F(AsyncPipelineTest, AHalfOpenProbeTurnedAwayByAFullBulkheadFreesItsSlot) {
  Breaker b{breaker_config(1), clock};
  b.try_acquire()->record_failure();  // OPEN
  clock.advance(10s);                 // the next request is the probe
  bulwark::asio::BasicAsyncBulkhead<Clock> tiny{
      {.name = "tiny", .max_concurrent = 1, .max_queue = 0}, clock};
  auto held = tiny.try_acquire();
  ASSERT_TRUE(held);
  auto p = bulwark::asio::pipeline(bulwark::breaker(b), bulwark::asio::bulkhead(tiny));
  auto r = run(p, Ctx(clock), call());
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::bulkhead_full);
  EXPECT_EQ(b.snapshot().half_open_in_flight, 0u);
  held->release();
  auto again = run(p, Ctx(clock), call());
  ASSERT_TRUE(again && *again);  // the probe slot was free: the breaker closes
  EXPECT_EQ(b.state(), State::closed);
}

TEST_F(AsyncPipelineTest, AnExceptionFromTheCallPropagatesAndCountsAsAFailure) {
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::asio::bulkhead(pool),
                                   bulwark::retry(retry), bulwark::timeout(100ms));
  auto throwing = [](const Ctx&) -> ::asio::awaitable<Expected<std::string, NetError>> {
    throw std::runtime_error("boom");
    co_return std::string();
  };
  bool caught = false;
  auto ctx = Ctx(clock);
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        try {
          (void)co_await p(ctx, throwing);
        } catch (const std::runtime_error&) {
          caught = true;
        }
      },
      ::asio::detached);
  ASSERT_TRUE(drive(io, clock, [&] { return caught; }));
  EXPECT_EQ(breaker.snapshot().failures, 1u);
  EXPECT_EQ(retry.snapshot().retries, 0u);
  EXPECT_EQ(pool.in_use(), 0u);
}

TEST_F(AsyncPipelineTest, AHedgeWinsWhenThePrimaryIsSlowAndThePrimaryIsCancelled) {
  up.set(Mode::ok, 500ms);
  auto p = bulwark::asio::pipeline(
      bulwark::breaker(breaker), bulwark::retry(retry),
      bulwark::asio::hedge({.max_hedges = 1, .delay = bulwark::asio::HedgeDelay::fixed(50ms)}),
      bulwark::timeout(1s));
  std::optional<Reply> out;
  auto ctx = ctx_with_deadline(10s);
  auto f = call();
  ::asio::co_spawn(
      io, [&]() -> ::asio::awaitable<void> { out.emplace(co_await p(ctx, f)); }, ::asio::detached);
  ASSERT_TRUE(drive(io, clock, [&] { return up.accepted() == 1; }));
  up.set(Mode::ok);  // the hedge will be answered at once
  const auto withdrawn = budget.snapshot().withdrawn;
  ASSERT_TRUE(drive(io, clock, [&] { return out.has_value(); }));
  ASSERT_TRUE(*out);
  EXPECT_EQ(**out, "1");
  EXPECT_EQ(up.accepted(), 2);
  EXPECT_EQ(up.answered(), 1);                            // the primary never answered
  EXPECT_EQ(budget.snapshot().withdrawn, withdrawn + 1);  // the hedge was paid for
  EXPECT_EQ(breaker.snapshot().successes, 1u);            // one outcome for the call
  EXPECT_EQ(breaker.snapshot().permitted, 1u);
  EXPECT_TRUE(all_closed());  // the primary's socket too
}

TEST_F(AsyncPipelineTest, NoHedgeStartsWhenTheBudgetRefusesIt) {
  BasicRetryBudget<Clock> empty{
      {.name = "empty", .ratio = 0, .min_retries_per_second = 0, .max_tokens = 1}, clock};
  up.set(Mode::ok, 200ms);
  auto p = bulwark::asio::pipeline(
      bulwark::asio::hedge({.max_hedges = 2, .delay = bulwark::asio::HedgeDelay::fixed(10ms)},
                           empty),
      bulwark::timeout(1s));
  auto r = run(p, ctx_with_deadline(10s), call());
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(up.accepted(), 1);
  EXPECT_GE(took, 200ms);
  EXPECT_EQ(empty.snapshot().rejected, 1u);
}

TEST_F(AsyncPipelineTest, APercentileHedgeDelayFollowsRecentLatencies) {
  bulwark::asio::LatencyTracker latency;
  auto p = bulwark::asio::pipeline(
      bulwark::asio::hedge({.max_hedges = 1,
                            .delay = bulwark::asio::HedgeDelay::percentile(latency, 0.9, 500ms),
                            .record_to = &latency},
                           budget),
      bulwark::timeout(5s));
  up.set(Mode::ok, 20ms);
  for (std::uint64_t i = 0; i < bulwark::asio::LatencyTracker::min_samples(); ++i) {
    auto r = run(p, ctx_with_deadline(10s), call());
    ASSERT_TRUE(r && *r);
  }
  EXPECT_EQ(up.accepted(), 32);  // a 500 ms fallback delay: no hedge yet
  const Nanos p90 = latency.percentile(0.9);
  EXPECT_GE(p90, 20ms);
  EXPECT_LE(p90, 22ms);
  up.set(Mode::ok, 300ms);  // now the upstream is slow: hedged after ~p90
  const int before = up.accepted();
  auto r = run(p, ctx_with_deadline(10s), call());
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(up.accepted(), before + 2);
}

TEST(AsyncPipelineConfig, AHedgeConfigIsChecked) {
  EXPECT_THROW(bulwark::asio::hedge({.max_hedges = 0}), InvalidConfig);
  EXPECT_THROW(bulwark::asio::hedge({.max_hedges = 4}), InvalidConfig);
  bulwark::asio::LatencyTracker t;
  EXPECT_THROW(bulwark::asio::hedge({.delay = bulwark::asio::HedgeDelay::percentile(t, 1.5, 1ms)}),
               InvalidConfig);
}

}  // namespace
}  // namespace bulwark::testing
