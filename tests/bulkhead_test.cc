#include "bulwark/bulkhead.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/metrics.h"
#include "support/bulkhead_access.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

TEST(Bulkhead, AdmitsUpToTheLimitThenRejectsAtOnce) {
  Bulkhead pool({.name = "db", .max_concurrent = 2});
  auto a = pool.try_acquire();
  auto b = pool.try_acquire();
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  auto c = pool.try_acquire();
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().reason, BulkheadRejectReason::full);
  auto d = pool.acquire(Context());  // max_wait 0: does not wait either
  ASSERT_FALSE(d);
  const auto snap = pool.snapshot();
  EXPECT_EQ(snap.in_use, 2u);
  EXPECT_EQ(snap.max_concurrent, 2u);
  EXPECT_EQ(snap.rejected, 2u);
  EXPECT_EQ(snap.waiting, 0u);
}

TEST(Bulkhead, PermitIsReleasedExactlyOnce) {
  Bulkhead pool({.max_concurrent = 1});
  {
    auto p = pool.try_acquire();
    ASSERT_TRUE(p);
    EXPECT_EQ(pool.in_use(), 1u);
    p->release();
    EXPECT_EQ(pool.in_use(), 0u);
    p->release();  // idempotent
    EXPECT_EQ(pool.in_use(), 0u);
    auto again = pool.try_acquire();
    ASSERT_TRUE(again);
  }  // destructor after release: nothing more
  EXPECT_EQ(pool.in_use(), 0u);

  auto p = pool.try_acquire();
  ASSERT_TRUE(p);
  auto moved = std::move(*p);
  EXPECT_FALSE(p->active());
  EXPECT_TRUE(moved.active());
  EXPECT_EQ(pool.in_use(), 1u);
  { auto holder = std::move(moved); }
  EXPECT_EQ(pool.in_use(), 0u);
}

#if defined(__cpp_exceptions)
TEST(Bulkhead, ExceptionsCannotLeakASlot) {
  Bulkhead pool({.max_concurrent = 1});
  try {
    auto p = pool.try_acquire();
    throw 1;
  } catch (int) {
  }
  EXPECT_EQ(pool.in_use(), 0u);
}
#endif

TEST(Bulkhead, WaiterGetsTheReleasedSlot) {
  Bulkhead pool({.max_concurrent = 1, .max_wait = std::chrono::hours(1)});
  auto held = pool.try_acquire();
  ASSERT_TRUE(held);
  std::jthread releaser([&] {
    while (pool.snapshot().waiting == 0) std::this_thread::yield();
    held->release();
  });
  auto p = pool.acquire();  // can only return by getting the slot (or in an hour)
  ASSERT_TRUE(p);
  EXPECT_EQ(pool.in_use(), 1u);
}

TEST(Bulkhead, TimedOutWaiterHoldsNothing) {
  Bulkhead pool({.max_concurrent = 1, .max_wait = 1ms});
  auto held = pool.try_acquire();
  auto p = pool.acquire();
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().reason, BulkheadRejectReason::full);
  EXPECT_EQ(pool.in_use(), 1u);
  EXPECT_EQ(pool.snapshot().waiting, 0u);
  held->release();
  EXPECT_EQ(pool.in_use(), 0u);
}

TEST(Bulkhead, NeverWaitsPastTheDeadline) {
  ManualClock clock;
  BasicBulkhead<ManualClock> pool({.max_concurrent = 1, .max_wait = std::chrono::hours(1)}, clock);
  auto held = pool.try_acquire();
  // The deadline has already passed: rejected without waiting at all.
  BasicContext<ManualClock> late(clock, {}, Deadline::at(0));
  auto p = pool.acquire(late);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().reason, BulkheadRejectReason::deadline_exceeded);
  // A deadline shorter than max_wait bounds the wait and is named as the reason.
  BasicContext<ManualClock> soon(clock, {}, Deadline::after(clock, 1ms));
  auto q = pool.acquire(soon);
  ASSERT_FALSE(q);
  EXPECT_EQ(q.error().reason, BulkheadRejectReason::deadline_exceeded);
}

TEST(Bulkhead, CancellationWakesAWaiter) {
  Bulkhead pool({.max_concurrent = 1, .max_wait = std::chrono::hours(1)});
  auto held = pool.try_acquire();
  std::stop_source source;
  std::jthread canceller([&] {
    while (pool.snapshot().waiting == 0) std::this_thread::yield();
    source.request_stop();
  });
  auto p = pool.acquire(Context(SteadyClock{}, source.get_token()));
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().reason, BulkheadRejectReason::cancelled);
  EXPECT_EQ(pool.in_use(), 1u);

  auto already = pool.acquire(Context(SteadyClock{}, source.get_token()));
  ASSERT_FALSE(already);
  EXPECT_EQ(already.error().reason, BulkheadRejectReason::cancelled);
}

struct Heard {
  std::vector<BulkheadRejectReason> reasons;
  std::vector<std::string> names;
  std::optional<Bulkhead::Permit>* release_on_rejection = nullptr;
  void on_bulkhead_rejection(const BulkheadRejectionEvent& e) {
    reasons.push_back(e.reason);
    names.emplace_back(e.name);
    // Giving a slot back takes the bulkhead's mutex when a waiter is registered: this
    // would deadlock if the observer ran with the mutex still held by the waiter.
    if (release_on_rejection != nullptr) release_on_rejection->reset();
  }
};

TEST(Bulkhead, AnObserverHearsEveryRejectionWithNoLockHeld) {
  Bulkhead pool({.name = "db", .max_concurrent = 1, .max_wait = 1ms});
  Heard heard;
  pool.observe_rejections(BulkheadObserver(heard));
  std::optional<Bulkhead::Permit> held;
  held.emplace(*pool.try_acquire());
  EXPECT_FALSE(pool.try_acquire());  // full, at once
  heard.release_on_rejection = &held;
  EXPECT_FALSE(pool.acquire());  // waited 1 ms, then full: the observer frees the slot
  EXPECT_FALSE(held.has_value());
  EXPECT_EQ(pool.in_use(), 0u);
  std::stop_source stop;
  stop.request_stop();
  held.emplace(*pool.try_acquire());
  heard.release_on_rejection = nullptr;
  const SteadyClock steady;
  EXPECT_FALSE(pool.acquire(Context(steady, stop.get_token())));  // cancelled
  EXPECT_EQ(heard.reasons, (std::vector<BulkheadRejectReason>{BulkheadRejectReason::full,
                                                              BulkheadRejectReason::full,
                                                              BulkheadRejectReason::cancelled}));
  EXPECT_EQ(heard.names, (std::vector<std::string>{"db", "db", "db"}));
  EXPECT_EQ(pool.snapshot().rejected, 3u);
  held.reset();
  auto ok = pool.try_acquire();  // admissions are not reported
  EXPECT_TRUE(ok);
  EXPECT_EQ(heard.reasons.size(), 3u);
}

TEST(Bulkhead, ValidationNamesTheField) {
  auto field = [](BulkheadConfig c) {
    auto r = validate(c);
    return r ? std::string() : r.error().field;
  };
  EXPECT_EQ(field({.name = ""}), "name");
  EXPECT_EQ(field({.max_concurrent = 0}), "max_concurrent");
  EXPECT_EQ(field({.max_wait = -1ms}), "max_wait");
  EXPECT_EQ(field({.stripes = 0}), "stripes");
  EXPECT_EQ(field({.stripes = kMaxBulkheadStripes + 1}), "stripes");
  EXPECT_EQ(field({.stripes = kMaxBulkheadStripes}), "");
  EXPECT_EQ(field({}), "");
#if defined(__cpp_exceptions)
  try {
    Bulkhead b({.name = "reviews", .max_concurrent = 0});
    FAIL();
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().component, "bulkhead 'reviews'");
    EXPECT_EQ(e.error().field, "max_concurrent");
  }
  try {
    Bulkhead b({.name = "reviews", .stripes = 65});
    FAIL();
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "stripes");
    EXPECT_EQ(e.error().message, "must be between 1 and 64 (got 65)");
  }
#endif
}

// ---- striped bulkheads (BulkheadConfig::stripes > 1) ----

using Access = detail::BulkheadTestAccess;

std::uint32_t sum(const std::vector<std::uint32_t>& v) {
  std::uint32_t n = 0;
  for (std::uint32_t x : v) n += x;
  return n;
}

TEST(StripedBulkhead, SplitsTheSlotsOverItsStripes) {
  Bulkhead pool({.max_concurrent = 10, .stripes = 4});
  EXPECT_EQ(Access::available(pool), (std::vector<std::uint32_t>{3, 3, 2, 2}));
  Bulkhead one({.max_concurrent = 10});
  EXPECT_EQ(Access::stripes(one), nullptr) << "stripes = 1 keeps the single count";
}

TEST(StripedBulkhead, OneThreadTakesEverySlotAcrossStripesThenIsRefused) {
  Bulkhead pool({.max_concurrent = 10, .stripes = 4});
  std::vector<Bulkhead::Permit> held;
  for (int i = 0; i < 10; ++i) {
    auto p = pool.try_acquire();
    ASSERT_TRUE(p) << "slot " << i << " is free on some stripe";
    held.push_back(std::move(*p));
  }
  EXPECT_EQ(Access::available(pool), (std::vector<std::uint32_t>{0, 0, 0, 0}));
  auto over = pool.try_acquire();
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().reason, BulkheadRejectReason::full);
  EXPECT_FALSE(pool.acquire(Context()));  // max_wait 0
  EXPECT_EQ(pool.in_use(), 10u);

  // Releasing one (from any stripe) lets exactly one in.
  held[7].release();
  EXPECT_EQ(pool.in_use(), 9u);
  auto again = pool.try_acquire();
  ASSERT_TRUE(again);
  EXPECT_FALSE(pool.try_acquire());
  const auto snap = pool.snapshot();
  EXPECT_EQ(snap.in_use, 10u);
  EXPECT_EQ(snap.max_concurrent, 10u);
  EXPECT_EQ(snap.rejected, 3u);

  held.clear();
  again->release();
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(Access::available(pool), (std::vector<std::uint32_t>{3, 3, 2, 2}))
      << "every slot went back to the stripe it came from";
}

TEST(StripedBulkhead, MoreStripesThanSlots) {
  Bulkhead pool({.max_concurrent = 3, .stripes = 64});
  EXPECT_EQ(sum(Access::available(pool)), 3u);
  std::vector<Bulkhead::Permit> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::move(*pool.try_acquire()));
  EXPECT_FALSE(pool.try_acquire());
  EXPECT_EQ(pool.in_use(), 3u);
  held.pop_back();
  EXPECT_TRUE(pool.try_acquire());  // taken and given back at once
  held.clear();
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(sum(Access::available(pool)), 3u);
}

// A permit moved to another thread gives its slot back to the stripe it was taken from,
// not to the releasing thread's: the stripes keep their shares.
TEST(StripedBulkhead, APermitReleasedOnAnotherThreadGoesBackToItsStripe) {
  Bulkhead pool({.max_concurrent = 4, .stripes = 2});
  std::vector<Bulkhead::Permit> held;
  for (int i = 0; i < 4; ++i) held.push_back(std::move(*pool.try_acquire()));
  std::jthread other([&] { held.clear(); });
  other.join();
  EXPECT_EQ(Access::available(pool), (std::vector<std::uint32_t>{2, 2}));
  for (int i = 0; i < 4; ++i) held.push_back(std::move(*pool.try_acquire()));
  EXPECT_FALSE(pool.try_acquire());
}

// What the metrics read is the sum of the stripes.
TEST(StripedBulkhead, MetricsSumTheStripes) {
  Bulkhead pool({.max_concurrent = 8, .stripes = 3});
  auto a = pool.try_acquire();
  auto b = pool.try_acquire();
  ComponentReading r;
  r.add_bulkhead(pool);
  EXPECT_TRUE(r.has_bulkhead);
  EXPECT_EQ(r.bulkhead_in_use, 2u);
  EXPECT_EQ(r.bulkhead_max, 8u);
  b->release();
  EXPECT_EQ(pool.snapshot().in_use, 1u);
}

TEST(StripedBulkhead, AReleaseWakesAWaiter) {
  Bulkhead pool({.max_concurrent = 2, .max_wait = std::chrono::hours(1), .stripes = 2});
  std::vector<Bulkhead::Permit> held;
  for (int i = 0; i < 2; ++i) held.push_back(std::move(*pool.try_acquire()));
  std::jthread releaser([&] {
    while (pool.snapshot().waiting == 0) std::this_thread::yield();
    held.pop_back();  // whichever stripe it is, the waiter is told
  });
  auto p = pool.acquire();  // can only return by getting the slot (or in an hour)
  ASSERT_TRUE(p);
  releaser.join();
  EXPECT_EQ(pool.in_use(), 2u);
}

TEST(StripedBulkhead, CancellationAndDeadlineStillEndAWait) {
  ManualClock clock;
  BasicBulkhead<ManualClock> pool(
      {.max_concurrent = 2, .max_wait = std::chrono::hours(1), .stripes = 2}, clock);
  auto a = pool.try_acquire();
  auto b = pool.try_acquire();
  BasicContext<ManualClock> soon(clock, {}, Deadline::after(clock, 1ms));
  auto q = pool.acquire(soon);
  ASSERT_FALSE(q);
  EXPECT_EQ(q.error().reason, BulkheadRejectReason::deadline_exceeded);
  std::stop_source source;
  std::jthread canceller([&] {
    while (pool.snapshot().waiting == 0) std::this_thread::yield();
    source.request_stop();
  });
  auto c = pool.acquire(BasicContext<ManualClock>(clock, source.get_token()));
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().reason, BulkheadRejectReason::cancelled);
  EXPECT_EQ(pool.in_use(), 2u);
  EXPECT_EQ(pool.snapshot().waiting, 0u);
}

}  // namespace
}  // namespace bulwark
