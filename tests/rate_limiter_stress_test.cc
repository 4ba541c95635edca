// Threads racing for permits never get more than the rate allows: over the run, at most
// burst + elapsed / T permits (the GCRA bound: every admission moves the theoretical
// arrival time T further, and none is admitted with it past now + burst·T). A thread
// moves the virtual clock meanwhile, so admissions happen at many different times.
// Run it under TSan.
//
// With the clock frozen nothing refills, so the bound is exact: threads released
// together on a fresh limiter admit exactly its burst between them, every time. An
// update of the one word that two admissions both read before either wrote (a lost
// compare-and-swap) admits one permit too many, and the rounds below count it.

#include <gtest/gtest.h>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
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

// The burst shared by the threads in each frozen round (frozen_rounds).
constexpr std::uint64_t kFrozenBurst = 256;
// Rounds with every thread inside its calls at once that a run waits for, and the most
// rounds it runs on a machine that seldom or never runs the threads at once.
constexpr int kFrozenOverlaps = 200;
constexpr int kFrozenMaxRounds = 20000;

int frozen_threads() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 4u));
}

// Keeps thread i on the i-th CPU it may use (best effort, Linux only): left to itself a
// loaded scheduler may queue all the threads on one CPU for the whole run, where they
// take turns and never race.
void pin_to_cpu(int i) {
#ifdef __linux__
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  int want = i % CPU_COUNT(&allowed);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed) && want-- == 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);
      return;
    }
  }
#else
  (void)i;
#endif
}

// Releases threads together: the last to arrive runs `between` (alone: every other
// thread is waiting), then flips the generation the others spin on, so that none is
// asleep in the kernel when the others start. Spinning yields after a while, for
// machines with fewer cores than threads.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  template <class F>
  void arrive_and_wait(F&& between) {
    const std::uint64_t gen = gen_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      between();
      arrived_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (int spins = 0; gen_.load(std::memory_order_acquire) == gen; ++spins) {
      if (spins > 4096) std::this_thread::yield();
    }
  }

 private:
  const int n_;
  std::atomic<int> arrived_{0};
  std::atomic<std::uint64_t> gen_{0};
};

// Rounds on a fresh limiter under a clock that never moves: the threads, released
// together, call try_acquire() burst() times each, and exactly burst() are admitted
// between them (the bucket starts full, nothing refills it, there are more calls than
// permits). That holds whatever the interleaving: the test cannot flake. A lost update
// shows only when the threads really run at once, which a loaded machine grants in some
// stretches and not others, so the rounds go on until kFrozenOverlaps of them had every
// thread inside its calls at the same moment (or kFrozenMaxRounds). Each thread waits a
// random few hundred nanoseconds before its calls, so that the first calls of a round,
// the only ones that race when the burst is 1, meet in some rounds.
void frozen_rounds(const RateLimiterConfig& c, std::uint64_t burst) {
  using Limiter = BasicRateLimiter<ManualClock>;
  const ManualClock clock(ManualClock::time_point(1h));  // read by every thread, never moved
  const int threads = frozen_threads();
  std::optional<Limiter> limiter;
  std::atomic<std::uint64_t> admitted{0};
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  std::atomic<bool> overlapped{false};
  int rounds = 0;
  int overlaps = 0;
  int wrong = 0;
  std::string first_wrong;
  bool stop = false;
  // Run by the last thread to arrive, before it releases the others.
  auto next_round = [&] {
    if (limiter) {
      const std::uint64_t got = admitted.load(std::memory_order_relaxed);
      if (got != limiter->burst() && wrong++ == 0) {
        first_wrong = "round " + std::to_string(rounds) + " admitted " + std::to_string(got);
      }
      overlaps += overlapped.load(std::memory_order_relaxed) ? 1 : 0;
      ++rounds;
    }
    stop = overlaps >= kFrozenOverlaps || rounds >= kFrozenMaxRounds;
    limiter.emplace(c, clock);
    admitted.store(0, std::memory_order_relaxed);
    started.store(0, std::memory_order_relaxed);
    finished.store(0, std::memory_order_relaxed);
    overlapped.store(false, std::memory_order_relaxed);
  };
  SpinBarrier barrier(threads);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      pin_to_cpu(i);
      std::minstd_rand rng(static_cast<std::uint32_t>(i) + 1);
      for (;;) {
        barrier.arrive_and_wait(next_round);
        if (stop) return;
        for (auto d = rng() % 1024; d > 0; --d) std::atomic_signal_fence(std::memory_order_seq_cst);
        Limiter& l = *limiter;
        started.fetch_add(1, std::memory_order_relaxed);
        std::uint64_t mine = 0;
        for (std::uint64_t k = 0; k < l.burst(); ++k) mine += l.try_acquire() ? 1 : 0;
        // Every thread had started and none had finished: all were in their calls now.
        if (started.load(std::memory_order_relaxed) == threads &&
            finished.load(std::memory_order_relaxed) == 0) {
          overlapped.store(true, std::memory_order_relaxed);
        }
        finished.fetch_add(1, std::memory_order_relaxed);
        admitted.fetch_add(mine, std::memory_order_relaxed);
      }
    });
  }
  for (auto& t : pool) t.join();
  ASSERT_EQ(limiter->burst(), burst);
  std::printf("%s, burst %llu, %d threads: %d rounds, %d with the threads at once, %d wrong\n",
              c.name.c_str(), static_cast<unsigned long long>(limiter->burst()), threads, rounds,
              overlaps, wrong);
  EXPECT_EQ(wrong, 0) << "of " << rounds << " rounds (" << overlaps
                      << " with every thread in its calls at once), each with a burst of "
                      << limiter->burst() << " shared by " << threads
                      << " threads; the first: " << first_wrong;
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

TEST(RateLimiterStress, BurstyFrozenAdmitsExactlyTheCapacity) {
  frozen_rounds({.name = "bursty",
                 .mode = RateLimitMode::bursty,
                 .permits = 10,
                 .period = 1s,
                 .capacity = kFrozenBurst},
                kFrozenBurst);
}

TEST(RateLimiterStress, SmoothFrozenAdmitsExactlyTheTolerance) {
  // burst: tolerance / T + 1
  frozen_rounds({.name = "smooth",
                 .permits = 10,
                 .period = 1s,
                 .tolerance = 100ms * static_cast<int>(kFrozenBurst - 1)},
                kFrozenBurst);
}

// Without tolerance the burst is 1: in a round only the threads' first calls race.
TEST(RateLimiterStress, SmoothWithoutToleranceFrozenAdmitsOne) {
  frozen_rounds({.name = "smooth", .permits = 10, .period = 1s}, 1);
}

}  // namespace
}  // namespace bulwark
