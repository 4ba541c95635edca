// The load shedder under contention (run it under TSan): threads admit, queue, time out
// and release at once. However they interleave, the requests being served never
// exceed the limit, no class exceeds its share, and at rest every attempt is counted
// exactly once (admitted or refused by one reason) with nothing in flight or queued.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "bulwark/load_shedder.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

TEST(LoadShedderStress, InFlightNeverExceedsTheLimitAndCountsAreExactAtRest) {
  constexpr std::size_t kLimit = 4;
  constexpr int kThreads = 8;
  constexpr int kIterations = 3000;
  LoadShedderConfig config;
  config.name = "stress";
  config.target_delay = 200us;
  config.interval = 2ms;
  config.max_queue = 6;
  LoadShedder shedder(config, FixedLimit(kLimit));

  std::atomic<std::size_t> serving{0};
  std::array<std::atomic<std::size_t>, kPriorityCount> serving_by{};
  std::atomic<std::size_t> max_serving{0};
  std::array<std::atomic<std::size_t>, kPriorityCount> max_by{};
  std::atomic<std::uint64_t> admitted{0};
  std::atomic<std::uint64_t> refused{0};

  auto raise = [](std::atomic<std::size_t>& max, std::size_t v) {
    std::size_t cur = max.load();
    while (v > cur && !max.compare_exchange_weak(cur, v)) {
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        const auto p = static_cast<Priority>((t + i) % kPriorityCount);
        Context ctx =
            i % 5 == 0 ? Context(SteadyClock{}).with_timeout(1ms) : Context(SteadyClock{});
        auto r = i % 2 == 0 ? shedder.acquire(ctx, p) : shedder.try_acquire(ctx, p);
        if (!r) {
          refused.fetch_add(1);
          continue;
        }
        admitted.fetch_add(1);
        const auto cls = static_cast<std::size_t>(p);
        raise(max_serving, serving.fetch_add(1) + 1);
        raise(max_by[cls], serving_by[cls].fetch_add(1) + 1);
        if (i % 7 == 0) std::this_thread::yield();
        serving_by[cls].fetch_sub(1);
        serving.fetch_sub(1);
        if (i % 3 == 0) {
          r->drop();
        } else {
          r->release();
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  EXPECT_LE(max_serving.load(), kLimit);
  for (std::size_t c = 0; c < kPriorityCount; ++c)
    EXPECT_LE(max_by[c].load(), shedder.class_limit(static_cast<Priority>(c))) << c;

  const auto snap = shedder.snapshot();
  EXPECT_EQ(snap.in_flight, 0u);
  EXPECT_EQ(snap.queued, 0u);
  std::uint64_t snap_admitted = 0;
  for (auto a : snap.admitted) snap_admitted += a;
  std::uint64_t snap_refused = 0;
  for (auto r : snap.refused) snap_refused += r;
  EXPECT_EQ(snap_admitted, admitted.load());
  EXPECT_EQ(snap_refused, refused.load());
  EXPECT_EQ(snap_admitted + snap_refused, std::uint64_t{kThreads} * kIterations);
  EXPECT_GT(snap_admitted, 0u);
}

}  // namespace
}  // namespace bulwark
