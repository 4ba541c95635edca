// Threads recording into one throttle lose no count: every record() lands in its
// bucket's word by CAS, also while other threads rotate buckets. Run it under TSan.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "bulwark/throttle.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

TEST(ThrottleStress, ConcurrentRecordsAreAllCounted) {
  ManualClock clock;
  ThrottleConfig c;
  c.name = "stress";
  c.seed = 1;
  BasicThrottle<ManualClock> t(c, clock);
  constexpr int kThreads = 4;
  constexpr int kCalls = 20000;
  std::atomic<std::uint64_t> rejected{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      std::uint64_t mine = 0;
      for (int k = 0; k < kCalls; ++k) {
        if (t.try_acquire()) {
          t.record((k + i) % 3 != 0);
        } else {
          ++mine;
        }
        // One thread moves time through a few buckets of the window meanwhile.
        if (i == 0 && k % 2000 == 0) clock.advance(1s);
      }
      rejected.fetch_add(mine);
    });
  }
  for (auto& th : threads) th.join();
  // 20 s of a 2 min window: every bucket is still in it.
  const auto s = t.snapshot();
  EXPECT_EQ(s.requests, static_cast<std::uint64_t>(kThreads) * kCalls);
  EXPECT_EQ(s.throttled, rejected.load());
  EXPECT_LE(s.accepts, s.requests - s.throttled);
}

}  // namespace
}  // namespace bulwark
