#include "bulwark/sleeper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stop_token>
#include <thread>

namespace bulwark {
namespace {

using namespace std::chrono_literals;

TEST(ManualSleeper, AdvancesVirtualTime) {
  ManualClock clock;
  ManualSleeper sleeper(clock);
  EXPECT_TRUE(sleeper.sleep_for(250ms, {}));
  EXPECT_EQ(clock.now().time_since_epoch(), 250ms);
  EXPECT_TRUE(sleeper.sleep_for(-1s, {}));  // a negative wait is no wait
  EXPECT_EQ(clock.now().time_since_epoch(), 250ms);
}

TEST(ManualSleeper, StopRequestedBeforehandWins) {
  ManualClock clock;
  ManualSleeper sleeper(clock);
  std::stop_source source;
  source.request_stop();
  EXPECT_FALSE(sleeper.sleep_for(1s, source.get_token()));
  EXPECT_EQ(clock.now().time_since_epoch(), 0s);
}

TEST(ThreadSleeper, ShortSleepCompletes) {
  ThreadSleeper sleeper;
  EXPECT_TRUE(sleeper.sleep_for(1ms, {}));
  EXPECT_TRUE(sleeper.sleep_for(0ms, {}));
}

// A sleep of an hour (or of Nanos::max()) that returns at all proves the stop woke
// it: there is no other way out within the test's timeout.
TEST(ThreadSleeper, CancellationWakesAtOnce) {
  for (const Nanos d : {Nanos(std::chrono::hours(1)), Nanos::max()}) {
    ThreadSleeper sleeper;
    std::stop_source source;
    std::atomic<bool> started{false};
    std::jthread canceller([&] {
      while (!started.load()) std::this_thread::yield();
      std::this_thread::sleep_for(5ms);  // let the sleeper block (not required for correctness)
      source.request_stop();
    });
    started = true;
    EXPECT_FALSE(sleeper.sleep_for(d, source.get_token()));
  }
}

TEST(ThreadSleeper, AlreadyCancelledReturnsFalse) {
  std::stop_source source;
  source.request_stop();
  EXPECT_FALSE(ThreadSleeper{}.sleep_for(1h, source.get_token()));
}

}  // namespace
}  // namespace bulwark
