#include "bulwark/bulkhead.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

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

TEST(Bulkhead, ValidationNamesTheField) {
  auto field = [](BulkheadConfig c) {
    auto r = validate(c);
    return r ? std::string() : r.error().field;
  };
  EXPECT_EQ(field({.name = ""}), "name");
  EXPECT_EQ(field({.max_concurrent = 0}), "max_concurrent");
  EXPECT_EQ(field({.max_wait = -1ms}), "max_wait");
  EXPECT_EQ(field({}), "");
#if defined(__cpp_exceptions)
  try {
    Bulkhead b({.name = "reviews", .max_concurrent = 0});
    FAIL();
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().component, "bulkhead 'reviews'");
    EXPECT_EQ(e.error().field, "max_concurrent");
  }
#endif
}

}  // namespace
}  // namespace bulwark
