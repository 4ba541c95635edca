// Proof that the call path through the registry, the metrics and the event hub is
// allocation-free and lock-free: the tests count the allocations and the locks (mutex
// and spin, lock and try-lock) made around the call path (support/counting.h) and
// assert zero of each. One exception, stated by registry.h and asserted exactly here:
// with idle_ttl, a lookup that finds its shard's eviction step due try-locks that
// shard's mutex (it never waits) to take the step.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>

#include "bulwark/metrics.h"
#include "bulwark/observe.h"
#include "bulwark/registry.h"
#include "support/counting.h"

namespace {

using namespace std::chrono_literals;
using bulwark::ManualClock;
using bulwark::Outcome;

using Breaker = bulwark::BasicCircuitBreaker<ManualClock>;
using Reg = bulwark::BasicRegistry<std::string, Breaker>;

// Built by appending: "a" + std::to_string(i) trips GCC 12's -Wrestrict false positive.
std::string host(int i) {
  std::string s = "host-";
  s.append(std::to_string(i)).append(":443");
  return s;
}

using Count = bulwark::testing::Counts;
using bulwark::testing::count;

// Entries that can go away (removable): lookups pin them with a CAS, as with idle_ttl,
// but no eviction step is ever due. With idle_ttl, see LookupsWithIdleTtl... below.
Reg::Options options(bulwark::Nanos idle_ttl = bulwark::Nanos::zero()) {
  Reg::Options o;
  o.name = "hot";
  o.breaker = {.name = "upstream", .consecutive_failures = 3, .open_duration = 30s};
  o.removable = true;
  o.idle_ttl = idle_ttl;
  o.detailed_metrics = true;
  return o;
}

TEST(HotPath, TheCountersCountSomething) {
  // A test that cannot fail is a defect: make sure both counters see what they must.
  EXPECT_TRUE(bulwark::testing::counting_works());
}

TEST(HotPath, LookupAcquireRecordAllocatesNothingAndLocksNothing) {
  ManualClock clock;
  Reg reg(options(), clock);
  for (int i = 0; i < 1000; ++i) (void)reg.get(host(i));
  const std::string key = "host-123:443";
  const Count c = count([&] {
    for (int i = 0; i < 1000; ++i) {
      clock.advance(1ms);  // time moves: idle stamps and eviction checks run
      auto call = reg.try_acquire(std::string_view(key));
      ASSERT_TRUE(call);
      call->record(Outcome::success, 2ms);
    }
  });
  EXPECT_EQ(c.allocations, 0u);
#if BULWARK_COUNT_LOCKS
  EXPECT_EQ(c.locks, 0u);
#endif
  EXPECT_EQ(reg.get(key).metrics()->read().latency.count(), 1000u);
}

// With idle_ttl, one lookup in 64 (per thread) reads the clock, and if its shard's
// eviction step is due (every idle_ttl / 8), try-locks the shard to take it. Counted:
// exactly one try-lock per due step, never a blocking lock, never an allocation.
TEST(HotPath, LookupsWithIdleTtlNeverWaitAndTryLockOncePerDueEvictionStep) {
  ManualClock clock;
  Reg reg(options(10min), clock);  // a step is due every 75 s per shard
  for (int i = 0; i < 1000; ++i) (void)reg.get(host(i));
  const std::string key = "host-123:443";
  const auto lookups = [&](int n) {
    return count([&] {
      for (int i = 0; i < n; ++i) {
        clock.advance(1ms);
        auto call = reg.try_acquire(std::string_view(key));
        ASSERT_TRUE(call);
        call->record(Outcome::success, 2ms);
      }
    });
  };
  // 1000 lookups over 1 s: ~15 checks; the shard's first step is due at once (none has
  // run), the next only 75 s later.
  const Count first = lookups(1000);
  EXPECT_EQ(first.allocations, 0u);
  // 75 s later, one more step is due: 64 lookups make one check.
  clock.advance(75s);
  const Count later = lookups(64);
  EXPECT_EQ(later.allocations, 0u);
#if BULWARK_COUNT_LOCKS
  EXPECT_EQ(first.locks, first.try_locks) << "a lookup waited on a lock";
  EXPECT_EQ(first.try_locks, 1u);
  EXPECT_EQ(later.locks, later.try_locks) << "a lookup waited on a lock";
  EXPECT_EQ(later.try_locks, 1u);
#endif
  EXPECT_EQ(reg.size(), 1000u);  // nothing was idle for 10 minutes
}

TEST(HotPath, HandlesCopiesFindAndMissesAllocateNothing) {
  ManualClock clock;
  Reg reg(options(), clock);
  (void)reg.get("a");
  const Count c = count([&] {
    auto h = reg.get(std::string_view("a"));
    auto copy = h;
    auto call = copy.try_acquire();
    call->record(Outcome::failure, 1ms);
    auto missing = reg.find(std::string_view("not-there"));
    EXPECT_FALSE(missing);
    h.metrics()->components.record_retry();
    h.metrics()->components.record_fallback(bulwark::FallbackKind::failed);
    h.metrics()->components.bulkhead_acquired();
    h.metrics()->components.bulkhead_released();
  });
  EXPECT_EQ(c.allocations, 0u);
#if BULWARK_COUNT_LOCKS
  EXPECT_EQ(c.locks, 0u);
#endif
}

TEST(HotPath, RejectionsAllocateNothingEvenWithARejectionListener) {
  ManualClock clock;
  Reg reg(options(), clock);
  for (int i = 0; i < 3; ++i) reg.try_acquire("down")->record(Outcome::failure);
  std::size_t heard = 0;
  auto sub = reg.events().subscribe(bulwark::EventKind::rejection,
                                    [&](const bulwark::Event&) { ++heard; });
  const Count c = count([&] {
    for (int i = 0; i < 100; ++i) EXPECT_FALSE(reg.try_acquire(std::string_view("down")));
  });
  EXPECT_EQ(c.allocations, 0u);
#if BULWARK_COUNT_LOCKS
  EXPECT_EQ(c.locks, 0u);
#endif
  EXPECT_EQ(heard, 100u);
}

TEST(HotPath, IntegerKeysToo) {
  ManualClock clock;
  bulwark::BasicRegistry<std::uint64_t, Breaker> reg(
      {.name = "partitions", .detailed_metrics = true}, clock);
  for (std::uint64_t p = 0; p < 64; ++p) (void)reg.get(p);
  const Count c = count([&] {
    for (std::uint64_t p = 0; p < 64; ++p) reg.try_acquire(p)->record(Outcome::success, 1ms);
  });
  EXPECT_EQ(c.allocations, 0u);
#if BULWARK_COUNT_LOCKS
  EXPECT_EQ(c.locks, 0u);
#endif
}

TEST(HotPath, StandaloneMetricsAllocateNothing) {
  bulwark::BreakerMetrics m;
  bulwark::EventHub hub;  // no listener: emitting is skipped after one load
  const Count c = count([&] {
    for (int i = 0; i < 100; ++i) {
      m.record_call(std::chrono::microseconds(i * 37));
      m.on_transition(bulwark::State::closed, bulwark::State::open, i);
      if (hub.wants(bulwark::EventKind::rejection)) ADD_FAILURE();
    }
  });
  EXPECT_EQ(c.allocations, 0u);
#if BULWARK_COUNT_LOCKS
  EXPECT_EQ(c.locks, 0u);
#endif
}

TEST(HotPath, CreatingAKeyDoesAllocateAndLock) {
  // The other side of the contract: creation is the slow path, and the counters see it.
  ManualClock clock;
  Reg reg(options(), clock);
  const Count c =
      count([&] { (void)reg.get(std::string_view("a-key-long-enough-to-live-on-the-heap")); });
  EXPECT_GT(c.allocations, 0u);
#if BULWARK_COUNT_LOCKS
  EXPECT_GT(c.locks, 0u);
#endif
}

}  // namespace
