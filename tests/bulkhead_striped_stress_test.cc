// Threads hammer one striped bulkhead (BulkheadConfig::stripes > 1). Checked
// throughout and at the end: the calls inside never exceed the limit (counted by the
// test, after admission and before release), every slot comes back to the stripe it
// was taken from, and a release wakes a waiter that registers while it is in progress.
// Run it under TSan (ctest -L stress in the tsan preset).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

#include "bulwark/backoff.h"
#include "bulwark/bulkhead.h"
#include "support/bulkhead_access.h"
#include "support/high_water.h"
#include "support/patience.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using Access = detail::BulkheadTestAccess;

constexpr int kThreads = 6;
constexpr int kIterations = 4000;

// Marks a call inside (after admission, before release) and records the most at once.
using Inside = test::HighWater;

void run_workers(Bulkhead& pool, Inside& inside, std::atomic<std::uint64_t>& admitted,
                 std::atomic<std::uint64_t>& refused) {
  const int limit = static_cast<int>(pool.config().max_concurrent);
  test::Patience patience;
  std::vector<std::jthread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      SplitMix64 rng(static_cast<std::uint64_t>(t) * 7919 + 1);
      // kIterations calls each, and on until every slot was held at once.
      for (int i = 0; i < kIterations || (inside.most.load() < limit && !patience.exhausted());
           ++i) {
        const std::uint64_t r = rng();
        auto p = r % 3 == 0 ? pool.acquire() : pool.try_acquire();
        if (!p) {
          refused.fetch_add(1);
          continue;
        }
        admitted.fetch_add(1);
        inside.enter();
        for (std::uint64_t k = r % 4; k > 0; --k) std::this_thread::yield();
        inside.leave();
        if (r % 5 == 0) {
          std::optional<Bulkhead::Permit> moved(std::move(*p));  // released from elsewhere
          moved.reset();
        }
      }
    });
  }
}

TEST(StripedBulkheadStress, NeverExceedsTheLimitAndEverySlotComesBackToItsStripe) {
  for (std::uint32_t stripes : {2u, 4u, 8u}) {
    // 5 slots: uneven shares (8 stripes: three of them start empty), so threads steal.
    Bulkhead pool({.name = "stress", .max_concurrent = 5, .max_wait = 1ms, .stripes = stripes});
    const auto shares = Access::available(pool);
    Inside inside;
    std::atomic<std::uint64_t> admitted{0};
    std::atomic<std::uint64_t> refused{0};
    std::atomic<bool> done{false};
    std::atomic<std::uint32_t> sampled_max{0};
    {
      std::jthread sampler([&] {
        while (!done.load()) {
          const std::uint32_t n = pool.in_use();
          if (n > sampled_max.load()) sampled_max.store(n);
          std::this_thread::yield();
        }
      });
      run_workers(pool, inside, admitted, refused);
      done = true;
    }
    EXPECT_LE(inside.most.load(), 5) << stripes << " stripes: more calls inside than the limit";
    EXPECT_EQ(inside.most.load(), 5) << stripes << " stripes: the limit was never reached";
    EXPECT_LE(sampled_max.load(), 5u);
    const auto snap = pool.snapshot();
    EXPECT_EQ(snap.in_use, 0u) << "every permit came back";
    EXPECT_EQ(snap.waiting, 0u);
    EXPECT_EQ(snap.rejected, refused.load());
    EXPECT_EQ(Access::available(pool), shares) << "each stripe got back exactly its own slots";
    std::vector<Bulkhead::Permit> all;
    for (int i = 0; i < 5; ++i) {
      auto p = pool.try_acquire();
      ASSERT_TRUE(p);
      all.push_back(std::move(*p));
    }
    EXPECT_FALSE(pool.try_acquire());
    EXPECT_GT(admitted.load(), 0u);
  }
}

// A waiter that registers while a release is in progress still gets the slot: the
// releaser raises its stripe and then reads the waiter count, the waiter counts itself
// and then looks at every stripe, so one of them sees the other. Each round the main
// thread holds every slot, a second thread asks for one (waiting up to an hour), and
// the main thread gives one back a varying moment later, so that over the rounds the
// release lands before, during and after the waiter's registration. Nobody else wants
// the slot, so the waiter gets it at once unless it slept through the release: then
// the round does not end, and after a minute of that (which no slow machine explains)
// the test fails and cancels the wait.
TEST(StripedBulkheadStress, AReleaseDuringAWaitersRegistrationWakesIt) {
  constexpr int kRounds = 3000;
  Bulkhead pool({.name = "wake", .max_concurrent = 2, .max_wait = 1h, .stripes = 2});
  std::stop_source cancel;
  std::atomic<int> go{-1};    // the round the waiter may start
  std::atomic<int> over{-1};  // the last round the waiter finished
  std::atomic<int> refused{0};
  std::jthread waiter([&] {
    for (int round = 0; round < kRounds; ++round) {
      while (go.load() < round) std::this_thread::yield();
      // The permit goes back at once.
      if (!pool.acquire(Context(SteadyClock{}, cancel.get_token()))) refused.fetch_add(1);
      over.store(round);
    }
  });
  int stuck = -1;
  for (int round = 0; round < kRounds && stuck < 0; ++round) {
    std::vector<Bulkhead::Permit> held;
    for (int i = 0; i < 2; ++i) {
      auto p = pool.try_acquire();
      ASSERT_TRUE(p) << "round " << round << ": the last round's slots came back";
      held.push_back(std::move(*p));
    }
    go.store(round);
    for (int spin = round % 97; spin > 0; --spin) {
      std::atomic_signal_fence(std::memory_order_seq_cst);
    }
    if (round % 5 == 0) std::this_thread::yield();
    held.pop_back();  // one slot back: the waiter must get it
    test::Patience patience(std::chrono::seconds(60));
    while (over.load() < round) {
      if (patience.exhausted()) {
        stuck = round;
        cancel.request_stop();  // wakes it (a stop callback notifies), ending the test
        go.store(kRounds);
        break;
      }
      std::this_thread::yield();
    }
  }
  waiter.join();
  EXPECT_EQ(stuck, -1) << "round " << stuck << ": the waiter slept through a release";
  EXPECT_EQ(refused.load(), 0);
  EXPECT_EQ(pool.in_use(), 0u);
}

}  // namespace
}  // namespace bulwark
