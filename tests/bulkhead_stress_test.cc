// Threads hammer one bulkhead, each call randomly succeeding, throwing, being
// cancelled while it waits, or timing out at its deadline. Checked throughout and at
// the end: concurrency never exceeds the limit, every rejection is counted, and every
// permit comes back. Run it under TSan (ctest -L stress in the tsan preset).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <vector>

#include "bulwark/backoff.h"
#include "bulwark/bulkhead.h"
#include "support/patience.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kLimit = 3;
constexpr int kThreads = 8;
constexpr int kIterations = 1500;

// Stop sources handed to the canceller thread; it cancels them a little later, while
// their owners are (often) waiting for a slot.
class Mailbox {
 public:
  void post(std::stop_source s) {
    std::lock_guard lock(mu_);
    sources_.push_back(std::move(s));
  }
  bool cancel_one() {
    std::stop_source s;
    {
      std::lock_guard lock(mu_);
      if (sources_.empty()) return false;
      s = std::move(sources_.front());
      sources_.pop_front();
    }
    s.request_stop();
    return true;
  }

 private:
  std::mutex mu_;
  std::deque<std::stop_source> sources_;
};

struct Counts {
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<std::uint64_t> admitted{0};
  std::atomic<std::uint64_t> rejected{0};
  std::atomic<std::uint64_t> full{0};
  std::atomic<std::uint64_t> deadline{0};
  std::atomic<std::uint64_t> cancelled{0};
  std::atomic<std::uint64_t> thrown{0};
};

void hold(Counts& c, SplitMix64& rng) {
  const int now = c.inside.fetch_add(1) + 1;
  int seen = c.max_inside.load();
  while (now > seen && !c.max_inside.compare_exchange_weak(seen, now)) {
  }
  // Hold the slot for a short, random while (up to 100 us, yielding), so that others
  // queue behind it. Bounded by time, not by yields: on a loaded machine a yield can
  // take a whole time slice.
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 100);
  do {
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < until);
  c.inside.fetch_sub(1);
}

void note(Counts& c, const BulkheadRejection& r) {
  c.rejected.fetch_add(1);
  switch (r.reason) {
    case BulkheadRejectReason::full:
      c.full.fetch_add(1);
      break;
    case BulkheadRejectReason::deadline_exceeded:
      c.deadline.fetch_add(1);
      break;
    case BulkheadRejectReason::cancelled:
      c.cancelled.fetch_add(1);
      break;
  }
}

TEST(BulkheadStress, NeverExceedsTheLimitAndLosesNoPermit) {
  Bulkhead pool({.name = "stress", .max_concurrent = kLimit, .max_wait = 2ms});
  Counts c;
  Mailbox mailbox;
  std::atomic<bool> done{false};
  std::atomic<std::uint32_t> sampled_max{0};
  // The workers make kIterations calls each, and go on until they have held every slot
  // at once (the pool really was contended), however the scheduler ran them.
  test::Patience patience;

  std::jthread canceller([&] {
    while (!done.load()) {
      if (!mailbox.cancel_one()) std::this_thread::yield();
    }
    while (mailbox.cancel_one()) {
    }
  });
  std::jthread sampler([&] {
    while (!done.load()) {
      const std::uint32_t in_use = pool.in_use();
      std::uint32_t seen = sampled_max.load();
      while (in_use > seen && !sampled_max.compare_exchange_weak(seen, in_use)) {
      }
      std::this_thread::yield();
    }
  });

  {
    std::vector<std::jthread> workers;
    for (int t = 0; t < kThreads; ++t) {
      workers.emplace_back([&, t] {
        SplitMix64 rng(static_cast<std::uint64_t>(t) * 7919 + 1);
        for (int i = 0; i < kIterations ||
                        (c.max_inside.load() < static_cast<int>(kLimit) && !patience.exhausted());
             ++i) {
          switch (rng() % 5) {
            case 0: {  // succeed, without waiting
              auto p = pool.try_acquire();
              if (!p) {
                note(c, p.error());
                break;
              }
              c.admitted.fetch_add(1);
              hold(c, rng);
              break;
            }
            case 1: {  // succeed, waiting up to max_wait
              auto p = pool.acquire();
              if (!p) {
                note(c, p.error());
                break;
              }
              c.admitted.fetch_add(1);
              hold(c, rng);
              if (rng() % 2) p->release();  // early release, then the destructor: once only
              break;
            }
            case 2: {  // throw while holding the slot
#if defined(__cpp_exceptions)
              try {
                auto p = pool.acquire();
                if (!p) {
                  note(c, p.error());
                  break;
                }
                c.admitted.fetch_add(1);
                hold(c, rng);
                throw std::runtime_error("call failed");
              } catch (const std::runtime_error&) {
                c.thrown.fetch_add(1);
              }
#endif
              break;
            }
            case 3: {  // cancelled while waiting (or before)
              std::stop_source source;
              if (rng() % 4 == 0) {
                source.request_stop();
              } else {
                mailbox.post(source);
              }
              auto p = pool.acquire(Context(SteadyClock{}, source.get_token()));
              if (!p) {
                note(c, p.error());
                break;
              }
              c.admitted.fetch_add(1);
              hold(c, rng);
              break;
            }
            case 4: {  // a deadline shorter than max_wait
              auto p =
                  pool.acquire(Context(SteadyClock{}, {}, Deadline::after(SteadyClock{}, 100us)));
              if (!p) {
                note(c, p.error());
                break;
              }
              c.admitted.fetch_add(1);
              hold(c, rng);
              break;
            }
          }
        }
      });
    }
  }
  done = true;
  sampler.join();
  canceller.join();

  const auto snap = pool.snapshot();
  EXPECT_LE(c.max_inside.load(), static_cast<int>(kLimit));
  EXPECT_LE(sampled_max.load(), kLimit);
  EXPECT_EQ(snap.in_use, 0u) << "every permit came back";
  EXPECT_EQ(snap.waiting, 0u);
  EXPECT_EQ(snap.rejected, c.rejected.load()) << "every rejection was counted once";
  EXPECT_EQ(c.full + c.deadline + c.cancelled, c.rejected.load());
  EXPECT_GT(c.admitted.load(), 0u);
  EXPECT_GT(c.rejected.load(), 0u);
  // The pool really was contended: the limit was reached (the workers went on until it was).
  EXPECT_EQ(c.max_inside.load(), static_cast<int>(kLimit))
      << "in 120 s the workers never held every slot at once";
  // And all the slots are usable again.
  std::vector<Bulkhead::Permit> all;
  for (std::uint32_t i = 0; i < kLimit; ++i) {
    auto p = pool.try_acquire();
    ASSERT_TRUE(p);
    all.push_back(std::move(*p));
  }
  EXPECT_FALSE(pool.try_acquire());
  std::printf(
      "admitted %llu, rejected %llu (full %llu, deadline %llu, cancelled %llu), thrown %llu\n",
      static_cast<unsigned long long>(c.admitted.load()),
      static_cast<unsigned long long>(c.rejected.load()),
      static_cast<unsigned long long>(c.full.load()),
      static_cast<unsigned long long>(c.deadline.load()),
      static_cast<unsigned long long>(c.cancelled.load()),
      static_cast<unsigned long long>(c.thrown.load()));
}

}  // namespace
}  // namespace bulwark
