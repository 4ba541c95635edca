// Metrics: histogram buckets, transition indexing, component counters, the snapshot
// adapter (including snapshot fields the breaker does not have yet), outage tracking.

#include "bulwark/metrics.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <set>

#include "bulwark/circuit_breaker.h"

namespace {

using namespace std::chrono_literals;
using bulwark::LatencyBuckets;
using bulwark::Nanos;
using bulwark::State;

// The obvious definition, to check the fast one against.
std::size_t reference_index(std::int64_t ns) {
  for (std::size_t i = 0; i < LatencyBuckets::kFinite; ++i) {
    if (ns <= LatencyBuckets::kUpperNanos[i]) return i;
  }
  return LatencyBuckets::kFinite;
}

TEST(LatencyBuckets, BoundsAreInclusiveLikePrometheusLe) {
  EXPECT_EQ(LatencyBuckets::index(Nanos(0)), 0u);
  EXPECT_EQ(LatencyBuckets::index(Nanos(-5)), 0u);
  EXPECT_EQ(LatencyBuckets::index(500us), 0u);
  EXPECT_EQ(LatencyBuckets::index(500us + Nanos(1)), 1u);
  EXPECT_EQ(LatencyBuckets::index(1ms), 1u);
  EXPECT_EQ(LatencyBuckets::index(400ms), 9u);  // le=0.5
  EXPECT_EQ(LatencyBuckets::index(50s), 15u);
  EXPECT_EQ(LatencyBuckets::index(50s + Nanos(1)), 16u);  // +Inf
  EXPECT_EQ(LatencyBuckets::index(Nanos::max()), 16u);
}

TEST(LatencyBuckets, FastIndexAgreesWithTheDefinitionEverywhere) {
  for (std::int64_t bound : LatencyBuckets::kUpperNanos) {
    for (std::int64_t d = -2; d <= 2; ++d) {
      EXPECT_EQ(LatencyBuckets::index(Nanos(bound + d)), reference_index(bound + d)) << bound + d;
    }
  }
  for (int b = 0; b < 63; ++b) {
    const std::int64_t p = std::int64_t{1} << b;
    for (std::int64_t v : {p - 1, p, p + 1})
      EXPECT_EQ(LatencyBuckets::index(Nanos(v)), reference_index(v)) << v;
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const auto v = static_cast<std::int64_t>(rng() >> (rng() % 64));
    ASSERT_EQ(LatencyBuckets::index(Nanos(v)), reference_index(v)) << v;
  }
}

TEST(LatencyBuckets, LabelsMatchTheBounds) {
  for (std::size_t i = 0; i < LatencyBuckets::kFinite; ++i) {
    EXPECT_DOUBLE_EQ(std::stod(std::string(LatencyBuckets::kLabels[i])),
                     static_cast<double>(LatencyBuckets::kUpperNanos[i]) / 1e9);
  }
  EXPECT_EQ(LatencyBuckets::kLabels.back(), "+Inf");
}

TEST(LatencyHistogram, CountsSumsAndResets) {
  bulwark::LatencyHistogram h;
  h.observe(3ms);
  h.observe(3ms);
  h.observe(2min);
  h.observe(Nanos(-1));  // counted, as zero
  const auto r = h.read();
  EXPECT_EQ(r.count(), 4u);
  EXPECT_EQ(r.buckets[LatencyBuckets::index(3ms)], 2u);
  EXPECT_EQ(r.buckets[LatencyBuckets::kFinite], 1u);
  EXPECT_EQ(r.buckets[0], 1u);
  EXPECT_EQ(r.sum_nanos, static_cast<std::uint64_t>(Nanos(6ms + 2min).count()));
  h.reset();
  EXPECT_EQ(h.read().count(), 0u);
}

TEST(Transitions, EveryOrderedPairHasItsOwnIndex) {
  std::set<std::size_t> seen;
  for (std::size_t f = 0; f < bulwark::kStateCount; ++f) {
    for (std::size_t t = 0; t < bulwark::kStateCount; ++t) {
      if (f == t) continue;
      const std::size_t i = bulwark::transition_index(static_cast<State>(f), static_cast<State>(t));
      EXPECT_LT(i, bulwark::kTransitionPairs);
      EXPECT_EQ(bulwark::transition_from(i), static_cast<State>(f));
      EXPECT_EQ(bulwark::transition_to(i), static_cast<State>(t));
      seen.insert(i);
    }
  }
  EXPECT_EQ(seen.size(), bulwark::kTransitionPairs);
  bulwark::TransitionCounts c;
  c.count(State::closed, State::open);
  c.count(State::closed, State::open);
  c.count(State::open, State::open);  // not a transition
  EXPECT_EQ(c.get(State::closed, State::open), 2u);
  EXPECT_EQ(c.get(State::open, State::closed), 0u);
  EXPECT_EQ(c.get(State::open, State::open), 0u);
}

TEST(ComponentCounters, GroupsAppearOnFirstUse) {
  bulwark::ComponentCounters c;
  bulwark::ComponentReading empty;
  c.read_into(empty);
  EXPECT_FALSE(empty.has_fallback || empty.has_retry || empty.has_bulkhead);

  c.record_fallback(bulwark::FallbackKind::failed);
  c.record_retry_call(bulwark::RetryCallKind::successful_with_retry);
  c.record_retry();
  c.record_retry();
  c.record_retry_budget_exhausted();
  c.bulkhead_acquired();
  c.bulkhead_acquired();
  c.bulkhead_released();
  c.bulkhead_rejected();
  bulwark::ComponentReading r;
  c.read_into(r);
  EXPECT_TRUE(r.has_fallback && r.has_retry && r.has_bulkhead);
  EXPECT_FALSE(r.has_budget);
  EXPECT_EQ(r.fallbacks[1], 1u);
  EXPECT_EQ(r.retry_calls[1], 1u);
  EXPECT_EQ(r.retries, 2u);
  EXPECT_EQ(r.retry_budget_exhausted, 1u);
  EXPECT_EQ(r.bulkhead_in_use, 1u);
  EXPECT_EQ(r.bulkhead_rejected, 1u);

  bulwark::ComponentCounters released_first;
  released_first.bulkhead_acquired();
  released_first.bulkhead_released();
  released_first.bulkhead_released();  // a release seen before its acquire
  bulwark::ComponentReading never_negative;
  released_first.read_into(never_negative);
  EXPECT_EQ(never_negative.bulkhead_in_use, 0u);
}

// Stand-ins shaped like bulkhead.h, retry_budget.h and retry.h's snapshots.
struct FakeBulkhead {
  struct Snap {
    std::uint32_t in_use, max_concurrent, waiting;
    std::uint64_t rejected;
  };
  Snap snapshot() const { return {3, 10, 0, 7}; }
};
struct FakeBudget {
  struct Snap {
    double tokens;
    std::uint64_t withdrawn, rejected, refunded;
  };
  Snap snapshot() const { return {2.5, 9, 4, 1}; }
};
struct FakeRetry {
  struct Snap {
    std::uint64_t retries, exhausted, deadline_stops, budget_stops, cancelled;
  };
  Snap snapshot() const { return {11, 2, 0, 4, 0}; }
};
static_assert(bulwark::BulkheadLike<FakeBulkhead>);
static_assert(bulwark::RetryBudgetLike<FakeBudget>);
static_assert(bulwark::RetryLike<FakeRetry>);
static_assert(!bulwark::BulkheadLike<FakeRetry>);

TEST(ComponentReading, ReadsComponentsThatCountThemselves) {
  bulwark::ComponentReading r;
  r.add_bulkhead(FakeBulkhead{});
  r.add_budget(FakeBudget{});
  r.add_retry(FakeRetry{});
  EXPECT_TRUE(r.has_bulkhead && r.has_budget && r.has_retry);
  EXPECT_EQ(r.bulkhead_in_use, 3u);
  EXPECT_EQ(r.bulkhead_max, 10u);
  EXPECT_EQ(r.bulkhead_rejected, 7u);
  EXPECT_EQ(r.budget_tokens, 2.5);
  EXPECT_EQ(r.retry_budget_exhausted, 4u);
  EXPECT_EQ(r.retries, 11u);
  bulwark::ComponentReading total;
  total.merge(r);
  total.merge(r);
  EXPECT_EQ(total.bulkhead_in_use, 6u);
  EXPECT_EQ(total.retries, 22u);
  EXPECT_TRUE(total.has_budget);
}

// What an evicted key leaves in its registry's totals: its counters, not its gauges.
TEST(ComponentReading, MergeCountersKeepsCountersAndDropsGauges) {
  bulwark::ComponentReading r;
  r.add_bulkhead(FakeBulkhead{});
  r.add_budget(FakeBudget{});
  r.add_retry(FakeRetry{});
  r.has_fallback = true;
  r.fallbacks = {5, 6};
  r.retry_calls = {1, 2, 3, 4};
  bulwark::ComponentReading gone;
  gone.merge_counters(r);
  gone.merge_counters(r);
  EXPECT_TRUE(gone.has_bulkhead && gone.has_budget && gone.has_retry && gone.has_fallback);
  EXPECT_EQ(gone.bulkhead_rejected, 14u);
  EXPECT_EQ(gone.retry_budget_exhausted, 8u);
  EXPECT_EQ(gone.retries, 22u);
  EXPECT_EQ(gone.fallbacks[0], 10u);
  EXPECT_EQ(gone.fallbacks[1], 12u);
  EXPECT_EQ(gone.retry_calls[3], 8u);
  EXPECT_EQ(gone.bulkhead_in_use, 0u);
  EXPECT_EQ(gone.bulkhead_max, 0u);
  EXPECT_EQ(gone.budget_tokens, 0.0);
}

TEST(ReadBreaker, ReadsTheRealBreaker) {
  bulwark::ManualClock clock;
  bulwark::BasicCircuitBreaker<bulwark::ManualClock> b({.name = "x", .consecutive_failures = 2},
                                                       clock);
  b.try_acquire()->record(bulwark::Outcome::success);
  b.try_acquire()->record(bulwark::Outcome::ignored);
  { auto cancelled = b.try_acquire(); }
  b.try_acquire()->record(bulwark::Outcome::failure);
  b.try_acquire()->record(bulwark::Outcome::failure);
  EXPECT_FALSE(b.try_acquire());
  clock.advance(7s);
  const bulwark::BreakerReading r = bulwark::read_breaker(b);
  EXPECT_EQ(r.state, State::open);
  EXPECT_EQ(r.time_in_state, 7s);
  EXPECT_EQ(r.successes, 1u);
  EXPECT_EQ(r.failures, 2u);
  EXPECT_EQ(r.ignored, 1u);
  EXPECT_EQ(r.cancelled, 1u);
  EXPECT_EQ(r.rejected, 1u);
  EXPECT_EQ(r.opens, 1u);
}

// A breaker with the snapshot fields the breaker owner is adding (slow calls, rates
// that may be "not enough calls", flapping): the adapter must pick them up unchanged.
struct FutureBreaker {
  struct Snap {
    State state = State::closed;
    Nanos time_in_state{};
    std::uint64_t successes = 10, failures = 4, ignored = 0, cancelled = 0, rejected = 0, opens = 0;
    std::uint64_t slow_successes = 3, slow_failures = 1;
    std::optional<double> failure_rate;  // nullopt: not enough calls
    double slow_call_rate = -1;          // Resilience4j's "not enough calls"
    bool flapping = true;
  };
  Snap snap;
  Snap snapshot() const { return snap; }
};

TEST(ReadBreaker, PicksUpSnapshotFieldsWhenTheBreakerHasThem) {
  FutureBreaker fb;
  auto r = bulwark::read_breaker(fb);
  EXPECT_TRUE(r.has_slow);
  EXPECT_EQ(r.slow_successes, 3u);
  EXPECT_EQ(r.slow_failures, 1u);
  EXPECT_TRUE(r.has_rates);
  EXPECT_TRUE(std::isnan(r.failure_rate));
  EXPECT_TRUE(std::isnan(r.slow_call_rate));
  EXPECT_TRUE(r.has_flapping);
  EXPECT_TRUE(r.flapping);
  fb.snap.failure_rate = 0.25;
  fb.snap.slow_call_rate = 0.5;
  r = bulwark::read_breaker(fb);
  EXPECT_EQ(r.failure_rate, 0.25);
  EXPECT_EQ(r.slow_call_rate, 0.5);

  // The breaker without a window: rates and window counts mean nothing, so none.
  bulwark::ManualClock clock;
  bulwark::BasicCircuitBreaker<bulwark::ManualClock> plain({}, clock);
  const auto t = bulwark::read_breaker(plain);
  EXPECT_FALSE(t.has_rates || t.has_window);
  EXPECT_TRUE(t.has_flapping);
}

TEST(ReadBreaker, WindowedBreakerRatesAndWindowCounts) {
  bulwark::ManualClock clock;
  bulwark::BasicCircuitBreaker<bulwark::ManualClock, bulwark::CountWindow> b(
      {.name = "windowed",
       .window = {.size = 4},
       .minimum_calls = 4,
       .failure_rate = 0.9,
       .slow_call_duration = 100ms,
       .consecutive_failures = 0},
      clock);
  b.try_acquire()->record(bulwark::Outcome::success, 10ms);
  b.try_acquire()->record(bulwark::Outcome::failure, 200ms);  // slow failure
  auto r = bulwark::read_breaker(b);
  EXPECT_TRUE(r.has_rates && r.has_window);
  EXPECT_TRUE(std::isnan(r.failure_rate));  // 2 calls < minimum_calls: not enough calls
  EXPECT_EQ(r.window_calls, 2u);
  EXPECT_EQ(r.window_failures, 1u);
  EXPECT_EQ(r.window_slow_failures, 1u);
  b.try_acquire()->record(bulwark::Outcome::success, 300ms);  // slow success
  b.try_acquire()->record(bulwark::Outcome::success, 10ms);
  r = bulwark::read_breaker(b);
  EXPECT_EQ(r.failure_rate, 0.25);
  EXPECT_EQ(r.slow_call_rate, 0.5);
  EXPECT_EQ(r.window_slow_successes, 1u);
  EXPECT_EQ(r.state, State::closed);
}

TEST(Outage, OpenHalfOpenAndReopeningAreOneOutage) {
  using bulwark::detail::kNoOutage;
  using bulwark::detail::note_outage;
  std::atomic<bulwark::Ticks> since{kNoOutage};
  note_outage(since, State::closed, State::open, 100);
  EXPECT_EQ(since.load(), 100);
  note_outage(since, State::open, State::half_open, 200);
  note_outage(since, State::half_open, State::open, 201);
  note_outage(since, State::open, State::forced_open, 300);
  EXPECT_EQ(since.load(), 100);
  note_outage(since, State::forced_open, State::closed, 400);
  EXPECT_EQ(since.load(), kNoOutage);
  note_outage(since, State::closed, State::disabled, 500);
  EXPECT_EQ(since.load(), kNoOutage);
  note_outage(since, State::disabled, State::forced_open, 600);
  EXPECT_EQ(since.load(), 600);

  bulwark::BreakerReading r;
  r.state = State::open;
  r.time_in_state = 5s;
  EXPECT_EQ(bulwark::detail::outage_seconds(r, 0, 90'000'000'000), 90.0);
  EXPECT_EQ(bulwark::detail::outage_seconds(r, kNoOutage, 90'000'000'000),
            5.0);  // not recorded yet
  r.state = State::closed;
  EXPECT_EQ(bulwark::detail::outage_seconds(r, 0, 90'000'000'000), 0.0);
}

TEST(BreakerMetrics, TracksOneBreakerOfASharedPolicy) {
  bulwark::ManualClock clock;
  bulwark::BreakerPolicy<bulwark::ManualClock> policy({.name = "shared", .consecutive_failures = 1},
                                                      clock);
  bulwark::BasicCircuitBreaker<bulwark::ManualClock> mine(policy), theirs(policy);
  bulwark::BreakerMetrics m;
  const auto id = m.track(policy, &mine);
  clock.advance(10s);
  mine.try_acquire()->record(bulwark::Outcome::failure);
  theirs.try_acquire()->record(bulwark::Outcome::failure);
  EXPECT_EQ(m.transitions.get(State::closed, State::open), 1u);
  EXPECT_EQ(m.outage_since(), 10'000'000'000);
  EXPECT_TRUE(policy.remove_listener(id));
  m.record_call(Nanos::zero());  // not timed: not observed
  m.record_call(2ms);
  EXPECT_EQ(m.read().latency.count(), 1u);
  m.reset();
  EXPECT_EQ(m.read().transitions[bulwark::transition_index(State::closed, State::open)], 0u);
  EXPECT_EQ(m.outage_since(), bulwark::detail::kNoOutage);
}

}  // namespace
