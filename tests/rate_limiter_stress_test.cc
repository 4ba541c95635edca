// Threads racing for permits never get more than the rate allows: over the run, at most
// burst + elapsed / T permits (the GCRA bound: every admission moves the theoretical
// arrival time T further, and none is admitted with it past now + burst·T). A thread
// moves the virtual clock meanwhile, so admissions happen at many different times.
// Run it under TSan.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "bulwark/rate_limiter.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

void race(RateLimiterConfig c) {
  ManualClock clock(ManualClock::time_point(1h));
  BasicRateLimiter<ManualClock> limiter(c, clock);
  const Ticks start = now_ticks(clock);
  constexpr int kThreads = 4;
  constexpr int kCalls = 20000;
  std::atomic<std::uint64_t> admitted{0};
  std::atomic<bool> done{false};
  std::thread ticker([&] {
    std::mt19937_64 rng(7);
    while (!done.load(std::memory_order_acquire)) {
      clock.advance(
          Nanos(std::uniform_int_distribution<Ticks>(0, limiter.interval().count())(rng)));
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(i) + 1);
      std::uint64_t mine = 0;
      for (int k = 0; k < kCalls; ++k) {
        const std::uint64_t n = std::uniform_int_distribution<std::uint64_t>(1, 3)(rng);
        if (n <= limiter.burst() && limiter.try_acquire(n)) mine += n;
      }
      admitted.fetch_add(mine);
    });
  }
  for (auto& t : threads) t.join();
  done.store(true, std::memory_order_release);
  ticker.join();
  const Ticks elapsed = now_ticks(clock) - start;
  const std::uint64_t bound =
      limiter.burst() + static_cast<std::uint64_t>(elapsed / limiter.interval().count());
  EXPECT_LE(admitted.load(), bound) << "elapsed " << elapsed << "ns";
  // The bucket starts full and nothing else takes from it: the first burst is admitted.
  EXPECT_GE(admitted.load() + 2, limiter.burst());
}

TEST(RateLimiterStress, SmoothNeverExceedsTheRate) {
  RateLimiterConfig c;
  c.name = "smooth";
  c.permits = 1000;
  c.period = 1s;
  c.tolerance = 5ms;
  race(c);
}

TEST(RateLimiterStress, BurstyNeverExceedsTheRatePlusCapacity) {
  RateLimiterConfig c;
  c.name = "bursty";
  c.mode = RateLimitMode::bursty;
  c.permits = 7;
  c.period = 1ms;
  c.capacity = 40;
  race(c);
}

}  // namespace
}  // namespace bulwark
