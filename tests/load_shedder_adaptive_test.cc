// The load shedder with an adaptive limit (AdaptiveLimitSource), in virtual time: the
// permits it gives back move the limit — flat service times raise it toward max_limit,
// slower ones lower it and the shedder refuses more; a permit released past its
// request's deadline is a drop; a queue timeout is a drop only when asked.

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <thread>
#include <vector>

#include "bulwark/adaptive_limit.h"
#include "bulwark/load_shedder.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using Limit = BasicAdaptiveLimit<ManualClock>;
using Source = BasicAdaptiveLimitSource<ManualClock>;
using Shedder = BasicLoadShedder<Source, ManualClock>;

static_assert(LimitSource<AdaptiveLimitSource>);
static_assert(LimitSource<Source>);

LoadShedderConfig shedder_config() {
  LoadShedderConfig c;
  c.name = "api";
  return c;
}

AdaptiveLimitConfig gradient_config() {
  AdaptiveLimitConfig c;
  c.name = "api";
  c.algorithm = AdaptiveAlgorithm::gradient2;
  c.min_limit = 4;
  c.initial_limit = 10;
  c.max_limit = 40;
  c.window_samples = 5;
  return c;
}

// One round of a saturated service: admits all it can, holds them `service`, releases
// them all. Returns how many were admitted.
std::size_t admitted_in_round(Shedder& s, ManualClock& clock, Nanos service) {
  std::size_t n = 0;
  std::vector<Shedder::Permit> held;
  for (;;) {
    auto p = s.try_acquire(Priority::critical);
    if (!p) break;
    held.push_back(std::move(*p));
    ++n;
  }
  clock.advance(service);
  held.clear();
  return n;
}

TEST(LoadShedderAdaptive, FlatServiceTimesRaiseTheLimitSlowerOnesLowerIt) {
  ManualClock clock;
  Limit limit(gradient_config(), clock);
  Shedder s(shedder_config(), Source(limit), clock);
  ASSERT_EQ(s.snapshot().limit, 10u);
  EXPECT_EQ(admitted_in_round(s, clock, 10ms), 10u);

  // Saturated at a flat 10 ms: every window finds the limit in use and the round trip
  // at its long-term average, so the limit grows to max_limit.
  for (int i = 0; i < 200; ++i) (void)admitted_in_round(s, clock, 10ms);
  EXPECT_EQ(s.snapshot().limit, 40u);
  EXPECT_EQ(s.class_limit(Priority::critical), 40u);
  EXPECT_EQ(admitted_in_round(s, clock, 10ms), 40u);
  const std::uint64_t refused_fast =
      s.snapshot().refused[static_cast<std::size_t>(ShedReason::overloaded)];

  // The service slows to 50 ms: the short-term round trip is far above the long-term
  // one, the gradient shrinks the limit, and the same demand is refused more.
  for (int i = 0; i < 10; ++i) (void)admitted_in_round(s, clock, 50ms);
  const std::size_t slow_limit = s.snapshot().limit;
  EXPECT_LT(slow_limit, 20u);
  EXPECT_GE(slow_limit, 4u);
  EXPECT_EQ(admitted_in_round(s, clock, 50ms), slow_limit);
  EXPECT_GT(s.snapshot().refused[static_cast<std::size_t>(ShedReason::overloaded)], refused_fast);
  // The limiter's own slots are not used: the shedder counts its own.
  EXPECT_EQ(limit.in_flight(), 0u);
  EXPECT_EQ(limit.snapshot().dropped, 0u);
}

AdaptiveLimitConfig aimd_config() {
  AdaptiveLimitConfig c;
  c.name = "api";
  c.algorithm = AdaptiveAlgorithm::aimd;
  c.min_limit = 1;
  c.initial_limit = 10;
  c.max_limit = 20;
  c.window_samples = 1;
  return c;
}

TEST(LoadShedderAdaptive, ReleasedPastItsDeadlineIsADrop) {
  ManualClock clock;
  Limit limit(aimd_config(), clock);
  Shedder s(shedder_config(), Source(limit), clock);
  {
    // In time: a sample, no drop (one of ten in flight: AIMD does not grow either).
    auto p = s.try_acquire(BasicContext<ManualClock>(clock, {}, Deadline::after(clock, 20ms)),
                           Priority::normal);
    ASSERT_TRUE(p);
    clock.advance(10ms);
  }
  EXPECT_EQ(limit.snapshot().windows, 1u);
  EXPECT_EQ(limit.limit(), 10u);
  {
    auto p = s.try_acquire(BasicContext<ManualClock>(clock, {}, Deadline::after(clock, 5ms)),
                           Priority::normal);
    ASSERT_TRUE(p);
    clock.advance(10ms);  // served past its deadline
  }
  EXPECT_EQ(limit.snapshot().dropped, 1u);
  EXPECT_EQ(limit.limit(), 9u);  // AIMD: × 0.9
  EXPECT_EQ(s.snapshot().limit, 9u);
}

template <class F>
bool eventually(F pred) {
  for (int i = 0; i < 2'000'000; ++i) {
    if (pred()) return true;
    std::this_thread::yield();
  }
  return pred();
}

// Fills the limit, queues one waiter, expires it by the controlled delay; returns the
// limit once the waiter is refused.
std::uint32_t limit_after_queue_timeout(bool queue_timeout_is_drop) {
  ManualClock clock;
  Limit limit(aimd_config(), clock);
  Shedder s(shedder_config(), Source(limit, queue_timeout_is_drop), clock);
  std::vector<Shedder::Permit> held;
  for (int i = 0; i < 10; ++i) held.push_back(std::move(*s.try_acquire(Priority::critical)));
  std::optional<Shedder::Result> waited;
  std::thread waiter([&] { waited.emplace(s.acquire(Priority::critical)); });
  EXPECT_TRUE(eventually([&] { return s.queued() == 1; }));
  clock.advance(s.config().interval);
  s.poll();
  waiter.join();
  EXPECT_FALSE(*waited);
  if (!*waited) {
    EXPECT_EQ(waited->error().reason, ShedReason::queue_timeout);
  }
  EXPECT_EQ(limit.snapshot().dropped, queue_timeout_is_drop ? 1u : 0u);
  return limit.limit();
}

TEST(LoadShedderAdaptive, QueueTimeoutIsADropOnlyWhenAsked) {
  // Off (the default): a queue that timed out says the limit was reached, not that the
  // service is slow; the limit stays where the served requests put it.
  EXPECT_EQ(limit_after_queue_timeout(false), 10u);
  EXPECT_EQ(limit_after_queue_timeout(true), 9u);
}

}  // namespace
}  // namespace bulwark
