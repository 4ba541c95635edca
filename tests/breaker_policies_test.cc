// Trip rules that match real traffic: failure and slow-call rates over
// count and time windows with a minimum volume, slow calls still in flight, outcome
// classification, half-open by traffic fraction, flapping. All in virtual time.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <queue>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bulwark/circuit_breaker.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using TimeBreaker = BasicCircuitBreaker<ManualClock, TimeWindow<10>>;
using CountBreaker = BasicCircuitBreaker<ManualClock, CountWindow>;

template <class B>
void record(B& b, Outcome o, int n = 1, Nanos duration = Nanos::zero()) {
  for (int i = 0; i < n; ++i) {
    auto p = b.try_acquire();
    ASSERT_TRUE(p) << "call " << i << " rejected";
    p->record(o, duration);
  }
}

// --- The seed's incident -----------------------------------------------------
// 400 calls/s to a reviews service that answers in 120 ms; from t=60s on it answers
// *successfully* after 14 s. Each call is admitted at its arrival and completes after
// its latency, or fails at the caller's timeout. Returns when the breaker first
// opened (relative to the degradation), if it did within the run.
struct Incident {
  Nanos timeout = 15s;
  Nanos run = 60s + 40s;
  Nanos degrade_at = 60s;
};

template <class B>
std::optional<Nanos> run_incident(ManualClock& clock, B& breaker, Incident inc = {}) {
  using Permit = typename B::Permit;
  struct Pending {
    Ticks done;
    bool failed;
    std::shared_ptr<Permit> permit;
    bool operator>(const Pending& o) const { return done > o.done; }
  };
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> pending;
  const Ticks start = now_ticks(clock);
  std::optional<Nanos> opened;
  for (Ticks t = start; t < start + inc.run.count(); t += 2'500'000) {  // every 2.5 ms
    while (!pending.empty() && pending.top().done <= t) {
      Pending p = pending.top();
      pending.pop();
      clock.set(Nanos(p.done));
      p.permit->record(p.failed ? Outcome::failure : Outcome::success);
    }
    clock.set(Nanos(t));
    if (!opened && breaker.state() == State::open) opened = Nanos(t - start) - inc.degrade_at;
    auto permit = breaker.try_acquire();
    if (!permit) continue;
    const bool degraded = Nanos(t - start) >= inc.degrade_at;
    const Nanos latency = degraded ? 14s : 120ms;
    const bool timed_out = latency > inc.timeout;
    const Nanos took = timed_out ? inc.timeout : latency;
    pending.push({t + took.count(), timed_out, std::make_shared<Permit>(std::move(*permit))});
  }
  return opened;
}

TEST(SeedIncident, ABreakerCountingOnlyErrorsStaysClosed) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 10s},
                 .minimum_calls = 20,
                 .failure_rate = 0.3,
                 .consecutive_failures = 5},
                clock);
  EXPECT_EQ(run_incident(clock, b), std::nullopt)
      << "the service answered successfully, very slowly";
}

TEST(SeedIncident, CountingCompletedSlowCallsOpensOnlyAfterTheFirstSlowCompletions) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 10s},
                 .minimum_calls = 20,
                 .failure_rate = 0.3,
                 .slow_call_rate = 0.3,
                 .slow_call_duration = 400ms,
                 .count_in_flight_slow_calls = false},
                clock);
  const auto opened = run_incident(clock, b);
  ASSERT_TRUE(opened);
  EXPECT_GE(*opened, 14s) << "no slow call completed before 14 s";
  EXPECT_LE(*opened, 14s + 1s);
}

TEST(SeedIncident, CountingInFlightSlowCallsOpensBeforeAnyCallCompletes) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 10s},
                 .minimum_calls = 20,
                 .failure_rate = 0.3,
                 .slow_call_rate = 0.3,
                 .slow_call_duration = 400ms,
                 .count_in_flight_slow_calls = true},
                clock);
  const auto opened = run_incident(clock, b);
  ASSERT_TRUE(opened);
  // Calls count as slow one to two slow_call_durations after admission (the epoch
  // granularity); the rate then reaches 30 % once in-flight slow calls are 30 % of
  // the window: t = 2D + 0.3 * (window - 2D) at worst, plus one bucket.
  const Nanos d = 400ms;
  const Nanos bound = 2 * d + std::chrono::duration_cast<Nanos>(0.3 * (10s - 2 * d)) + 1s;
  EXPECT_LE(*opened, bound);
  EXPECT_LT(*opened, 14s) << "it must not wait for slow calls to complete";
}

TEST(SeedIncident,
     InFlightSlowCallsTripWithinAboutTheSlowDurationPlusABucketWhenTheRuleAsksForOneBucket) {
  ManualClock clock;
  // A rule that fires when one bucket's worth (10 %) of the window is slow.
  TimeBreaker b({.window = {.length = 10s},
                 .minimum_calls = 20,
                 .slow_call_rate = 0.1,
                 .slow_call_duration = 400ms,
                 .count_in_flight_slow_calls = true},
                clock);
  const auto opened = run_incident(clock, b);
  ASSERT_TRUE(opened);
  EXPECT_LE(*opened, 2 * 400ms + 1s +
                         1s);  // D to 2D of epoch granularity, one bucket, one bucket of rounding
}

TEST(SeedIncident, TheSeedsFixesOpenWithinSeconds) {
  ManualClock clock;
  // 800 ms timeout, slow > 400 ms, 30 %, minimum 20, 30 s open, 10 % half-open.
  TimeBreaker b({.window = {.length = 10s},
                 .minimum_calls = 20,
                 .failure_rate = 0.3,
                 .slow_call_rate = 0.3,
                 .slow_call_duration = 400ms,
                 .open_duration = 30s,
                 .half_open = {.fraction = 0.10}},
                clock);
  const auto opened = run_incident(clock, b, {.timeout = 800ms});
  ASSERT_TRUE(opened);
  EXPECT_LE(*opened, 5s);
}

// --- Minimum volume and exact thresholds -------------------------------------

TEST(RateRules, TwoFailuresInThreeCallsNeverOpenWithAMinimumOfTwenty) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 20,
                 .failure_rate = 0.5,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::failure, 2);
  record(b, Outcome::success);
  EXPECT_EQ(b.state(), State::closed);
  const BreakerSnapshot s = b.snapshot();
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->calls, 3u);
  EXPECT_EQ(s.failure_rate, std::nullopt) << "not enough calls: no rate, never a magic -1";
}

TEST(RateRules, NineCallsAtExactlyTheRateAreNotEnoughTenAre) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 10,
                 .failure_rate = 0.5,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::failure, 5);
  record(b, Outcome::success, 4);  // 9 calls, 5 failures: over the rate, under the volume
  EXPECT_EQ(b.state(), State::closed);
  record(b, Outcome::success);  // 10 calls, 5 failures: exactly 50 % >= 50 %
  EXPECT_EQ(b.state(), State::open);
}

TEST(RateRules, JustBelowTheRateStaysClosed) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 10,
                 .failure_rate = 0.3,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::failure, 2);
  record(b, Outcome::success, 8);  // 20 %
  EXPECT_EQ(b.state(), State::closed);
  record(b, Outcome::success, 90);  // 2 %
  record(b, Outcome::failure, 40);  // 42/140 = 30 % exactly at the last failure
  EXPECT_EQ(b.state(), State::open);
  EXPECT_EQ(b.snapshot().failures, 42u) << "it opened on the failure that reached 30 %";
}

TEST(RateRules, SlowMeansStrictlySlowerThanTheThreshold) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 1,
                 .slow_call_rate = 1.0,
                 .slow_call_duration = 100ms,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::success, 1, 100ms);
  EXPECT_EQ(b.state(), State::closed) << "exactly the threshold is not slow";
  EXPECT_EQ(b.snapshot().window->slow(), 0u);
  record(b, Outcome::success, 1, 100ms + 1ns);
  EXPECT_EQ(b.snapshot().window->slow_successes, 1u);
}

TEST(RateRules, SlowFailuresAndSlowSuccessesBothCountAsSlow) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 4,
                 .slow_call_rate = 0.5,
                 .slow_call_duration = 100ms,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::success, 2, 10ms);
  record(b, Outcome::success, 1, 150ms);
  EXPECT_EQ(b.state(), State::closed);
  record(b, Outcome::failure, 1, 150ms);
  EXPECT_EQ(b.state(), State::open);
  EXPECT_EQ(b.snapshot().failures, 1u);
}

TEST(RateRules, TheBreakerMeasuresDurationsItselfWhenTheCallerDoesNot) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 2,
                 .slow_call_rate = 0.5,
                 .slow_call_duration = 100ms,
                 .consecutive_failures = 0},
                clock);
  auto fast = b.try_acquire();
  auto slow = b.try_acquire();
  clock.advance(50ms);
  fast->record_success();
  ASSERT_EQ(b.snapshot().window->slow(), 0u);
  clock.advance(100ms);
  slow->record_success();  // 150 ms after admission: 1 of 2 calls slow
  EXPECT_EQ(b.state(), State::open);
}

TEST(RateRules, ACountWindowUsesItsSizeWhenTheMinimumIsLarger) {
  ManualClock clock;
  CountBreaker b(
      {.window = {.size = 4}, .minimum_calls = 100, .failure_rate = 0.5, .consecutive_failures = 0},
      clock);
  record(b, Outcome::success, 2);
  record(b, Outcome::failure, 1);
  EXPECT_EQ(b.state(), State::closed);
  record(b, Outcome::failure, 1);  // 2 of the last 4
  EXPECT_EQ(b.state(), State::open);
}

TEST(RateRules, ACountWindowHoldsExactlyTheLastNCalls) {
  ManualClock clock;
  CountBreaker b(
      {.window = {.size = 5}, .minimum_calls = 5, .failure_rate = 0.5, .consecutive_failures = 0},
      clock);
  record(b, Outcome::failure, 2);
  record(b, Outcome::success, 8);  // the failures have left the window
  const BreakerSnapshot s = b.snapshot();
  EXPECT_EQ(s.window->calls, 5u);
  EXPECT_EQ(s.window->failures, 0u);
  EXPECT_EQ(s.failure_rate, 0.0);
  record(b, Outcome::failure, 2);
  EXPECT_EQ(b.state(), State::closed);  // 2 of 5
  record(b, Outcome::failure);          // 3 of 5
  EXPECT_EQ(b.state(), State::open);
}

TEST(RateRules, RulesCombineAnyOneTrips) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 100,
                 .failure_rate = 0.9,
                 .consecutive_failures = 3},
                clock);
  record(b, Outcome::failure, 3);
  EXPECT_EQ(b.state(), State::open)
      << "consecutive failures fire while the rate rule waits for volume";
}

TEST(RateRules, IgnoredAndRejectedCallsCountNowhere) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 4,
                 .failure_rate = 0.5,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::ignored, 10);
  record(b, Outcome::failure, 1);
  record(b, Outcome::success, 1);
  EXPECT_EQ(b.snapshot().window->calls, 2u);
  EXPECT_EQ(b.state(), State::closed);
}

// Rejections never reach the probes' tally either: one probe out, ten requests turned
// away, and the probe's success alone decides.
TEST(RateRules, RejectedCallsDoNotCountAgainstTheProbes) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 2,
                 .failure_rate = 0.5,
                 .consecutive_failures = 0,
                 .open_duration = 5s,
                 .half_open = {.probes = 1, .max_in_flight = 1}},
                clock);
  record(b, Outcome::failure, 2);
  ASSERT_EQ(b.state(), State::open);
  clock.advance(5s);
  auto probe = b.try_acquire();
  ASSERT_TRUE(probe);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(b.try_acquire());
  EXPECT_EQ(b.snapshot().rejected, 10u);
  probe->record_success();
  EXPECT_EQ(b.state(), State::closed);
}

// The rates are judged again when outcomes leave a time window: successes aging out
// can leave the failures over the threshold, and the next call — a success — trips.
TEST(RateRules, SuccessesAgingOutOfATimeWindowCanTripTheBreaker) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 10s},
                 .minimum_calls = 10,
                 .failure_rate = 0.5,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::success, 20);  // t = 0
  clock.set(5s);
  record(b, Outcome::failure, 15);  // 15 of 35: below the threshold
  ASSERT_EQ(b.state(), State::closed);
  clock.set(10s);  // the 20 successes leave the window
  EXPECT_EQ(b.snapshot().failure_rate, 1.0);
  record(b, Outcome::success);  // 15 of 16
  EXPECT_EQ(b.state(), State::open);
}

// --- Time-window edges ----------------------------------------------------------

TEST(TimeWindowEdges, BucketsRollOverAtExactBoundaries) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 10s},
                 .minimum_calls = 1000,
                 .failure_rate = 1.0,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::failure);  // t = 0, bucket 0
  clock.set(1s - 1ns);
  record(b, Outcome::failure);  // still bucket 0
  clock.set(1s);
  record(b, Outcome::success);  // bucket 1
  clock.set(10s - 1ns);
  EXPECT_EQ(b.snapshot().window->calls, 3u) << "bucket 0 is still inside the window";
  clock.set(10s);
  const BreakerSnapshot s = b.snapshot();
  EXPECT_EQ(s.window->calls, 1u) << "at exactly 10 s bucket 0 has left the window";
  EXPECT_EQ(s.window->failures, 0u);
}

TEST(TimeWindowEdges, AnIdleGapLongerThanTheWindowEmptiesIt) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 10s},
                 .minimum_calls = 3,
                 .failure_rate = 0.5,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::failure, 2);
  clock.advance(3h);
  EXPECT_EQ(b.snapshot().window->calls, 0u);
  record(b, Outcome::failure);  // alone again: below the minimum volume
  EXPECT_EQ(b.state(), State::closed);
  EXPECT_EQ(b.snapshot().window->calls, 1u);
}

TEST(TimeWindowEdges, AJumpOfTenToTheTwelveSecondsCostsOnlyTheBuckets) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 10s},
                 .minimum_calls = 3,
                 .failure_rate = 0.5,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::failure, 2);
  // 10^12 s is past the end of nanosecond time: the clock saturates there, and the
  // window clears in O(buckets) and keeps working.
  clock.advance(std::chrono::seconds(1'000'000'000'000));
  EXPECT_EQ(now_ticks(clock), kTicksMax);
  EXPECT_EQ(b.snapshot().window->calls, 0u);
  record(b, Outcome::failure, 2);
  EXPECT_EQ(b.snapshot().window->calls, 2u);
  record(b, Outcome::success, 1);
  EXPECT_EQ(b.state(), State::open);
}

// Bucket tags keep the low 16 bits of a bucket's period: after a gap of a multiple of
// 65,536 periods (here 327.68 s of 1 ms buckets), an old bucket's tag would equal a new
// one's if the window did not start a new lap on a gap of a whole window or more.
TEST(TimeWindowEdges, AGapThatWrapsTheBucketTagsDoesNotBringOldCountsBack) {
  ManualClock clock;
  clock.set(1000s);
  TimeBreaker b({.window = {.length = 10ms},
                 .minimum_calls = 5,
                 .failure_rate = 0.5,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::failure, 4);  // below the minimum volume
  clock.advance(327'680ms);        // lcm(10 buckets, 65536) periods of 1 ms
  record(b, Outcome::success);
  EXPECT_EQ(b.state(), State::closed) << "four failures from 5 minutes ago came back";
  EXPECT_EQ(b.snapshot().window->calls, 1u);
  EXPECT_EQ(b.snapshot().window->failures, 0u);
}

TEST(TimeWindowEdges, AClockSteppingBackIsNoTimePassing) {
  ManualClock clock;
  clock.set(100s);
  TimeBreaker b({.window = {.length = 10s},
                 .minimum_calls = 1000,
                 .failure_rate = 0.9,
                 .consecutive_failures = 0},
                clock);
  record(b, Outcome::failure, 2);
  clock.set(50s);  // back by 50 s
  record(b, Outcome::success, 3);
  BreakerSnapshot s = b.snapshot();
  EXPECT_EQ(s.window->calls, 5u) << "recorded in the newest bucket, nothing lost or double-counted";
  EXPECT_EQ(s.window->failures, 2u);
  clock.set(109s + 999ms);
  EXPECT_EQ(b.snapshot().window->calls, 5u);
  clock.set(110s);
  EXPECT_EQ(b.snapshot().window->calls, 0u);
}

TEST(TimeWindowEdges, ACallLongerThanTheWindowCountsWhenItCompletes) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 10s},
                 .minimum_calls = 1,
                 .failure_rate = 0.5,
                 .consecutive_failures = 0},
                clock);
  auto long_call = b.try_acquire();
  clock.advance(25s);
  EXPECT_EQ(b.snapshot().window->calls, 0u);
  long_call->record_failure();
  EXPECT_EQ(b.state(), State::open);
}

// --- Slow calls still in flight --------------------------------------------------

TEST(InFlightSlowCalls, ADependencyThatStopsAnsweringTripsBeforeAnyCallCompletes) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 30s},
                 .minimum_calls = 10,
                 .slow_call_rate = 0.5,
                 .slow_call_duration = 1s,
                 .count_in_flight_slow_calls = true,
                 .consecutive_failures = 0},
                clock);
  std::vector<TimeBreaker::Permit> hanging;
  for (int i = 0; i < 100 && b.state() == State::closed; ++i) {  // 10 calls a second, none answers
    auto p = b.try_acquire();
    ASSERT_TRUE(p);
    hanging.push_back(std::move(*p));
    clock.advance(100ms);
  }
  EXPECT_EQ(b.state(), State::open);
  EXPECT_LE(now_ticks(clock), Nanos(3s).count()) << "within a few slow_call_durations";
  EXPECT_EQ(b.snapshot().successes + b.snapshot().failures, 0u) << "nothing completed";
}

TEST(InFlightSlowCalls, TheSnapshotShowsThem) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 30s},
                 .minimum_calls = 1000,
                 .slow_call_rate = 1.0,
                 .slow_call_duration = 1s,
                 .count_in_flight_slow_calls = true,
                 .consecutive_failures = 0},
                clock);
  std::vector<TimeBreaker::Permit> hanging;
  for (int i = 0; i < 5; ++i) hanging.push_back(std::move(*b.try_acquire()));
  clock.advance(500ms);
  EXPECT_EQ(b.snapshot().window->in_flight_slow, 0u);
  clock.advance(2s);
  EXPECT_EQ(b.snapshot().window->in_flight_slow, 5u);
  hanging.pop_back();  // cancelled: no longer in flight
  hanging.back().record_success();
  EXPECT_EQ(b.snapshot().window->in_flight_slow, 3u);
  EXPECT_EQ(b.snapshot().window->slow_successes, 1u);
}

// A thread whose clock reading is several epochs old (preempted between reading the
// clock and counting its call) is counted in the newest epoch; it must not recycle that
// epoch's slot, which would move fresh calls into the "ancient" (slow) count.
TEST(InFlightSlowCalls, ALateAdmissionNeverMakesFreshCallsSlow) {
  detail::InFlight in_flight;
  constexpr unsigned kShift = 20;  // epochs of 2^20 ns, as for slow_call_duration = 1 ms
  constexpr std::uint64_t kNow = 1000;
  for (int i = 0; i < 5; ++i) (void)in_flight.admit(7, kNow, [] { return kNow; });
  const Ticks now = static_cast<Ticks>(kNow << kShift) + 1000;
  ASSERT_EQ(in_flight.slow_calls(7, now, 1'000'000, kShift), 0u);
  for (std::uint64_t late : {1u, 2u, 9u, 100u, 1000u}) {
    const auto a = in_flight.admit(7, kNow - late, [] { return kNow; });
    EXPECT_EQ(a.epoch, kNow) << late << " epochs late";
    EXPECT_FALSE(a.new_epoch);
  }
  EXPECT_EQ(in_flight.slow_calls(7, now, 1'000'000, kShift), 0u) << "fresh calls counted as slow";
}

TEST(InFlightSlowCalls, CanBeSwitchedOff) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 30s},
                 .minimum_calls = 10,
                 .slow_call_rate = 0.5,
                 .slow_call_duration = 1s,
                 .count_in_flight_slow_calls = false,
                 .consecutive_failures = 0},
                clock);
  std::vector<TimeBreaker::Permit> hanging;
  for (int i = 0; i < 100; ++i) {
    hanging.push_back(std::move(*b.try_acquire()));
    clock.advance(100ms);
  }
  EXPECT_EQ(b.state(), State::closed);
  EXPECT_EQ(b.snapshot().window->in_flight_slow, 0u);
}

TEST(InFlightSlowCalls, CallsFromBeforeAResetDoNotCount) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 30s},
                 .minimum_calls = 1,
                 .slow_call_rate = 0.5,
                 .slow_call_duration = 1s,
                 .count_in_flight_slow_calls = true,
                 .consecutive_failures = 0},
                clock);
  std::vector<TimeBreaker::Permit> hanging;
  for (int i = 0; i < 3; ++i) hanging.push_back(std::move(*b.try_acquire()));
  b.reset();
  clock.advance(5s);
  record(b, Outcome::success);
  EXPECT_EQ(b.snapshot().window->in_flight_slow, 0u);
  EXPECT_EQ(b.state(), State::closed);
}

// --- Classification ----------------------------------------------------------

struct Response {
  int status;
};
Outcome by_status(const Response& r) {
  if (r.status >= 500) return Outcome::failure;
  if (r.status >= 400) return Outcome::ignored;  // the caller's fault, not the dependency's
  return Outcome::success;
}

TEST(Classification, ACallersErrorIsIgnoredAndCountsNowhere) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 2,
                 .failure_rate = 0.5,
                 .consecutive_failures = 2},
                clock);
  for (int i = 0; i < 10; ++i) {
    auto r = b.execute([] { return Response{404}; }, by_status);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404);
  }
  EXPECT_EQ(b.state(), State::closed);
  EXPECT_EQ(b.snapshot().window->calls, 0u);
  EXPECT_EQ(b.snapshot().ignored, 10u);
  (void)b.execute([] { return Response{503}; }, by_status);
  (void)b.execute([] { return Response{502}; }, by_status);
  EXPECT_EQ(b.state(), State::open);
}

TEST(Classification, AClassifierThatThrowsCountsAFailureAndTheCallerKeepsTheResult) {
  ManualClock clock;
  BasicCircuitBreaker<ManualClock> b({.consecutive_failures = 1}, clock);
  auto r = b.execute([] { return 7; },
                     [](const int&) -> Outcome { throw std::logic_error("classifier bug"); });
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(b.state(), State::open);
}

TEST(Classification, ExceptionsCanBeClassifiedAndAreAlwaysRethrownUnchanged) {
  ManualClock clock;
  BasicCircuitBreaker<ManualClock> b({.consecutive_failures = 1}, clock);
  struct Classify {
    Outcome operator()(const int&) const { return Outcome::success; }
    Outcome operator()(std::exception_ptr e) const {
      try {
        std::rethrow_exception(e);
      } catch (const std::invalid_argument&) {
        return Outcome::ignored;  // bad input: not the dependency's fault
      } catch (...) {
        return Outcome::failure;
      }
    }
  };
  EXPECT_THROW(
      (void)b.execute([]() -> int { throw std::invalid_argument("bad request"); }, Classify{}),
      std::invalid_argument);
  EXPECT_EQ(b.state(), State::closed);
  EXPECT_EQ(b.snapshot().ignored, 1u);

  struct Throwing {
    Outcome operator()(const int&) const { return Outcome::success; }
    Outcome operator()(std::exception_ptr) const { throw std::runtime_error("classifier bug"); }
  };
  EXPECT_THROW(
      (void)b.execute([]() -> int { throw std::out_of_range("the call's own error"); }, Throwing{}),
      std::out_of_range);
  EXPECT_EQ(b.state(), State::open);
}

// --- Half-open ------------------------------------------------------------------

TEST(HalfOpenRates, TheProbesDecideByTheirOwnRatesWithoutAMinimum) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 100,
                 .failure_rate = 0.5,
                 .consecutive_failures = 1,
                 .open_duration = 1s,
                 .half_open = {.probes = 4, .max_in_flight = 10}},
                clock);
  record(b, Outcome::failure);
  clock.advance(1s);
  record(b, Outcome::success, 2);
  record(b, Outcome::failure);  // 1 of 3: below 50 %, keep probing
  EXPECT_EQ(b.state(), State::half_open);
  record(b, Outcome::failure);  // 2 of 4: reopen
  EXPECT_EQ(b.state(), State::open);
}

TEST(HalfOpenRates, SlowProbesReopen) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .slow_call_rate = 0.5,
                 .slow_call_duration = 100ms,
                 .consecutive_failures = 1,
                 .open_duration = 1s,
                 .half_open = {.probes = 5, .max_in_flight = 10}},
                clock);
  record(b, Outcome::failure);
  clock.advance(1s);
  record(b, Outcome::success, 1, 10ms);
  record(b, Outcome::success, 2, 200ms);  // 2 of the round's 5 slow: not certain yet
  EXPECT_EQ(b.state(), State::half_open);
  record(b, Outcome::success, 1, 200ms);  // 3 of 5: at least 60 % whatever comes next
  EXPECT_EQ(b.state(), State::open);
}

// A round is judged on all its probes, not on the first one in: with 4 probes and a
// 50 % rule, F,S,S,S is a 25 % round and closes; the round is decided as soon as its
// outcome is certain either way.
TEST(HalfOpenRates, ARoundIsDecidedOnItsProbesNotOnTheFirstOneIn) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 100,
                 .failure_rate = 0.5,
                 .consecutive_failures = 1,
                 .open_duration = 1s,
                 .half_open = {.probes = 4, .max_in_flight = 4}},
                clock);
  record(b, Outcome::failure);
  clock.advance(1s);
  record(b, Outcome::failure);
  EXPECT_EQ(b.state(), State::half_open) << "1 failure of 4 probes is not a 50 % round yet";
  record(b, Outcome::success, 2);
  EXPECT_EQ(b.state(), State::half_open) << "F,S,S: the last probe could still make it 50 %";
  record(b, Outcome::success);
  EXPECT_EQ(b.state(), State::closed) << "F,S,S,S is 25 %";

  // S,S,S closes at the third success: even a failed fourth would make it 25 %.
  record(b, Outcome::failure);
  clock.advance(1s);
  record(b, Outcome::success, 3);
  EXPECT_EQ(b.state(), State::closed);

  // F,F reopens at once: 2 of 4 is 50 % whatever the other two do.
  record(b, Outcome::failure);
  clock.advance(b.snapshot().open_duration);
  record(b, Outcome::failure, 2);
  EXPECT_EQ(b.state(), State::open);
}

// Opens the breaker and lets its period pass; the first request after it (made here,
// and ignored) moves it to HALF_OPEN — nothing changes state until a request comes.
template <class B>
void to_half_open(B& b, ManualClock& clock) {
  ASSERT_TRUE(b.transition_to(State::open));
  clock.advance(b.snapshot().open_duration);
  ASSERT_EQ(b.state(), State::open);
  auto first = b.try_acquire();
  ASSERT_TRUE(first);
  first->ignore();
  ASSERT_EQ(b.state(), State::half_open);
}

TEST(HalfOpenFraction, AdmitsTheFractionWithinStatisticalBounds) {
  ManualClock clock;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0, 1);
  BasicCircuitBreaker<ManualClock> b(
      {.open_duration = 1s,
       .half_open = {.probes = 8191,  // stay half-open for the whole test
                     .fraction = 0.10,
                     .max_wait = 0s,
                     .random = [&] { return u(rng); }}},
      clock);
  to_half_open(b, clock);
  constexpr int kRequests = 20'000;
  int admitted = 0, throttled = 0;
  for (int i = 0; i < kRequests; ++i) {
    auto p = b.try_acquire();
    if (p) {
      ++admitted;
      p->ignore();
    } else {
      EXPECT_EQ(p.error().reason, RejectReason::half_open_throttled);
      ++throttled;
    }
  }
  // Binomial(20000, 0.1): mean 2000, sd ~42. Five standard deviations.
  EXPECT_NEAR(admitted, 2000, 5 * 42);
  EXPECT_EQ(admitted + throttled, kRequests);
}

TEST(HalfOpenFraction, RampsUpWhileTheProbesSucceed) {
  ManualClock clock;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  BasicCircuitBreaker<ManualClock> b({.open_duration = 1s,
                                      .half_open = {.probes = 400,
                                                    .fraction = 0.10,
                                                    .ramp = {0.25, 0.5, 1.0},
                                                    .random = [&] { return u(rng); }}},
                                     clock);
  to_half_open(b, clock);
  // Count requests needed per stage: ~400/f.
  std::vector<int> requests_per_stage;
  int requests = 0;
  std::uint32_t successes_seen = 0;
  while (b.state() == State::half_open) {
    ++requests;
    if (auto p = b.try_acquire()) p->record_success();
    const std::uint32_t now_successes = b.snapshot().half_open_successes;
    if (b.state() != State::half_open || now_successes < successes_seen) {
      requests_per_stage.push_back(requests);
      requests = 0;
    }
    successes_seen = b.state() == State::half_open ? now_successes : 0;
  }
  EXPECT_EQ(b.state(), State::closed);
  ASSERT_EQ(requests_per_stage.size(), 4u);
  const double fractions[] = {0.10, 0.25, 0.5, 1.0};
  for (std::size_t i = 0; i < 4; ++i) {
    const double expected = 400 / fractions[i];
    EXPECT_NEAR(requests_per_stage[i], expected, 6 * std::sqrt(expected)) << "stage " << i;
  }
}

TEST(HalfOpenFraction, AnyProbeFailureStillReopens) {
  ManualClock clock;
  BasicCircuitBreaker<ManualClock> b({.open_duration = 1s, .half_open = {.fraction = 1.0}}, clock);
  to_half_open(b, clock);
  record(b, Outcome::failure);
  EXPECT_EQ(b.state(), State::open);
}

TEST(HalfOpenFraction, TheBuiltInSourceIsDeterministicForASeed) {
  auto admitted_pattern = [](std::uint64_t seed) {
    ManualClock clock;
    BasicCircuitBreaker<ManualClock> b(
        {.open_duration = 1s, .half_open = {.probes = 8191, .fraction = 0.3, .random_seed = seed}},
        clock);
    EXPECT_TRUE(b.transition_to(State::open));
    clock.advance(1s);
    std::string pattern;
    for (int i = 0; i < 64; ++i) {
      auto p = b.try_acquire();
      pattern += p ? '1' : '0';
      if (p) p->ignore();
    }
    return pattern;
  };
  EXPECT_EQ(admitted_pattern(1), admitted_pattern(1));
  EXPECT_NE(admitted_pattern(1), admitted_pattern(2));
}

// --- Flapping --------------------------------------------------------------------

TEST(Flapping, ReopeningSoonAfterRecoveringIsFlapping) {
  ManualClock clock;
  BreakerPolicy<ManualClock> policy(
      {.consecutive_failures = 1, .open_duration = 5s, .flapping_period = 60s}, clock);
  std::vector<bool> opening_flaps;
  policy.on_transition([&](const TransitionEvent& e) {
    if (e.to == State::open && e.from == State::closed) opening_flaps.push_back(e.flapping);
  });
  BasicCircuitBreaker<ManualClock> b(policy);
  record(b, Outcome::failure);  // first opening: never flapping
  clock.advance(5s);
  record(b, Outcome::success);  // recovered
  clock.advance(30s);
  record(b, Outcome::failure);  // reopened 30 s after recovering
  EXPECT_TRUE(b.snapshot().flapping);
  clock.advance(5s);
  record(b, Outcome::success);
  EXPECT_TRUE(b.snapshot().flapping) << "still flapping until it stays closed for the period";
  clock.advance(60s);
  EXPECT_FALSE(b.snapshot().flapping);
  record(b, Outcome::failure);  // 60 s after recovering: not a flap
  EXPECT_FALSE(b.snapshot().flapping);
  EXPECT_EQ(opening_flaps, (std::vector<bool>{false, true, false}));
}

TEST(Flapping, AManualResetIsNotARecovery) {
  ManualClock clock;
  BasicCircuitBreaker<ManualClock> b({.consecutive_failures = 1, .flapping_period = 60s}, clock);
  record(b, Outcome::failure);
  b.reset();
  record(b, Outcome::failure);
  EXPECT_FALSE(b.snapshot().flapping);
}

// A failed probe is part of the same flapping episode: the flag stays until the breaker
// has stayed closed for the period.
TEST(Flapping, AFailedProbeDoesNotEndTheFlapping) {
  ManualClock clock;
  BasicCircuitBreaker<ManualClock> b(
      {.consecutive_failures = 1, .open_duration = 5s, .flapping_period = 60s}, clock);
  record(b, Outcome::failure);
  clock.advance(5s);
  record(b, Outcome::success);  // recovered
  clock.advance(10s);
  record(b, Outcome::failure);  // flapping reopening
  ASSERT_TRUE(b.snapshot().flapping);
  clock.advance(b.snapshot().open_duration);
  record(b, Outcome::failure);  // the probe fails: still cycling
  EXPECT_EQ(b.state(), State::open);
  EXPECT_TRUE(b.snapshot().flapping) << "HALF_OPEN -> OPEN must not clear the flag";
}

// A breaker that reopens within flapping_period of recovering continues its open-period
// growth instead of starting again at open_duration, so a flickering dependency is
// probed less and less often; the events and the snapshot say so.
TEST(Flapping, AFlappingReopeningContinuesTheGrowth) {
  ManualClock clock;
  BreakerPolicy<ManualClock> policy({.consecutive_failures = 1,
                                     .open_duration = 10s,
                                     .open_growth = {.multiplier = 2.0, .max = 80s},
                                     .flapping_period = 60s},
                                    clock);
  std::vector<Nanos> periods;
  std::vector<bool> flaps;
  policy.on_transition([&](const TransitionEvent& e) {
    if (e.to == State::open) periods.push_back(e.open_duration), flaps.push_back(e.flapping);
  });
  BasicCircuitBreaker<ManualClock> b(policy);
  record(b, Outcome::failure);  // opens for 10 s
  for (int i = 0; i < 4; ++i) {
    clock.advance(b.snapshot().open_duration);
    record(b, Outcome::success);  // recovers...
    EXPECT_EQ(b.snapshot().open_duration, std::min<Nanos>(80s, Nanos(10s) * (2 << i)))
        << "while a flap is possible, the next opening would continue the growth";
    clock.advance(1s);
    record(b, Outcome::failure);  // ...and reopens a second later: flapping
    EXPECT_EQ(b.snapshot().reopens, static_cast<std::uint32_t>(std::min(i + 2, 5)));
  }
  EXPECT_EQ(periods, (std::vector<Nanos>{10s, 20s, 40s, 80s, 80s}));
  EXPECT_EQ(flaps, (std::vector<bool>{false, true, true, true, true}));

  // Once it stays closed for the flapping period, the next opening starts at the base.
  clock.advance(80s);
  record(b, Outcome::success);
  clock.advance(61s);
  EXPECT_EQ(b.snapshot().open_duration, Nanos(10s));
  record(b, Outcome::failure);
  EXPECT_EQ(periods.back(), Nanos(10s));
  EXPECT_FALSE(flaps.back());
  EXPECT_FALSE(b.snapshot().flapping);
}

TEST(Flapping, AManualResetStartsTheGrowthAgain) {
  ManualClock clock;
  BasicCircuitBreaker<ManualClock> b({.consecutive_failures = 1,
                                      .open_duration = 10s,
                                      .open_growth = {.multiplier = 2.0, .max = 80s},
                                      .flapping_period = 60s},
                                     clock);
  record(b, Outcome::failure);
  clock.advance(10s);
  record(b, Outcome::failure);  // probe fails: 20 s
  clock.advance(20s);
  record(b, Outcome::success);  // recovered at growth 2
  b.reset();                    // an operator's reset is not a recovery
  record(b, Outcome::failure);
  EXPECT_EQ(b.snapshot().open_duration, Nanos(10s));
  EXPECT_FALSE(b.snapshot().flapping);
}

// --- Generations and laps: a window never shows calls from before a transition --------

// A time-window breaker whose clock does not start at zero recovered, then re-opened on
// outcomes from before the outage: the half-open tally had no lap, so the next CLOSED
// window started on a lap its first one had used, and took those buckets for its own.
TEST(WindowPhases, AfterRecoveringAWindowHoldsNoCallsFromBeforeTheOutage) {
  for (Nanos start : {Nanos(0), Nanos(20s), Nanos(std::int64_t{1} << 40)}) {
    ManualClock clock{ManualClock::time_point(start)};
    TimeBreaker b({.window = {.length = 10s},
                   .minimum_calls = 10,
                   .slow_call_rate = 0.5,
                   .slow_call_duration = 100ms,
                   .consecutive_failures = 0,
                   .open_duration = 5s},
                  clock);
    clock.advance(1s);
    record(b, Outcome::success, 10, 200ms);  // ten slow calls: opens
    ASSERT_EQ(b.state(), State::open) << start.count();
    clock.advance(5s);
    record(b, Outcome::success, 1, 10ms);  // the probe succeeds: closes
    ASSERT_EQ(b.state(), State::closed) << start.count();
    clock.advance(500ms);
    record(b, Outcome::success, 1, 200ms);  // one slow call in the new window
    EXPECT_EQ(b.state(), State::closed) << "start " << start.count();
    ASSERT_TRUE(b.snapshot().window);
    EXPECT_EQ(b.snapshot().window->calls, 1u) << "start " << start.count();
  }
}

// reset() promises an empty window, however many resets there were with no call between
// (the window kept 12 bits of the generation, the count ring 5: after 4,096 resets the
// window from before came back).
template <class B>
void resets_leave_an_empty_window(typename B::Config config) {
  ManualClock clock{ManualClock::time_point(Nanos(7s))};
  config.failure_rate = 0.5;
  config.minimum_calls = 10;
  B b(config, clock);
  record(b, Outcome::failure, 9);
  for (int i = 0; i < 4096; ++i) b.reset();
  record(b, Outcome::failure);
  EXPECT_EQ(b.state(), State::closed);
  ASSERT_TRUE(b.snapshot().window);
  EXPECT_EQ(b.snapshot().window->calls, 1u);
  for (int i = 0; i < (1 << 19); ++i) b.reset();  // a whole wrap of the generation
  EXPECT_EQ(b.snapshot().window->calls, 0u);
}
TEST(WindowPhases, ResetLeavesAnEmptyCountWindow) {
  resets_leave_an_empty_window<CountBreaker>({.window = {.size = 20}});
}
TEST(WindowPhases, ResetLeavesAnEmptyTimeWindow) {
  resets_leave_an_empty_window<TimeBreaker>({.window = {.length = 60s}});
}

// After a long idle gap within one generation, an in-flight slot from long ago must not
// read as a future epoch (epochs kept 21 bits): the next call's start time went into the
// future, its measured duration negative, and a slow call went unseen.
TEST(WindowPhases, ALongIdleGapDoesNotHideTheNextSlowCall) {
  constexpr Ticks kEpoch = Ticks{1} << 20;  // slow_call_duration 1 ms: epochs of 2^20 ns
  for (Ticks epochs : {(Ticks{1} << 21) - 5, (Ticks{1} << 28) - 5, (Ticks{1} << 28) + 3}) {
    ManualClock clock{ManualClock::time_point(Nanos(1s))};
    TimeBreaker b({.window = {.length = 10s},
                   .minimum_calls = 100,
                   .slow_call_rate = 0.5,
                   .slow_call_duration = 1ms,
                   .count_in_flight_slow_calls = true,
                   .consecutive_failures = 0},
                  clock);
    record(b, Outcome::success);  // one fast call: its epoch's slot stays behind
    clock.advance(Nanos(epochs * kEpoch));
    auto p = b.try_acquire();
    ASSERT_TRUE(p);
    clock.advance(5ms);
    p->record_success();  // measured by the breaker: 5 ms, slow
    ASSERT_TRUE(b.snapshot().window);
    EXPECT_EQ(b.snapshot().window->slow_successes, 1u) << epochs << " idle epochs";
  }
}

// --- Manual control with a window -------------------------------------------------

TEST(WindowedManualControl, MetricsOnlyReportsRatesButNeverRejects) {
  ManualClock clock;
  TimeBreaker b({.window = {.length = 60s},
                 .minimum_calls = 10,
                 .failure_rate = 0.2,
                 .consecutive_failures = 0},
                clock);
  ASSERT_TRUE(b.transition_to(State::metrics_only));
  record(b, Outcome::failure, 5);
  record(b, Outcome::success, 15);
  EXPECT_EQ(b.state(), State::metrics_only);
  const BreakerSnapshot s = b.snapshot();
  ASSERT_TRUE(s.failure_rate);
  EXPECT_DOUBLE_EQ(*s.failure_rate, 0.25)
      << "measure a dependency's normal error rate before enforcing";
}

TEST(WindowedManualControl, OutcomesFromBeforeAResetCountNowhere) {
  ManualClock clock;
  CountBreaker b(
      {.window = {.size = 10}, .minimum_calls = 2, .failure_rate = 0.5, .consecutive_failures = 0},
      clock);
  auto before = b.try_acquire();
  record(b, Outcome::failure);
  b.reset();
  EXPECT_EQ(b.snapshot().window->calls, 0u);
  before->record_failure();
  record(b, Outcome::success);
  EXPECT_EQ(b.snapshot().window->calls, 1u);
  EXPECT_EQ(b.state(), State::closed);
}

// --- Snapshot invariants -------------------------------------------------------

TEST(WindowSnapshot, SlowSplitsIntoSlowSuccessesAndSlowFailures) {
  ManualClock clock;
  CountBreaker b({.window = {.size = 100},
                  .minimum_calls = 1000,
                  .slow_call_rate = 1.0,
                  .slow_call_duration = 10ms,
                  .consecutive_failures = 0},
                 clock);
  record(b, Outcome::success, 3, 20ms);
  record(b, Outcome::failure, 2, 20ms);
  record(b, Outcome::failure, 4, 1ms);
  const WindowCounts w = *b.snapshot().window;
  EXPECT_EQ(w.calls, 9u);
  EXPECT_EQ(w.failures, 6u);
  EXPECT_EQ(w.slow_successes, 3u);
  EXPECT_EQ(w.slow_failures, 2u);
  EXPECT_EQ(w.slow(), 5u);
}

// --- Configuration ---------------------------------------------------------------

TEST(PolicyConfig, EveryBadFieldIsNamed) {
  // Each field by its dotted path, for the configuration type that has it.
  const std::vector<std::pair<TimeWindowConfig, std::string>> time = {
      {{.failure_rate = 1.5}, "failure_rate"},
      {{.failure_rate = 0.0}, "failure_rate"},
      {{.slow_call_rate = 2.0, .slow_call_duration = 1s}, "slow_call_rate"},
      {{.slow_call_rate = 0.5}, "slow_call_duration"},
      {{.failure_rate = 0.5, .slow_call_duration = -1s}, "slow_call_duration"},
      {{.minimum_calls = 0, .failure_rate = 0.5}, "minimum_calls"},
      {{.window = {.length = 0s}, .failure_rate = 0.5}, "window.length"},
      {{.window = {.buckets = 0}, .failure_rate = 0.5}, "window.buckets"},
      {{.window = {.buckets = 11}, .failure_rate = 0.5}, "window.buckets"},
      {{.window = {.length = 5ms, .buckets = 10}, .failure_rate = 0.5}, "window.buckets"},
      {{.failure_rate = 0.5, .open_growth = {.multiplier = 0.9}}, "open_growth.multiplier"},
      {{.failure_rate = 0.5, .count_in_flight_slow_calls = true}, "count_in_flight_slow_calls"},
      {{.failure_rate = 0.5, .consecutive_failures = 65'536}, "consecutive_failures"},
      {{.failure_rate = 0.5, .half_open = {.fraction = 0.0}}, "half_open.fraction"},
      {{.failure_rate = 0.5, .half_open = {.ramp = {0.5}}}, "half_open.ramp"},
      {{.failure_rate = 0.5,
        .half_open = {.fraction = 0.1, .ramp = {0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}}},
       "half_open.ramp"},
      {{.failure_rate = 0.5, .half_open = {.probes = 9000}}, "half_open.probes"},
      {{.failure_rate = 0.5, .half_open = {.max_in_flight = 1, .fraction = 0.5}},
       "half_open.max_in_flight"},
      {{.failure_rate = 0.5, .flapping_period = -1s}, "flapping_period"},
      {{}, "failure_rate"},  // no trip rule at all
  };
  for (const auto& [config, field] : time) {
    auto r = validate(config, 10);
    ASSERT_FALSE(r) << field;
    EXPECT_EQ(r.error().field, field) << r.error().to_string();
    EXPECT_THROW(TimeWindowBreaker{config}, InvalidConfig) << field;
  }
  const std::vector<std::pair<CountWindowConfig, std::string>> count = {
      {{.failure_rate = -0.1}, "failure_rate"},
      {{.window = {.size = 0}, .failure_rate = 0.5}, "window.size"},
      {{.window = {.size = 70'000}, .failure_rate = 0.5}, "window.size"},
      {{.failure_rate = 0.5, .open_duration = 10s, .open_growth = {.max = 5s}}, "open_growth.max"},
      {{.failure_rate = 0.5, .open_growth = {.multiplier = 2}}, "open_growth.max"},
      {{.name = "", .failure_rate = 0.5}, "name"},
      {{.consecutive_failures = 0}, "failure_rate"},
  };
  for (const auto& [config, field] : count) {
    auto r = validate(config);
    ASSERT_FALSE(r) << field;
    EXPECT_EQ(r.error().field, field) << r.error().to_string();
    EXPECT_THROW(CountWindowBreaker{config}, InvalidConfig) << field;
  }
  EXPECT_THROW(TimeWindowBreaker({.window = {.buckets = 20}, .failure_rate = 0.5}), InvalidConfig);
  EXPECT_NO_THROW((BasicCircuitBreaker<SteadyClock, TimeWindow<30>>(
      {.window = {.buckets = 20}, .failure_rate = 0.5})));
  EXPECT_FALSE(validate(TimeWindowConfig{.window = {.buckets = 20}, .failure_rate = 0.5}));
  EXPECT_TRUE(validate(TimeWindowConfig{.window = {.buckets = 20}, .failure_rate = 0.5}, 30));
  EXPECT_TRUE(validate(
      CountWindowConfig{.failure_rate = 1.0, .slow_call_rate = 1.0, .slow_call_duration = 1s}));
  // Each trip rule alone is enough.
  EXPECT_TRUE(validate(CountWindowConfig{.consecutive_failures = 3}));
  EXPECT_TRUE(validate(CountWindowConfig{.slow_call_rate = 0.5, .slow_call_duration = 1s}));
}

TEST(PolicyConfig, RateConfigurationsHaveNoHiddenConsecutiveFailureRule) {
  EXPECT_EQ(CountWindowConfig{}.consecutive_failures, 0u);
  EXPECT_EQ(TimeWindowConfig{}.consecutive_failures, 0u);
  EXPECT_EQ(BreakerConfig{}.consecutive_failures, 5u);
  ManualClock clock;
  CountBreaker b({.window = {.size = 100}, .failure_rate = 0.9}, clock);
  record(b, Outcome::failure, 20);  // 20 failures in a row, below the 100-call minimum
  EXPECT_EQ(b.state(), State::closed);
}

TEST(PolicyConfig, AWindowWithoutATripRuleSuggestsCalibrating) {
  auto r = validate(TimeWindowConfig{.name = "reviews"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().field, "failure_rate");
  EXPECT_NE(r.error().message.find("bulwark calibrate"), std::string::npos) << r.error().message;
}

TEST(PolicyConfig, HalfOpenLimitsDefaultToTheProbes) {
  ManualClock clock;
  BasicCircuitBreaker<ManualClock> b({.consecutive_failures = 1, .half_open = {.probes = 3}},
                                     clock);
  EXPECT_FALSE(b.transition_to(State::half_open));  // from CLOSED: refused
  ASSERT_TRUE(b.transition_to(State::open));
  ASSERT_TRUE(b.transition_to(State::half_open));
  auto p1 = b.try_acquire();
  auto p2 = b.try_acquire();
  auto p3 = b.try_acquire();
  EXPECT_TRUE(p1 && p2 && p3) << "max_in_flight unset: as many probes at once as it judges";
  EXPECT_FALSE(b.try_acquire());
}

TEST(PolicyLayout, SizesAndExtraMemory) {
  static_assert(sizeof(CircuitBreaker) == 64);
  static_assert(sizeof(TimeWindowBreaker) <= 256);
  CountWindowBreaker b({.window = {.size = 1000}, .failure_rate = 0.5});
  EXPECT_EQ(b.extra_memory(), 2000u);  // two bytes per call
  EXPECT_LE(sizeof(CountWindowBreaker), 128u);
}

}  // namespace
}  // namespace bulwark
