// Behaviour of the lazy circuit breaker, in virtual time: every test sets the clock,
// makes calls and asserts on states, events and snapshots. Nothing sleeps.

#include "bulwark/circuit_breaker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace bulwark {

// Lets tests preset the rarely-moving counters near their limits.
template <class Breaker>
struct BreakerTestAccess {
  static void set_cold(Breaker& b, std::uint64_t cancelled, std::uint64_t opens) {
    b.cold_.store(Breaker::Cold::View::make(Breaker::Cold::Cancelled::value(cancelled),
                                            Breaker::Cold::Opens::value(opens)));
  }
  static void add_cancelled(Breaker& b) { b.add_cold(1, 0); }
  static void add_open(Breaker& b) { b.add_cold(0, 1); }
};

namespace {

using namespace std::chrono_literals;
using Breaker = BasicCircuitBreaker<ManualClock>;
using Access = BreakerTestAccess<Breaker>;

struct Recorded {
  State from, to;
  TransitionReason reason;
  Ticks at;
  std::uint32_t generation;
};

class BreakerTest : public ::testing::Test {
 protected:
  BreakerPolicy<ManualClock> make_policy(BreakerConfig config) {
    BreakerPolicy<ManualClock> policy(std::move(config), clock);
    policy.on_transition([this](const TransitionEvent& e) {
      events.push_back({e.from, e.to, e.reason, e.at, e.generation});
      last_name = std::string(e.name);
      last_breaker = e.breaker;
    });
    return policy;
  }

  static void fail(Breaker& b, int n = 1) {
    for (int i = 0; i < n; ++i) {
      auto p = b.try_acquire();
      ASSERT_TRUE(p) << "call " << i << " was rejected";
      p->record_failure();
    }
  }
  static void succeed(Breaker& b, int n = 1) {
    for (int i = 0; i < n; ++i) {
      auto p = b.try_acquire();
      ASSERT_TRUE(p) << "call " << i << " was rejected";
      p->record_success();
    }
  }

  ManualClock clock;
  std::vector<Recorded> events;
  std::string last_name;
  const void* last_breaker = nullptr;
};

// Lazy recovery, with the clock moved instead of the trip time.
TEST_F(BreakerTest, LazyRecovery) {
  Breaker b({.consecutive_failures = 1, .open_duration = 1min}, clock);
  fail(b);
  ASSERT_EQ(b.state(), State::open);

  clock.advance(2min);
  auto probe = b.try_acquire();
  ASSERT_TRUE(probe) << "expected the probe to be allowed";
  EXPECT_EQ(b.state(), State::half_open);
  EXPECT_TRUE(probe->is_probe());

  probe->record_success();
  EXPECT_EQ(b.state(), State::closed) << "expected CLOSED after a successful probe";
}

TEST_F(BreakerTest, OpenRejectsUntilTheOpenPeriodHasElapsedExactly) {
  Breaker b({.consecutive_failures = 2, .open_duration = 30s}, clock);
  fail(b, 2);
  clock.advance(30s - 1ns);
  auto rejected = b.try_acquire();
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.error().reason, RejectReason::open);
  EXPECT_EQ(rejected.error().retry_after, 1ns);
  EXPECT_EQ(b.state(), State::open);

  clock.advance(1ns);
  EXPECT_TRUE(b.try_acquire());
}

TEST_F(BreakerTest, RetryAfterCountsDownTheOpenPeriod) {
  Breaker b({.consecutive_failures = 1, .open_duration = 10s}, clock);
  fail(b);
  EXPECT_EQ(b.try_acquire().error().retry_after, 10s);
  clock.advance(4s);
  EXPECT_EQ(b.try_acquire().error().retry_after, 6s);
}

TEST_F(BreakerTest, ASuccessResetsTheConsecutiveFailureCount) {
  Breaker b({.consecutive_failures = 3}, clock);
  fail(b, 2);
  succeed(b);
  fail(b, 2);
  EXPECT_EQ(b.state(), State::closed);
  EXPECT_EQ(b.snapshot().consecutive_failures, 2u);
  fail(b);
  EXPECT_EQ(b.state(), State::open);
}

TEST_F(BreakerTest, IgnoredAndCancelledCallsNeitherTripNorReset) {
  Breaker b({.consecutive_failures = 2}, clock);
  fail(b);
  b.try_acquire()->ignore();
  { auto cancelled = b.try_acquire(); }
  EXPECT_EQ(b.snapshot().consecutive_failures, 1u);
  fail(b);
  EXPECT_EQ(b.state(), State::open);
  const BreakerSnapshot s = b.snapshot();
  EXPECT_EQ(s.ignored, 1u);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.failures, 2u);
  EXPECT_EQ(s.permitted, 4u);
}

// The clock is read only to decide whether an open period is over: a
// CLOSED breaker never reads it.
struct CountingClock {
  using duration = Nanos;
  using time_point = std::chrono::time_point<CountingClock, Nanos>;
  static constexpr bool is_steady = true;
  time_point now() const noexcept {
    ++reads;
    return time_point(Nanos(ticks));
  }
  mutable int reads = 0;
  Ticks ticks = 0;
};

TEST_F(BreakerTest, ClosedPathNeverReadsTheClock) {
  CountingClock counting;
  BasicCircuitBreaker<CountingClock> b({.consecutive_failures = 3}, counting);
  const int after_construction = counting.reads;
  for (int i = 0; i < 100; ++i) {
    auto p = b.try_acquire();
    ASSERT_TRUE(p);
    if (i % 3 == 0) {
      p->record_failure();
    } else {
      p->record_success();
    }
  }
  EXPECT_EQ(counting.reads, after_construction);
}

TEST_F(BreakerTest, EveryTransitionEmitsOneEventInOrder) {
  auto policy = make_policy({.name = "payments",
                             .consecutive_failures = 2,
                             .open_duration = 10s,
                             .half_open = {.probes = 2}});
  Breaker b(policy);
  fail(b, 2);  // closed -> open at t=0
  clock.advance(10s);
  auto probe = b.try_acquire();  // open -> half_open at t=10
  probe->record_failure();       // half_open -> open at t=10
  clock.advance(10s);
  succeed(b);  // open -> half_open at t=20 (one success)
  clock.advance(1s);
  succeed(b);  // half_open -> closed at t=21

  ASSERT_EQ(events.size(), 5u);
  const std::vector<std::pair<State, State>> chain = {{State::closed, State::open},
                                                      {State::open, State::half_open},
                                                      {State::half_open, State::open},
                                                      {State::open, State::half_open},
                                                      {State::half_open, State::closed}};
  const std::vector<TransitionReason> reasons = {
      TransitionReason::consecutive_failures, TransitionReason::open_period_elapsed,
      TransitionReason::probe_failed, TransitionReason::open_period_elapsed,
      TransitionReason::probes_succeeded};
  const std::vector<Ticks> times = {0, Ticks{10'000'000'000}, Ticks{10'000'000'000},
                                    Ticks{20'000'000'000}, Ticks{21'000'000'000}};
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].from, chain[i].first) << i;
    EXPECT_EQ(events[i].to, chain[i].second) << i;
    EXPECT_EQ(events[i].reason, reasons[i]) << i;
    EXPECT_EQ(events[i].at, times[i]) << i;
    EXPECT_EQ(events[i].generation, i + 1) << i;
  }
  EXPECT_EQ(last_name, "payments");
  EXPECT_EQ(last_breaker, &b);
  EXPECT_EQ(b.snapshot().opens, 2u);
}

TEST_F(BreakerTest, NoEventForSelfTransitions) {
  auto policy = make_policy({.consecutive_failures = 5});
  Breaker b(policy);
  const auto gen = b.snapshot().generation;
  b.reset();  // CLOSED -> CLOSED: a new generation, but no state change
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(b.snapshot().generation, gen + 1);
  EXPECT_TRUE(b.transition_to(State::metrics_only));
  EXPECT_TRUE(b.transition_to(State::metrics_only));  // already there: nothing
  EXPECT_EQ(events.size(), 1u);
}

TEST_F(BreakerTest, HalfOpenAdmitsKProbesAtOnceAndClosesAfterMSuccesses) {
  Breaker b({.consecutive_failures = 1,
             .open_duration = 5s,
             .half_open = {.probes = 3, .max_in_flight = 2, .max_wait = 0s}},
            clock);
  fail(b);
  clock.advance(5s);
  auto p1 = b.try_acquire();
  auto p2 = b.try_acquire();
  ASSERT_TRUE(p1 && p2);
  auto full = b.try_acquire();
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().reason, RejectReason::half_open_full);
  EXPECT_EQ(b.snapshot().half_open_in_flight, 2u);

  p1->record_success();  // 1 success, a slot is free again
  auto p3 = b.try_acquire();
  ASSERT_TRUE(p3);
  p2->record_success();
  EXPECT_EQ(b.state(), State::half_open);
  EXPECT_EQ(b.snapshot().half_open_successes, 2u);
  p3->record_success();
  EXPECT_EQ(b.state(), State::closed);
}

TEST_F(BreakerTest, AnyProbeFailureReopens) {
  Breaker b({.consecutive_failures = 1,
             .open_duration = 5s,
             .half_open = {.probes = 3, .max_in_flight = 3}},
            clock);
  fail(b);
  clock.advance(5s);
  auto p1 = b.try_acquire();
  auto p2 = b.try_acquire();
  p1->record_success();
  p2->record_failure();
  EXPECT_EQ(b.state(), State::open);
  EXPECT_EQ(b.try_acquire().error().retry_after, 5s);
}

TEST_F(BreakerTest, OutcomeOfACallAdmittedBeforeTheBreakerOpenedChangesNothing) {
  Breaker b({.consecutive_failures = 2, .open_duration = 5s}, clock);
  auto slow = b.try_acquire();  // admitted while CLOSED, completes much later
  fail(b, 2);
  ASSERT_EQ(b.state(), State::open);
  clock.advance(5s);
  auto probe = b.try_acquire();
  ASSERT_TRUE(probe);
  slow->record_failure();  // from the old generation: must not reopen HALF_OPEN
  EXPECT_EQ(b.state(), State::half_open);
  EXPECT_EQ(b.snapshot().half_open_in_flight, 1u) << "a stale outcome freed a slot it never held";
  probe->record_success();
  EXPECT_EQ(b.state(), State::closed);
  EXPECT_EQ(b.snapshot().failures, 3u) << "stale outcomes still count in the totals";
}

TEST_F(BreakerTest, OutcomesFromBeforeAResetCountNowhere) {
  Breaker b({.consecutive_failures = 2}, clock);
  auto a = b.try_acquire();
  auto c = b.try_acquire();
  b.reset();
  a->record_failure();
  c->record_failure();
  EXPECT_EQ(b.state(), State::closed);
  EXPECT_EQ(b.snapshot().consecutive_failures, 0u);
}

TEST_F(BreakerTest, ASuccessFromAnOldGenerationDoesNotResetTheNewCount) {
  Breaker b({.consecutive_failures = 3}, clock);
  auto old = b.try_acquire();
  b.reset();
  fail(b, 2);
  old->record_success();
  EXPECT_EQ(b.snapshot().consecutive_failures, 2u);
}

TEST_F(BreakerTest, ACancelledProbeReleasesItsSlotAndCountsAsNeither) {
  Breaker b({.consecutive_failures = 1,
             .open_duration = 5s,
             .half_open = {.probes = 1, .max_in_flight = 1}},
            clock);
  fail(b);
  clock.advance(5s);
  {
    auto probe = b.try_acquire();
    ASSERT_TRUE(probe);
    ASSERT_FALSE(b.try_acquire());
  }  // destroyed without an outcome: an exception, a cancelled request
  EXPECT_EQ(b.state(), State::half_open);
  const BreakerSnapshot s = b.snapshot();
  EXPECT_EQ(s.half_open_in_flight, 0u);
  EXPECT_EQ(s.half_open_successes, 0u);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.failures, 1u);  // only the one that tripped the breaker
  succeed(b);                 // the slot is usable again
  EXPECT_EQ(b.state(), State::closed);
}

TEST_F(BreakerTest, MovingAPermitTransfersItAndAssigningOneCancelsTheOldOne) {
  Breaker b({.consecutive_failures = 1, .open_duration = 5s, .half_open = {.max_in_flight = 2}},
            clock);
  fail(b);
  clock.advance(5s);
  auto first = b.try_acquire();
  auto second = b.try_acquire();
  Breaker::Permit moved = std::move(*first);
  EXPECT_FALSE(first->active());
  EXPECT_TRUE(moved.active());
  moved = std::move(*second);  // the probe `moved` held is cancelled, not leaked
  EXPECT_EQ(b.snapshot().half_open_in_flight, 1u);
  EXPECT_EQ(b.snapshot().cancelled, 1u);
  moved.record_success();
  moved.record_failure();  // a second report of the same permit is ignored
  EXPECT_EQ(b.state(), State::closed);
}

TEST_F(BreakerTest, ALeakedProbeStopsHoldingItsSlotAfterTheHalfOpenMaxWait) {
  auto policy = make_policy({.consecutive_failures = 1,
                             .open_duration = 5s,
                             .half_open = {.max_in_flight = 1, .max_wait = 20s}});
  Breaker b(policy);
  fail(b);
  clock.advance(5s);
  auto leaked = b.try_acquire();  // its callback is lost: it will report far too late
  ASSERT_TRUE(leaked);

  clock.advance(19s);
  auto waiting = b.try_acquire();
  ASSERT_FALSE(waiting);
  EXPECT_EQ(waiting.error().reason, RejectReason::half_open_full);
  EXPECT_EQ(waiting.error().retry_after, 1s);

  clock.advance(1s);
  const std::size_t events_before = events.size();
  auto fresh = b.try_acquire();  // detected lazily by this request: a fresh round
  ASSERT_TRUE(fresh);
  EXPECT_EQ(b.state(), State::half_open);
  EXPECT_EQ(events.size(), events_before) << "a new half-open round is not a state change";

  leaked->record_failure();  // from the abandoned round: reopens nothing
  EXPECT_EQ(b.state(), State::half_open);
  EXPECT_EQ(b.snapshot().half_open_in_flight, 1u);
  fresh->record_success();
  EXPECT_EQ(b.state(), State::closed);
}

// The wait measures a round, not a probe: when it runs out, probes admitted moments
// ago are given up with the leaked ones. A dependency that answers well but slowly
// must still close the breaker, so a fresh round keeps the successes already earned.
TEST_F(BreakerTest, ASlowButHealthyDependencyClosesAcrossHalfOpenRounds) {
  auto policy = make_policy({.consecutive_failures = 1,
                             .open_duration = 5s,
                             .half_open = {.probes = 5, .max_in_flight = 1, .max_wait = 60s}});
  Breaker b(policy);
  fail(b);
  const auto half_open_at = clock.now() + 5s;
  struct Call {
    Breaker::Permit permit;
    ManualClock::time_point due;
  };
  std::vector<Call> out;
  // A request a second; every admitted call succeeds after 15 s. When the round's
  // 60 s run out, the probe admitted a second earlier is still out.
  for (int second = 0; second < 300 && b.state() != State::closed; ++second) {
    clock.advance(1s);
    for (auto& c : out) {
      if (c.due == clock.now()) c.permit.record_success();
    }
    if (auto p = b.try_acquire()) out.push_back({std::move(*p), clock.now() + 15s});
  }
  EXPECT_EQ(b.state(), State::closed);
  // Four successes in the first round, one in the second.
  EXPECT_EQ(clock.now() - half_open_at, 76s);
}

TEST_F(BreakerTest, WithoutMaxWaitAFullHalfOpenSuggestsOneOpenPeriod) {
  Breaker b({.consecutive_failures = 1, .open_duration = 7s, .half_open = {.max_wait = 0s}}, clock);
  fail(b);
  clock.advance(7s);
  auto probe = b.try_acquire();
  clock.advance(1h);
  auto rejected = b.try_acquire();
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.error().retry_after, 7s);
}

TEST_F(BreakerTest, OpenPeriodGrowsOnEachReopenUpToTheCapAndResetsAfterClosing) {
  Breaker b({.consecutive_failures = 1,
             .open_duration = 10s,
             .open_growth = {.multiplier = 2.0, .max = 35s}},
            clock);
  fail(b);
  for (Nanos expected : {10s, 20s, 35s, 35s}) {
    ASSERT_EQ(b.snapshot().open_duration, expected);
    clock.advance(expected - 1ns);
    ASSERT_FALSE(b.try_acquire()) << "still open 1ns before " << expected.count();
    clock.advance(1ns);
    auto probe = b.try_acquire();
    ASSERT_TRUE(probe);
    probe->record_failure();
  }
  clock.advance(35s);
  succeed(b);
  ASSERT_EQ(b.state(), State::closed);
  clock.advance(b.config().flapping_period);
  fail(b);
  EXPECT_EQ(b.snapshot().open_duration, 10s)
      << "a close the breaker keeps for flapping_period returns to the base period";
}

TEST_F(BreakerTest, OpenPeriodGrowthNeverOverflows) {
  Breaker b({.consecutive_failures = 1,
             .open_duration = 1h,
             .open_growth = {.multiplier = 1e300, .max = 24h}},
            clock);
  fail(b);
  for (int i = 0; i < 40; ++i) {  // more reopens than the counter holds
    const Nanos period = b.snapshot().open_duration;
    ASSERT_GT(period, Nanos::zero()) << i;
    ASSERT_LE(period, 24h) << i;
    clock.advance(period);
    auto probe = b.try_acquire();
    ASSERT_TRUE(probe) << i;
    probe->record_failure();
  }
  EXPECT_EQ(b.snapshot().open_duration, 24h);
  EXPECT_EQ(b.try_acquire().error().retry_after, 24h);
}

TEST_F(BreakerTest, AnInfiniteOpenPeriodNeverEndsByItself) {
  Breaker b({.consecutive_failures = 1,
             .open_duration = Nanos::max(),
             .open_growth = {.max = Nanos::max()}},
            clock);
  fail(b);
  clock.advance(std::chrono::hours(24 * 365 * 200));
  auto r = b.try_acquire();
  ASSERT_FALSE(r);
  EXPECT_GT(r.error().retry_after, std::chrono::hours(24 * 365 * 50));
  clock.set(Nanos::max());  // the end of time: still open
  EXPECT_FALSE(b.try_acquire());
  ASSERT_TRUE(b.transition_to(State::half_open));  // an operator can still probe
  EXPECT_TRUE(b.try_acquire());
}

TEST_F(BreakerTest, ConsecutiveFailureCountSaturatesInsteadOfWrapping) {
  Breaker b({}, clock);
  ASSERT_TRUE(b.transition_to(State::metrics_only));  // counts, never trips: failures pile up
  for (int i = 0; i < 70'000; ++i) b.try_acquire()->record_failure();
  EXPECT_EQ(b.snapshot().consecutive_failures, 65'535u);
  EXPECT_EQ(b.state(), State::metrics_only);
  EXPECT_EQ(b.snapshot().failures, 70'000u);
}

TEST_F(BreakerTest, RareCountersSaturate) {
  Breaker b({}, clock);
  constexpr std::uint64_t kCancelledMax = (std::uint64_t{1} << 38) - 1;
  constexpr std::uint64_t kOpensMax = (std::uint64_t{1} << 24) - 1;
  Access::set_cold(b, kCancelledMax - 1, kOpensMax - 1);
  for (int i = 0; i < 3; ++i) {
    Access::add_cancelled(b);
    Access::add_open(b);
  }
  const BreakerSnapshot s = b.snapshot();
  EXPECT_EQ(s.cancelled, kCancelledMax);
  EXPECT_EQ(s.opens, kOpensMax);
}

TEST_F(BreakerTest, AnImpossibleManualTransitionIsAnErrorThatChangesNothing) {
  auto policy = make_policy({});
  Breaker b(policy);
  const auto gen = b.snapshot().generation;
  auto r = b.transition_to(State::half_open);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().from, State::closed);
  EXPECT_EQ(r.error().to, State::half_open);
  EXPECT_EQ(b.state(), State::closed);
  EXPECT_EQ(b.snapshot().generation, gen);
  EXPECT_TRUE(events.empty());
}

TEST_F(BreakerTest, ForcedOpenStaysOpenPastAnyPeriod) {
  auto policy = make_policy({.open_duration = 1s});
  Breaker b(policy);
  ASSERT_TRUE(b.transition_to(State::forced_open));
  clock.advance(24h);
  auto r = b.try_acquire();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, RejectReason::forced_open);
  EXPECT_EQ(r.error().retry_after, Nanos::max());
  ASSERT_TRUE(b.transition_to(State::half_open));  // an operator may start probing
  EXPECT_TRUE(b.try_acquire());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].reason, TransitionReason::manual);
  EXPECT_EQ(b.snapshot().opens, 1u);
}

TEST_F(BreakerTest, DisabledAdmitsEverythingAndRecordsNothing) {
  Breaker b({.consecutive_failures = 1}, clock);
  ASSERT_TRUE(b.transition_to(State::disabled));
  for (int i = 0; i < 10; ++i) b.try_acquire()->record_failure();
  EXPECT_EQ(b.state(), State::disabled);
  EXPECT_EQ(b.snapshot().consecutive_failures, 0u);
}

TEST_F(BreakerTest, MetricsOnlyRecordsButNeverRejects) {
  Breaker b({.consecutive_failures = 2}, clock);
  ASSERT_TRUE(b.transition_to(State::metrics_only));
  for (int i = 0; i < 5; ++i) b.try_acquire()->record_failure();
  EXPECT_EQ(b.state(), State::metrics_only);
  EXPECT_EQ(b.snapshot().consecutive_failures, 5u);
  ASSERT_TRUE(b.transition_to(State::closed));
  EXPECT_EQ(b.snapshot().consecutive_failures, 0u);
}

TEST_F(BreakerTest, ManualOpenUsesTheOpenPeriod) {
  Breaker b({.open_duration = 3s}, clock);
  ASSERT_TRUE(b.transition_to(State::open));
  EXPECT_FALSE(b.try_acquire());
  clock.advance(3s);
  EXPECT_TRUE(b.try_acquire());
  EXPECT_EQ(b.state(), State::half_open);
}

TEST_F(BreakerTest, AListenerMayCallBackIntoTheBreaker) {
  BreakerPolicy<ManualClock> policy({.consecutive_failures = 1}, clock);
  std::optional<Breaker> b;
  std::vector<std::pair<State, State>> seen;
  policy.on_transition([&](const TransitionEvent& e) {
    seen.emplace_back(e.from, e.to);
    if (e.to == State::open) {
      // Re-entrant: snapshot, admission and a manual transition from inside a listener.
      (void)b->snapshot();
      EXPECT_FALSE(b->try_acquire());
      EXPECT_TRUE(b->transition_to(State::forced_open));
    }
  });
  b.emplace(policy);
  fail(*b);
  EXPECT_EQ(b->state(), State::forced_open);
  const std::vector<std::pair<State, State>> expected = {{State::closed, State::open},
                                                         {State::open, State::forced_open}};
  EXPECT_EQ(seen, expected);
}

// While a transition is being published (its listener runs), an operator's request is
// queued; a rate rule that fires meanwhile must not replace it: the last operator
// action wins.
TEST(BreakerRequests, ARateTripDoesNotReplaceAQueuedManualTransition) {
  ManualClock clock;
  BreakerPolicy<ManualClock, CountWindow> policy(
      {.window = {.size = 10}, .minimum_calls = 1, .failure_rate = 0.5}, clock);
  BasicCircuitBreaker<ManualClock, CountWindow>* breaker = nullptr;
  bool once = false;
  policy.on_transition([&](const TransitionEvent& e) {
    if (e.to != State::closed || once) return;
    once = true;
    EXPECT_TRUE(
        breaker->transition_to(State::forced_open));  // queued: the close is being published
    breaker->try_acquire()->record_failure();         // 1 of 1 failed: the rate rule fires
  });
  BasicCircuitBreaker<ManualClock, CountWindow> b(policy);
  breaker = &b;
  ASSERT_TRUE(b.transition_to(State::metrics_only));
  ASSERT_TRUE(b.transition_to(State::closed));
  EXPECT_EQ(b.state(), State::forced_open);
}

TEST(BreakerRequests, TheLastManualRequestWinsEvenIfItNamesTheCurrentState) {
  ManualClock clock;
  BreakerPolicy<ManualClock> policy({.consecutive_failures = 1}, clock);
  BasicCircuitBreaker<ManualClock>* breaker = nullptr;
  policy.on_transition([&](const TransitionEvent& e) {
    if (e.to != State::open || e.from != State::closed) return;
    EXPECT_TRUE(breaker->transition_to(State::disabled));  // queued...
    EXPECT_TRUE(breaker->transition_to(State::open));      // ...then: stay open after all
  });
  BasicCircuitBreaker<ManualClock> b(policy);
  breaker = &b;
  b.try_acquire()->record_failure();
  EXPECT_EQ(b.state(), State::open);
}

TEST_F(BreakerTest, AThrowingListenerCannotBreakTheBreaker) {
  BreakerPolicy<ManualClock> policy({.consecutive_failures = 1, .open_duration = 1s}, clock);
  int after = 0;
  policy.on_transition([](const TransitionEvent&) { throw std::runtime_error("listener bug"); });
  policy.on_transition([&](const TransitionEvent&) { ++after; });
  Breaker b(policy);
  fail(b);
  EXPECT_EQ(b.state(), State::open);
  clock.advance(1s);
  succeed(b);
  EXPECT_EQ(b.state(), State::closed);
  EXPECT_EQ(after, 3);
}

TEST_F(BreakerTest, RemovedListenersAreNotCalled) {
  BreakerPolicy<ManualClock> policy({.consecutive_failures = 1}, clock);
  int calls = 0;
  const ListenerId id = policy.on_transition([&](const TransitionEvent&) { ++calls; });
  EXPECT_TRUE(policy.remove_listener(id));
  EXPECT_FALSE(policy.remove_listener(id));
  Breaker b(policy);
  fail(b);
  EXPECT_EQ(calls, 0);
}

// A listener may remove itself (or add others) while it runs: emitting holds nothing
// a listener could wait for. The list it runs from stays alive until it returns.
TEST_F(BreakerTest, AListenerCanRemoveItselfWhileItRuns) {
  BreakerPolicy<ManualClock> policy({.consecutive_failures = 1, .open_duration = 1s}, clock);
  int once = 0, always = 0;
  ListenerId self = 0;
  self = policy.on_transition([&](const TransitionEvent&) {
    ++once;
    EXPECT_TRUE(policy.remove_listener(self));
    policy.on_transition([&](const TransitionEvent&) { ++always; });
  });
  Breaker b(policy);
  fail(b);  // CLOSED -> OPEN: `once` runs, removes itself, adds `always`
  clock.advance(1s);
  succeed(b);  // OPEN -> HALF_OPEN -> CLOSED
  EXPECT_EQ(once, 1);
  EXPECT_EQ(always, 2);
}

TEST_F(BreakerTest, RejectionListenersHearEveryRejectionWithItsReason) {
  BreakerPolicy<ManualClock> policy(
      {.name = "quotes", .consecutive_failures = 1, .open_duration = 10s}, clock);
  std::vector<std::pair<RejectReason, Nanos>> heard;
  const ListenerId transitions = policy.on_transition([](const TransitionEvent&) {});
  const ListenerId rejections = policy.on_rejection([&](const RejectionEvent& e) {
    EXPECT_EQ(e.name, "quotes");
    heard.emplace_back(e.reason, e.retry_after);
  });
  EXPECT_NE(transitions, rejections) << "one id space for both kinds";
  Breaker b(policy);
  fail(b);
  clock.advance(4s);
  EXPECT_FALSE(b.try_acquire());
  ASSERT_TRUE(b.transition_to(State::forced_open));
  EXPECT_FALSE(b.try_acquire());
  const std::vector<std::pair<RejectReason, Nanos>> expected = {
      {RejectReason::open, 6s}, {RejectReason::forced_open, Nanos::max()}};
  EXPECT_EQ(heard, expected);
  EXPECT_TRUE(policy.remove_listener(rejections));
  EXPECT_FALSE(b.try_acquire());
  EXPECT_EQ(heard.size(), 2u);
  EXPECT_TRUE(policy.remove_listener(transitions));
  EXPECT_EQ(b.snapshot().rejected, 3u);
}

TEST_F(BreakerTest, ExecuteReturnsTheResultOrTheRejectionAndRethrows) {
  Breaker b({.consecutive_failures = 1, .open_duration = 1s}, clock);
  auto ok = b.execute([] { return 42; });
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 42);
  EXPECT_THROW((void)b.execute([]() -> int { throw std::runtime_error("down"); }),
               std::runtime_error);
  EXPECT_EQ(b.state(), State::open);
  auto rejected = b.execute([] { return 1; });
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.error().reason, RejectReason::open);
  auto v = b.execute([] {});
  EXPECT_FALSE(v);
}

TEST_F(BreakerTest, AClockSteppingBackKeepsTheBreakerOpen) {
  clock.set(100s);
  Breaker b({.consecutive_failures = 1, .open_duration = 10s}, clock);
  fail(b);
  clock.set(50s);
  EXPECT_FALSE(b.try_acquire());
  EXPECT_EQ(b.snapshot().time_in_state, Nanos::zero());
  clock.set(110s);
  EXPECT_TRUE(b.try_acquire());
}

TEST_F(BreakerTest, ReadingASnapshotHasNoSideEffects) {
  Breaker b({.consecutive_failures = 1, .open_duration = 1s}, clock);
  fail(b);
  clock.advance(1h);
  const BreakerSnapshot s = b.snapshot();
  EXPECT_EQ(s.state, State::open) << "the open period elapsed, but only a request may end it";
  EXPECT_EQ(s.time_in_state, 1h);
  EXPECT_EQ(b.state(), State::open);
  EXPECT_EQ(b.snapshot().rejected, 0u);
}

TEST_F(BreakerTest, PoliciesAreSharedAndOutliveTheirCopies) {
  auto policy = std::make_unique<BreakerPolicy<ManualClock>>(
      BreakerConfig{.name = "shared", .consecutive_failures = 1}, clock);
  Breaker a(*policy), b(*policy);
  policy.reset();  // the breakers keep it alive
  EXPECT_EQ(a.name(), "shared");
  fail(a);
  EXPECT_EQ(a.state(), State::open);
  EXPECT_EQ(b.state(), State::closed);
  EXPECT_EQ(b.policy().config().consecutive_failures, 1u);
}

TEST(BreakerConfigTest, EveryBadFieldIsNamed) {
  const std::vector<std::pair<BreakerConfig, std::string>> bad = {
      {{.name = ""}, "name"},
      {{.consecutive_failures = 65'536}, "consecutive_failures"},
      {{.consecutive_failures = 0}, "consecutive_failures"},  // a breaker that never trips
      {{.half_open = {.fraction = 0}}, "half_open.fraction"},
      {{.half_open = {.max_in_flight = 2, .fraction = 0.5}}, "half_open.max_in_flight"},
      {{.half_open = {.ramp = {0.5}}}, "half_open.ramp"},
      {{.half_open = {.fraction = 0.5, .ramp = {0.25}}}, "half_open.ramp"},
      {{.flapping_period = -1s}, "flapping_period"},
      {{.open_duration = 0s}, "open_duration"},
      {{.open_duration = -1s}, "open_duration"},
      {{.open_growth = {.multiplier = 0.5}}, "open_growth.multiplier"},
      {{.open_growth = {.multiplier = std::numeric_limits<double>::quiet_NaN()}},
       "open_growth.multiplier"},
      {{.open_growth = {.multiplier = std::numeric_limits<double>::infinity()}},
       "open_growth.multiplier"},
      {{.open_duration = 10s, .open_growth = {.max = 5s}}, "open_growth.max"},
      {{.open_growth = {.multiplier = 2.0}}, "open_growth.max"},
      {{.half_open = {.max_in_flight = 0}}, "half_open.max_in_flight"},
      {{.half_open = {.max_in_flight = 70'000}}, "half_open.max_in_flight"},
      {{.half_open = {.probes = 0}}, "half_open.probes"},
      {{.half_open = {.max_wait = -1s}}, "half_open.max_wait"},
  };
  for (const auto& [config, field] : bad) {
    auto result = validate(config);
    ASSERT_FALSE(result) << field;
    EXPECT_EQ(result.error().field, field);
    EXPECT_NE(result.error().to_string().find(field), std::string::npos);
    EXPECT_THROW(CircuitBreaker{config}, InvalidConfig) << field;
  }
  EXPECT_TRUE(validate(BreakerConfig{}));
  EXPECT_TRUE(validate(BreakerConfig{.open_duration = 1h})) << "setting the period alone must work";
}

TEST(BreakerConfigTest, DurationsInMessagesReadAsWritten) {
  EXPECT_EQ(detail::format_duration(30s), "30s");
  EXPECT_EQ(detail::format_duration(1500ms), "1.5s");
  EXPECT_EQ(detail::format_duration(250ms), "250ms");
  EXPECT_EQ(detail::format_duration(2h), "2h");
  EXPECT_EQ(detail::format_duration(-1s), "-1s");
  EXPECT_EQ(detail::format_duration(0s), "0ns");
  EXPECT_EQ(detail::format_duration(Nanos::min()).back(), 'h');  // no overflow at the extreme
  auto r = validate(BreakerConfig{.name = "x", .open_duration = 10s, .open_growth = {.max = 5s}});
  EXPECT_EQ(r.error().to_string(),
            "circuit breaker 'x': open_growth.max must be at least open_duration (got 5s < 10s)");
}

TEST(BreakerConfigTest, TheErrorNamesTheBreakerAndTheValue) {
  auto result = validate(BreakerConfig{.name = "reviews", .open_growth = {.multiplier = 0.5}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().to_string(),
            "circuit breaker 'reviews': open_growth.multiplier must be a finite number >= 1 (got "
            "0.5)");
}

TEST(BreakerLayoutTest, OneCacheLine) {
  static_assert(sizeof(CircuitBreaker) == 64);
  static_assert(alignof(CircuitBreaker) == 64);
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
  static_assert(std::atomic<Ticks>::is_always_lock_free);
  SUCCEED();
}

}  // namespace
}  // namespace bulwark
