// The adaptive limit under threads (run it under TSan): admissions, completions, drops
// and cancellations race the window folds while the ManualClock moves.
//
// The bound checked is the one adaptive_limit.h documents: the calls admitted at once
// never exceed the largest limit any admission read (<= max_limit), and the in-flight
// counter never exceeds that plus the number of threads (an admission that went past
// the limit and has not undone its add yet). At rest in_flight() is exact (0), and
// every attempt is either admitted or counted as rejected.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "bulwark/adaptive_limit.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

void hammer(AdaptiveAlgorithm algorithm) {
  constexpr int kThreads = 4;
  constexpr int kOps = 20000;
  ManualClock clock;
  AdaptiveLimitConfig c;
  c.name = "stress";
  c.algorithm = algorithm;
  c.min_limit = 1;
  c.max_limit = 8;
  c.initial_limit = 4;
  c.window_samples = 3;
  BasicAdaptiveLimit<ManualClock> limit(c, clock);
  std::atomic<std::uint64_t> changes{0};
  limit.add_listener([&](const AdaptiveLimitEvent& e) {
    EXPECT_GE(e.to, c.min_limit);
    EXPECT_LE(e.to, c.max_limit);
    changes.fetch_add(1, std::memory_order_relaxed);
  });

  std::atomic<std::uint32_t> admitted_now{0};  // the test's own count of held permits
  std::atomic<std::uint64_t> admitted{0}, attempts{0};
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<std::uint32_t>(t + 1));
      std::vector<BasicAdaptiveLimit<ManualClock>::Permit> held;
      for (int i = 0; i < kOps; ++i) {
        const auto r = rng() % 10;
        if (r < 5 || held.empty()) {
          attempts.fetch_add(1, std::memory_order_relaxed);
          if (auto p = limit.try_acquire()) {
            const std::uint32_t now_held = admitted_now.fetch_add(1) + 1;
            if (now_held > c.max_limit) over = true;
            if (limit.in_flight() > c.max_limit + kThreads) over = true;
            admitted.fetch_add(1, std::memory_order_relaxed);
            held.push_back(std::move(*p));
          }
        } else {
          auto p = std::move(held.back());
          held.pop_back();
          admitted_now.fetch_sub(1);
          if (r < 8) {
            p.complete();
          } else if (r < 9) {
            p.drop();
          } else {
            p.cancel();
          }
        }
        if (rng() % 4 == 0) clock.advance(Nanos(rng() % 3'000'000));
      }
      for (auto& p : held) {
        admitted_now.fetch_sub(1);
        p.complete();
      }
    });
  }
  for (auto& th : threads) th.join();

  EXPECT_FALSE(over.load()) << "more calls admitted than the largest limit, or in-flight past "
                               "limit + threads";
  const AdaptiveLimitSnapshot s = limit.snapshot();
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(admitted.load() + s.rejected, attempts.load());
  EXPECT_GE(s.limit, c.min_limit);
  EXPECT_LE(s.limit, c.max_limit);
  EXPECT_GT(s.windows, 0u);
}

TEST(AdaptiveLimitStress, Aimd) { hammer(AdaptiveAlgorithm::aimd); }
TEST(AdaptiveLimitStress, Vegas) { hammer(AdaptiveAlgorithm::vegas); }
TEST(AdaptiveLimitStress, Gradient2) { hammer(AdaptiveAlgorithm::gradient2); }

}  // namespace
}  // namespace bulwark
