// What attaching a breaker to a Fleet costs the request thread, checked: the closed
// path allocates nothing and takes no lock; a transition takes one lock (the queue's)
// and allocates nothing; and the Fleet creates no thread, whatever its store does.

#include <gtest/gtest.h>

#include <filesystem>

#include "bulwark/redis/fleet.h"
#include "bulwark/redis/redis_store.h"
#include "support/counting.h"

namespace bulwark::redis {
namespace {

// The only place this test builds a breaker configuration.
CircuitBreaker::Config config() {
  return CircuitBreaker::Config{.name = "hot", .consecutive_failures = 1};
}

std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(FleetHotPathTest, TheClosedPathOfAnAttachedBreakerAllocatesNothingAndTakesNoLock) {
  MemoryFleetStore store;
  CircuitBreaker breaker(config());
  Fleet fleet(FleetConfig{.instance = "a"}, store);
  fleet.attach(breaker);
  const auto c = bulwark::testing::count([&] {
    for (int i = 0; i < 1000; ++i) breaker.try_acquire()->record_success();
  });
  EXPECT_EQ(c.allocations, 0u);
  if (bulwark::testing::kCountsLocks) {
    EXPECT_EQ(c.locks, 0u);
  }
}

TEST(FleetHotPathTest, TheClosedPathOfABreakerWithAFleetWindowAllocatesNothingAndTakesNoLock) {
  MemoryFleetStore store;
  CountWindowBreaker breaker(CountWindowBreaker::Config{
      .name = "hot-window", .window = {.size = 100}, .minimum_calls = 20, .failure_rate = 0.5});
  Fleet fleet(FleetConfig{.instance = "a"}, store);
  fleet.attach(breaker, {.fleet_window = true});
  ASSERT_TRUE(fleet.sync());
  const auto c = bulwark::testing::count([&] {
    for (int i = 0; i < 1000; ++i) breaker.try_acquire()->record_success();
  });
  EXPECT_EQ(c.allocations, 0u);
  if (bulwark::testing::kCountsLocks) {
    EXPECT_EQ(c.locks, 0u);
  }
  auto s = fleet.sync();  // the level is read here, by the timer's thread
  ASSERT_TRUE(s);
  EXPECT_EQ(s->published, 1u);
  EXPECT_EQ(fleet.reading().keys.at(0).window_calls, 100u);
}

TEST(FleetHotPathTest, ATransitionIsQueuedWithOneLockAndNoAllocation) {
  MemoryFleetStore store;
  CircuitBreaker breaker(config());
  Fleet fleet(FleetConfig{.instance = "a"}, store);
  fleet.attach(breaker);
  const auto c = bulwark::testing::count([&] { breaker.try_acquire()->record_failure(); });
  ASSERT_EQ(breaker.state(), State::open);
  EXPECT_EQ(c.allocations, 0u);
  if (bulwark::testing::kCountsLocks) {
    EXPECT_EQ(c.locks, 1u);
  }
  auto s = fleet.sync();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->published, 1u);
}

TEST(FleetHotPathTest, SyncingCreatesNoThread) {
  const std::size_t before = thread_count();
  MemoryFleetStore memory;
  // Nothing listens on port 1: every attempt is refused at once.
  RedisFleetStore redis(RedisConfig{.port = 1,
                                    .reconnect_min = std::chrono::milliseconds(1),
                                    .reconnect_max = std::chrono::milliseconds(1)});
  CircuitBreaker b1(config()), b2(config());
  Fleet f1(FleetConfig{.instance = "a"}, memory);
  Fleet f2(FleetConfig{.instance = "b"}, redis);
  f1.attach(b1);
  f2.attach(b2);
  for (int i = 0; i < 20; ++i) {
    b1.reset(), b2.reset();
    b1.try_acquire()->record_failure();
    b2.try_acquire()->record_failure();
    EXPECT_TRUE(f1.sync());
    EXPECT_FALSE(f2.sync());
  }
  EXPECT_EQ(thread_count(), before);
}

}  // namespace
}  // namespace bulwark::redis
