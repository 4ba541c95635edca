// Regressions found by the reference model (differential_test.cc, metamorphic_test.cc).
// Each test is the shrunk counterexample, written out by hand with a ManualClock, and
// named for the behaviour the contract promises.

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "adapter.h"
#include "bulwark/detail/thread_slot.h"

namespace bulwark::model {
namespace {

using namespace std::chrono_literals;

template <class B>
B make(const Config& c, ManualClock& clock) {
  return B(to_breaker_config<B>(c, [] { return 0.0; }), clock);
}

template <class B>
void fail_once(B& b) {
  auto p = b.try_acquire();
  ASSERT_TRUE(p);
  p->record_failure();
}

// OPEN's retry_after is "the rest of the open period". A clock that steps back before
// the opening is no time passing: the rest is then the whole period, never more.
TEST(Regressions, OpenRetryAfterNeverExceedsTheOpenPeriodWhenTheClockStepsBack) {
  ManualClock clock;
  clock.advance(1ns);
  auto b = make<NoWindowBreaker>({.consecutive_failures = 1, .open_duration = 20'000'000}, clock);
  fail_once(b);
  ASSERT_EQ(b.state(), State::open);
  clock.set(Nanos(0));
  auto r = b.try_acquire();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, RejectReason::open);
  EXPECT_EQ(r.error().retry_after, 20ms);
}

// HALF_OPEN with every slot taken suggests retrying when the max wait frees them: at
// most half_open_max_wait, even if the clock stepped back.
TEST(Regressions, HalfOpenFullRetryAfterNeverExceedsTheMaxWaitWhenTheClockStepsBack) {
  ManualClock clock;
  auto b = make<NoWindowBreaker>(
      {.consecutive_failures = 1, .open_duration = 1'000'000, .half_open_max_wait = 10'000'000},
      clock);
  fail_once(b);
  clock.advance(5ms);
  auto probe = b.try_acquire();
  ASSERT_TRUE(probe && probe->is_probe());
  clock.set(Nanos(1'000'000));  // back, before the half-open round began
  auto r = b.try_acquire();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, RejectReason::half_open_full);
  EXPECT_EQ(r.error().retry_after, 10ms);
}

// "Outcomes of permits admitted before the reset count nowhere" — however many resets
// there were. The window's words keep 12 bits of the generation: a permit held across
// exactly 4096 resets used to land in the current window.
template <class B>
void permit_from_before_4096_resets(Window w) {
  ManualClock clock;
  auto b = make<B>({.window = w,
                    .consecutive_failures = 0,
                    .failure_rate = 0.5,
                    .minimum_calls = 1,
                    .window_size = 4,
                    .window_length = 10'000'000,
                    .window_buckets = 1},
                   clock);
  auto old = b.try_acquire();
  ASSERT_TRUE(old);
  for (int i = 0; i < 4096; ++i) b.reset();
  old->record_failure();
  EXPECT_EQ(b.state(), State::closed);
  BreakerSnapshot s = b.snapshot();
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->calls, 0u);
  EXPECT_EQ(s.failures, 1u);  // it still counts in the totals
  // A full window of current calls later, the window holds exactly those.
  for (int i = 0; i < 4; ++i) {
    auto p = b.try_acquire();
    ASSERT_TRUE(p);
    p->record_success();
  }
  s = b.snapshot();
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->calls, 4u);
  EXPECT_EQ(s.window->failures, 0u);
}

TEST(Regressions, APermitFromBefore4096ResetsCountsNowhereInATimeWindow) {
  permit_from_before_4096_resets<TimeBreaker>(Window::time);
}
TEST(Regressions, APermitFromBefore4096ResetsCountsNowhereInACountWindow) {
  permit_from_before_4096_resets<CountBreaker>(Window::count);
}

// A permit held across 3000 resets (between 2048 and 4095 generations old) must not
// take the window over either: the window keeps recording the current generation.
TEST(Regressions, APermitFromBefore3000ResetsLeavesTheWindowRecording) {
  ManualClock clock;
  auto b = make<CountBreaker>({.window = Window::count,
                               .consecutive_failures = 0,
                               .failure_rate = 0.5,
                               .minimum_calls = 2,
                               .window_size = 4},
                              clock);
  auto old = b.try_acquire();
  ASSERT_TRUE(old);
  for (int i = 0; i < 3000; ++i) b.reset();
  old->record_success();
  fail_once(b);
  fail_once(b);
  EXPECT_EQ(b.state(), State::open);
}

// "After a reset, older outcomes count nowhere", however many resets there were. A
// time window's buckets are tagged with the window's lap (a 7-bit count of fresh
// starts) and their period; a reset cleared only the buckets at and before the clock's
// bucket. With the clock stepped back near its epoch, a bucket ahead of it kept an old
// slow success, and after a multiple of 128 resets the lap came round to that bucket's
// tag: the old outcome counted again, and a single fast failure tripped the slow-call
// rule. B may be a striped window: the slow success is then recorded from stripe 2 and
// the failure from stripe 0, so every stripe's buckets must be rewritten at a lap start.
template <class B = TimeBreaker>
void slow_success_then_resets(int resets) {
  const std::uint32_t own = detail::tls_thread_slot;
  detail::tls_thread_slot = 2 + 1;
  ManualClock clock;
  auto b = make<B>({.window = Window::time,
                    .consecutive_failures = 0,
                    .slow_call_rate = 0.3,
                    .slow_call_duration = 1'000'000,
                    .minimum_calls = 1,
                    .window_length = 50'000'000,
                    .window_buckets = 5},
                   clock);
  clock.set(30ms);  // the fourth 10 ms bucket
  auto slow = b.try_acquire();
  ASSERT_TRUE(slow);
  slow->record_success(2ms);
  ASSERT_EQ(b.state(), State::open);
  clock.set(30ms - 1ns);  // one step back, into the third bucket
  for (int i = 0; i < resets; ++i) b.reset();
  detail::tls_thread_slot = own;
  auto p = b.try_acquire();
  ASSERT_TRUE(p);
  clock.advance(1ns);  // the fourth bucket again
  detail::tls_thread_slot = 0 + 1;
  p->record_failure(1ns);
  detail::tls_thread_slot = own;
  EXPECT_EQ(b.state(), State::closed) << "a fast failure is not a slow call";
  const WindowCounts w = b.snapshot().window.value_or(WindowCounts{});
  EXPECT_EQ(w.calls, 1u);
  EXPECT_EQ(w.failures, 1u);
  EXPECT_EQ(w.slow_successes, 0u);
}

TEST(Regressions, NoOutcomeFromBeforeAnyNumberOfResetsCountsInATimeWindow) {
  for (const int resets : {1, 127, 128, 129, 256, 2048}) {
    SCOPED_TRACE(testing::Message() << resets << " resets");
    slow_success_then_resets(resets);
  }
}

TEST(Regressions, NoOutcomeFromBeforeAnyNumberOfResetsCountsInAStripedTimeWindow) {
  for (const int resets : {1, 127, 128, 129, 256, 2048}) {
    SCOPED_TRACE(testing::Message() << resets << " resets");
    slow_success_then_resets<BasicCircuitBreaker<ManualClock, TimeWindow<10, 4>>>(resets);
  }
}

// A count window's ring entries keep 10 bits of their generation and are not rewritten
// at transitions: an entry left 1000 resets ago looked like one of a later phase, and
// the current phase's outcome was dropped as stale.
TEST(Regressions, ACountWindowRecordsAfterAThousandIdleResets) {
  ManualClock clock;
  auto b = make<CountBreaker>({.window = Window::count,
                               .consecutive_failures = 0,
                               .failure_rate = 1.0,
                               .minimum_calls = 2,
                               .window_size = 1},
                              clock);
  {
    auto p = b.try_acquire();
    ASSERT_TRUE(p);
    p->record_success();
  }
  for (int i = 0; i < 1000; ++i) b.reset();
  auto p = b.try_acquire();
  ASSERT_TRUE(p);
  p->record_success();
  const BreakerSnapshot s = b.snapshot();
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->calls, 1u);
}

// FORCED_OPEN's snapshot open_duration is the period the next opening would last:
// transition_to(open) keeps the growth reached before the breaker was forced open.
TEST(Regressions, ForcedOpenSnapshotShowsThePeriodTheNextOpeningKeeps) {
  ManualClock clock;
  auto b = make<NoWindowBreaker>({.consecutive_failures = 1,
                                  .open_duration = 1'000'000,
                                  .open_duration_multiplier = 2.0,
                                  .max_open_duration = 10'000'000},
                                 clock);
  fail_once(b);
  clock.advance(1ms);
  fail_once(b);  // the probe fails: the second opening lasts 2 ms
  ASSERT_EQ(b.snapshot().open_duration, 2ms);
  ASSERT_TRUE(b.transition_to(State::forced_open));
  EXPECT_EQ(b.snapshot().open_duration, 2ms);
  ASSERT_TRUE(b.transition_to(State::open));
  EXPECT_EQ(b.snapshot().open_duration, 2ms);
}

// Flapping: a breaker that reopens soon after recovering. A reset starts afresh, so the
// snapshot must not still say "flapping" after one.
TEST(Regressions, ResetClearsTheFlappingFlag) {
  ManualClock clock;
  auto b = make<NoWindowBreaker>(
      {.consecutive_failures = 1, .open_duration = 5'000'000, .flapping_period = 100'000'000},
      clock);
  fail_once(b);
  clock.advance(5ms);
  {
    auto probe = b.try_acquire();
    ASSERT_TRUE(probe && probe->is_probe());
    probe->record_success();
  }
  ASSERT_EQ(b.state(), State::closed);
  fail_once(b);  // reopens 0 ms after recovering: flapping
  ASSERT_TRUE(b.snapshot().flapping);
  b.reset();
  EXPECT_FALSE(b.snapshot().flapping);
}

// The flapping flag ends once the breaker stayed closed for flapping_period; an opening
// after that (here a manual one) must not bring it back, in the snapshot or the event.
TEST(Regressions, FlappingEndsAfterStayingClosedForTheFlappingPeriod) {
  ManualClock clock;
  std::vector<bool> event_flapping;
  auto b = make<NoWindowBreaker>(
      {.consecutive_failures = 1, .open_duration = 5'000'000, .flapping_period = 100'000'000},
      clock);
  b.policy().on_transition([&](const TransitionEvent& e) { event_flapping.push_back(e.flapping); });
  fail_once(b);
  clock.advance(5ms);
  b.try_acquire()->record_success();
  fail_once(b);  // flapping
  clock.advance(5ms);
  b.try_acquire()->record_success();
  ASSERT_EQ(b.state(), State::closed);
  ASSERT_TRUE(b.snapshot().flapping);
  clock.advance(100ms);
  ASSERT_FALSE(b.snapshot().flapping);
  ASSERT_TRUE(b.transition_to(State::open));
  EXPECT_FALSE(b.snapshot().flapping);
  ASSERT_FALSE(event_flapping.empty());
  EXPECT_FALSE(event_flapping.back());
}

// Only an automatic opening is flapping: a manual one right after recovering starts no
// growth, so its event does not say flapping.
TEST(Regressions, AManualOpeningIsNeverAFlappingEvent) {
  ManualClock clock;
  std::vector<bool> event_flapping;
  auto b = make<NoWindowBreaker>(
      {.consecutive_failures = 1, .open_duration = 5'000'000, .flapping_period = 100'000'000},
      clock);
  b.policy().on_transition([&](const TransitionEvent& e) { event_flapping.push_back(e.flapping); });
  fail_once(b);
  clock.advance(5ms);
  b.try_acquire()->record_success();
  fail_once(b);  // flapping
  clock.advance(5ms);
  b.try_acquire()->record_success();
  ASSERT_EQ(b.state(), State::closed);
  ASSERT_TRUE(b.transition_to(State::open));
  ASSERT_FALSE(event_flapping.empty());
  EXPECT_FALSE(event_flapping.back());
}

// "A clock stepping backwards is treated as no time passing" also before the breaker's
// first transition: an outcome recorded after the clock stepped back to before the
// breaker was built lands in the bucket of its creation, not in an older one.
TEST(Regressions, ATimeWindowTreatsAClockSteppingBackBeforeItsCreationAsNoTimePassing) {
  ManualClock clock{ManualClock::time_point(Nanos(186'212'728'280'677))};
  auto b = make<TimeBreaker>({.window = Window::time,
                              .consecutive_failures = 0,
                              .failure_rate = 1.0,  // a trip rule, which no success reaches
                              .minimum_calls = 1,
                              .window_length = 1'000'000,
                              .window_buckets = 1},
                             clock);
  clock.set(Nanos(186'212'727'999'999));  // back into the previous 1 ms bucket
  b.try_acquire()->record_success();
  clock.advance(1ns);  // back where the breaker was built
  const BreakerSnapshot s = b.snapshot();
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->calls, 1u);
}

// Calls in flight count as slow only once they are older than slow_call_duration, and a
// clock stepping back is no time passing: a call admitted after a 30 ms step back (with
// another call 0 ms old still out) made the earlier call "ancient", hence slow, and
// tripped the breaker although no call was older than 10 ms.
TEST(Regressions, AClockSteppingBackNeverMakesCallsInFlightSlow) {
  ManualClock clock{ManualClock::time_point(Nanos(1'000'000'000))};
  auto b = make<CountBreaker>({.window = Window::count,
                               .consecutive_failures = 0,
                               .slow_call_rate = 0.5,
                               .slow_call_duration = 10'000'000,
                               .minimum_calls = 1,
                               .window_size = 10,
                               .count_in_flight_slow_calls = true},
                              clock);
  auto first = b.try_acquire();
  ASSERT_TRUE(first);
  clock.set(Nanos(970'000'000));
  auto second = b.try_acquire();
  ASSERT_TRUE(second);
  EXPECT_EQ(b.state(), State::closed);
  const BreakerSnapshot s = b.snapshot();
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->in_flight_slow, 0u);
  // Once time really passes, both count as slow.
  clock.set(Nanos(1'100'000'000));
  EXPECT_EQ(b.snapshot().window->in_flight_slow, 2u);
}

// With calls in flight counted, the rates rise as those calls age, with no outcome in
// between. A completion must evaluate them: a fast success completing while an older
// call had been in flight for an hour left the breaker CLOSED with its snapshot showing
// a slow-call rate at the threshold.
TEST(Regressions, ACompletionEvaluatesTheSlowCallsInFlight) {
  ManualClock clock;
  auto b = make<CountBreaker>({.window = Window::count,
                               .consecutive_failures = 0,
                               .slow_call_rate = 0.5,
                               .slow_call_duration = 5'000'000,
                               .minimum_calls = 1,
                               .window_size = 1,
                               .count_in_flight_slow_calls = true},
                              clock);
  auto fast = b.try_acquire();
  auto hanging = b.try_acquire();
  ASSERT_TRUE(fast && hanging);
  clock.advance(1h);
  fast->record_success(1ns);
  EXPECT_EQ(b.state(), State::open);
}

// Calls in flight longer than slow_call_duration count in the rates' volume. When one
// completes as a fast success in a full count window, it leaves the in-flight count and
// its outcome evicts an older success: the volume shrinks and the failure rate rises. A
// fast success did not evaluate the rates ("a success only lowers them"), and the
// breaker stayed CLOSED at a failure rate of 1 in 4 with a threshold of 0.25.
TEST(Regressions, ASlowCallInFlightCompletingFastEvaluatesTheRates) {
  ManualClock clock;
  auto b = make<CountBreaker>({.window = Window::count,
                               .consecutive_failures = 0,
                               .failure_rate = 0.25,
                               .slow_call_duration = 5'000'000,
                               .minimum_calls = 2,
                               .window_size = 3,
                               .count_in_flight_slow_calls = true},
                              clock);
  std::vector<CountBreaker::Permit> held;
  for (int i = 0; i < 5; ++i) held.push_back(*b.try_acquire());
  held[0].record_success();
  clock.advance(1h);            // the four others are now slow in flight
  held[1].record_success();     // slow: 2 calls + 3 in flight
  held[2].record_failure(1ns);  // 3 calls + 2 in flight, 1 failure: 1 in 5
  ASSERT_EQ(b.state(), State::closed);
  held[3].record_success(1ns);  // evicts the first success: 3 calls + 1 in flight: 1 in 4
  EXPECT_EQ(b.state(), State::open);
}

}  // namespace
}  // namespace bulwark::model
