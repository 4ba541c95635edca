// Lifetimes at every point where a pipeline call can be suspended, in virtual time:
// the call is driven until it is suspended there, then ended one of three ways —
// the io_context is destroyed (the call's coroutines are destroyed without
// completing), the caller's cancellation is emitted and the call runs to its end, or
// the cancellation is emitted and the io_context destroyed before it is handled.
// Each way, under ASan: no use after free, no leaked coroutine frame (every call frame
// started is destroyed), and everything the call held is given back — the breaker
// permit counted as cancelled (never a failure), the bulkhead slot and queue place
// free, a retry ticket taken for a backoff refunded, a hedge's token spent, nothing
// recorded in the latency tracker.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "asio/virtual_call.h"
#include "bulwark/asio/bulkhead.h"
#include "bulwark/asio/hedge.h"
#include "bulwark/asio/pipeline.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;

enum class Point {
  bulkhead_wait,       // queued in the AsyncBulkhead
  attempt_direct,      // the attempt in flight, awaited in place (no timer)
  attempt_timed,       // the attempt in flight, its per-attempt timeout armed
  backoff,             // a failed attempt's retry backoff
  hedge_delay,         // the primary in flight, the hedge delay armed
  hedge_in_flight,     // the primary and a hedge in flight
  draining_cancelled,  // the pipeline cancelled an attempt that has not ended yet
};
enum class End { destroy_context, caller_cancel, cancel_then_destroy };

std::string name_of(Point p) {
  switch (p) {
    case Point::bulkhead_wait:
      return "BulkheadWait";
    case Point::attempt_direct:
      return "AttemptDirect";
    case Point::attempt_timed:
      return "AttemptTimed";
    case Point::backoff:
      return "Backoff";
    case Point::hedge_delay:
      return "HedgeDelay";
    case Point::hedge_in_flight:
      return "HedgeInFlight";
    case Point::draining_cancelled:
      return "DrainingCancelled";
  }
  return "?";
}
std::string name_of(End e) {
  switch (e) {
    case End::destroy_context:
      return "DestroyContext";
    case End::caller_cancel:
      return "CallerCancel";
    case End::cancel_then_destroy:
      return "CancelThenDestroy";
  }
  return "?";
}

BreakerConfig breaker_config() {
  BreakerConfig c;
  c.name = "upstream";
  c.consecutive_failures = 3;
  c.open_duration = 10s;
  return c;
}

// Counts a coroutine frame's end, whether it completed or was destroyed suspended.
struct FrameEnd {
  int* count;
  ~FrameEnd() { ++*count; }
};

class PipelineLifetimeTest : public ::testing::TestWithParam<std::tuple<Point, End>> {
 protected:
  VClock clock;
  bulwark::asio::ManualTimerClock::Binding bind{clock};
  BasicCircuitBreaker<VClock> breaker{breaker_config(), clock};
  bulwark::asio::BasicAsyncBulkhead<VClock> pool{
      {.name = "upstream", .max_concurrent = 2, .max_queue = 4, .max_wait = 60s}, clock};
  BasicRetryBudget<VClock> budget{
      {.name = "upstream", .ratio = 0.5, .min_retries_per_second = 50, .max_tokens = 100}, clock};
  BasicRetry<VClock, ManualSleeper> retry{
      {.name = "upstream", .max_attempts = 3, .backoff = Backoff::constant(1s)},
      clock,
      ManualSleeper(clock),
      &budget};
  bulwark::asio::LatencyTracker latency;
  ::asio::cancellation_signal cancel;
  std::unique_ptr<::asio::io_context> io = std::make_unique<::asio::io_context>(1);

  int started = 0;      // calls started
  int call_frames = 0;  // call frames ended (completed or destroyed)
  int body_frames = 0;  // the caller's coroutine frame ended
  std::optional<VResult> out;

  // The call: fails at once (for a backoff), ignores cancellation for 10 s (a call
  // slow to honour it), or waits 10 s honouring it.
  enum class Kind { fail, deaf, slow };
  auto call(Kind kind) {
    return [this, kind](const VCtx&) -> ::asio::awaitable<VReply> {
      ++started;
      FrameEnd end{&call_frames};
      if (kind == Kind::fail) co_return Unexpected(NetError{});
      if (kind == Kind::deaf) {
        co_await sleep_deaf(10s);
        co_return aborted();
      }
      if (!co_await sleep_for(10s)) co_return aborted();
      co_return std::string("late");
    };
  }

  template <class P, class F>
  void spawn(const P& p, VCtx ctx, F f) {
    ::asio::co_spawn(
        *io,
        [this, &p, ctx, f]() -> ::asio::awaitable<void> {
          FrameEnd end{&body_frames};
          out.emplace(co_await p(ctx, f));
        },
        ::asio::bind_cancellation_slot(cancel.slot(), ::asio::detached));
  }
  template <class Pred>
  void reach(Pred pred) {
    ASSERT_TRUE(drive(*io, clock, pred, 5s)) << "never suspended there";
    ASSERT_FALSE(out.has_value());
  }

  // Ends the suspended call as the parameter says; true if it completed.
  void end_it(End how) {
    switch (how) {
      case End::destroy_context:
        io.reset();
        break;
      case End::caller_cancel:
        cancel.emit(::asio::cancellation_type::terminal);
        ASSERT_TRUE(drive(*io, clock, [&] { return out.has_value(); }));
        ASSERT_TRUE(out && !*out);
        EXPECT_EQ(out->error().reason, Reason::cancelled);
        // Nothing is left running: the context runs dry and is destroyed empty.
        drive(
            *io, clock, [] { return false; }, Nanos::zero());
        io.reset();
        break;
      case End::cancel_then_destroy:
        cancel.emit(::asio::cancellation_type::terminal);
        io.reset();
        break;
    }
  }

  // What every way of ending leaves behind.
  void check_released(Point point, End how) {
    if (how != End::caller_cancel) {
      EXPECT_FALSE(out.has_value());
    }
    EXPECT_EQ(body_frames, 1);
    EXPECT_EQ(call_frames, started);  // every call frame ended: none leaked
    const auto b = breaker.snapshot();
    EXPECT_EQ(b.permitted, 1u);
    EXPECT_EQ(b.cancelled, 1u);  // the call's permit, unrecorded
    EXPECT_EQ(b.failures, 0u);
    EXPECT_EQ(b.successes, 0u);
    EXPECT_EQ(b.half_open_in_flight, 0u);
    EXPECT_EQ(pool.in_use(), 0u);  // the test gave its own two back first
    EXPECT_EQ(pool.queued(), 0u);
    const auto s = budget.snapshot();
    const std::uint64_t hedges = point == Point::hedge_in_flight ? 1 : 0;
    EXPECT_EQ(s.withdrawn, hedges);                            // a started hedge's token is spent
    EXPECT_EQ(s.refunded, point == Point::backoff ? 1u : 0u);  // the backoff's ticket
    EXPECT_EQ(latency.count(), 0u);
  }
};

TEST_P(PipelineLifetimeTest, EverythingHeldIsGivenBack) {
  const auto [point, how] = GetParam();
  const VCtx ctx(clock);
  const Ticks t0 = now_ticks(clock);
  auto hedged = bulwark::asio::pipeline(
      bulwark::breaker(breaker), bulwark::asio::bulkhead(pool), bulwark::retry(retry),
      bulwark::asio::hedge({.max_hedges = 1,
                            .delay = bulwark::asio::HedgeDelay::fixed(50ms),
                            .record_to = &latency}),
      bulwark::timeout(5s));
  auto timed = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::asio::bulkhead(pool),
                                       bulwark::retry(retry), bulwark::timeout(100ms));
  auto direct = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::asio::bulkhead(pool),
                                        bulwark::retry(retry));
  std::optional<bulwark::asio::BasicAsyncBulkhead<VClock>::Permit> held[2];

  switch (point) {
    case Point::bulkhead_wait:
      held[0].emplace(std::move(*pool.try_acquire()));
      held[1].emplace(std::move(*pool.try_acquire()));
      spawn(timed, ctx, call(Kind::slow));
      reach([&] { return pool.queued() == 1; });
      break;
    case Point::attempt_direct:
      spawn(direct, ctx, call(Kind::slow));
      reach([&] { return started == 1; });
      break;
    case Point::attempt_timed:
      spawn(timed, ctx, call(Kind::slow));
      reach([&] { return started == 1; });
      break;
    case Point::backoff:
      spawn(timed, ctx, call(Kind::fail));
      reach([&] { return started == 1 && call_frames == 1; });
      break;
    case Point::hedge_delay:
      spawn(hedged, ctx, call(Kind::slow));
      reach([&] { return started == 1; });
      break;
    case Point::hedge_in_flight:
      spawn(hedged, ctx, call(Kind::slow));
      reach([&] { return started == 2; });
      break;
    case Point::draining_cancelled:
      spawn(timed, ctx, call(Kind::deaf));
      // Past the 100 ms timeout: the cancellation was emitted, the call ignores it.
      reach([&] { return started == 1 && now_ticks(clock) - t0 > Nanos(101ms).count(); });
      break;
  }
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(call_frames, point == Point::backoff ? 1 : 0);
  end_it(how);
  for (auto& h : held) h.reset();  // a slot given back: nobody may be left in the queue
  check_released(point, how);
}

INSTANTIATE_TEST_SUITE_P(
    EverySuspensionPoint, PipelineLifetimeTest,
    ::testing::Combine(::testing::Values(Point::bulkhead_wait, Point::attempt_direct,
                                         Point::attempt_timed, Point::backoff, Point::hedge_delay,
                                         Point::hedge_in_flight, Point::draining_cancelled),
                       ::testing::Values(End::destroy_context, End::caller_cancel,
                                         End::cancel_then_destroy)),
    [](const auto& param_info) {
      return name_of(std::get<0>(param_info.param)) + "_" + name_of(std::get<1>(param_info.param));
    });

}  // namespace
}  // namespace bulwark::testing
