// The async bulkhead: waiters queue in order without a thread, resume on their own
// executor, never past their deadline, and a cancelled waiter takes no slot with it.
// Virtual time (ManualClock bound to ManualTimerClock); one io_context.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <optional>
#include <vector>

#include "asio/asio_support.h"
#include "bulwark/asio/bulkhead.h"
#include "bulwark/asio/pipeline.h"

// Live heap blocks of the whole binary: every coroutine frame, waiter and handler the
// tests create is one, so "nothing leaked" is counted, not assumed.
namespace {
std::atomic<long> g_live{0};
void* counted_new(std::size_t n) {
  g_live.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* counted_new(std::size_t n, std::align_val_t a) {
  g_live.fetch_add(1, std::memory_order_relaxed);
  const auto align = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(align, (n + align - 1) / align * align)) return p;
  throw std::bad_alloc();
}
void counted_delete(void* p) noexcept {
  if (p != nullptr) g_live.fetch_sub(1, std::memory_order_relaxed);
  std::free(p);
}
}  // namespace
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_new(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_new(n, a); }
void operator delete(void* p) noexcept { counted_delete(p); }
void operator delete[](void* p) noexcept { counted_delete(p); }
void operator delete(void* p, std::size_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_delete(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_delete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_delete(p); }

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;
using bulwark::asio::BasicAsyncBulkhead;
using bulwark::asio::ManualTimerClock;
using Clock = ManualClock;
using Ctx = BasicContext<Clock>;
using Pool = BasicAsyncBulkhead<Clock>;
using Result = Pool::Result;

class AsyncBulkheadTest : public ::testing::Test {
 protected:
  Clock clock;
  ManualTimerClock::Binding bind{clock};
  ::asio::io_context io{1};
  ::asio::executor_work_guard<::asio::io_context::executor_type> work{io.get_executor()};

  // Starts an acquire() in a coroutine of its own; its result lands in `out`.
  void start(Pool& pool, Ctx ctx, std::optional<Result>& out,
             ::asio::cancellation_signal* cancel = nullptr) {
    auto body = [&pool, ctx, &out]() -> ::asio::awaitable<void> {
      out.emplace(co_await pool.acquire(ctx, ::asio::use_awaitable));
    };
    // The lambda itself goes to co_spawn, which keeps it (and its captures) alive.
    if (cancel != nullptr) {
      ::asio::co_spawn(io, body, ::asio::bind_cancellation_slot(cancel->slot(), ::asio::detached));
    } else {
      ::asio::co_spawn(io, body, ::asio::detached);
    }
  }
  void settle() {
    drive(io, clock, [] { return true; });
  }
};

TEST_F(AsyncBulkheadTest, AFreeSlotIsTakenWithoutQueueing) {
  Pool pool({.name = "p", .max_concurrent = 2}, clock);
  std::optional<Result> a, b;
  start(pool, Ctx(clock), a);
  start(pool, Ctx(clock), b);
  settle();
  ASSERT_TRUE(a && *a && b && *b);
  EXPECT_EQ(pool.in_use(), 2u);
  EXPECT_EQ(pool.queued(), 0u);
  a.reset();
  b.reset();
  EXPECT_EQ(pool.in_use(), 0u);
}

TEST_F(AsyncBulkheadTest, WaitersAreServedInTheOrderTheyCame) {
  Pool pool({.name = "p", .max_concurrent = 1, .max_queue = 10, .max_wait = 10s}, clock);
  auto held = pool.try_acquire();
  ASSERT_TRUE(held);
  std::vector<int> order;
  std::vector<std::optional<Result>> out(4);
  for (int i = 0; i < 4; ++i) {
    ::asio::co_spawn(
        io,
        [&, i]() -> ::asio::awaitable<void> {
          auto r = co_await pool.acquire(Ctx(clock), ::asio::use_awaitable);
          order.push_back(i);
          out[i].emplace(std::move(r));
        },
        ::asio::detached);
  }
  settle();
  EXPECT_EQ(pool.queued(), 4u);
  EXPECT_TRUE(order.empty());
  // A newcomer may not jump the queue while others wait.
  EXPECT_FALSE(pool.try_acquire());
  for (int i = 0; i < 4; ++i) {
    if (i == 0) {
      held->release();
    } else {
      out[i - 1].reset();  // the previous holder leaves
    }
    settle();
    ASSERT_EQ(order.size(), static_cast<std::size_t>(i + 1));
    EXPECT_EQ(order.back(), i);
    ASSERT_TRUE(*out[i]);
  }
  out[3].reset();
  EXPECT_EQ(pool.in_use(), 0u);
}

TEST_F(AsyncBulkheadTest, AWaiterNeverWaitsPastItsDeadline) {
  Pool pool({.name = "p", .max_concurrent = 1, .max_queue = 10, .max_wait = 10s}, clock);
  auto held = pool.try_acquire();
  std::optional<Result> r;
  const Ticks start_at = now_ticks(clock);
  start(pool, Ctx(clock, {}, Deadline::after(clock, 250ms)), r);
  ASSERT_TRUE(drive(io, clock, [&] { return r.has_value(); }));
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().reason, BulkheadRejectReason::deadline_exceeded);
  EXPECT_EQ(Nanos(now_ticks(clock) - start_at), 250ms);  // exactly, in virtual time
  EXPECT_EQ(pool.queued(), 0u);
  EXPECT_EQ(pool.snapshot().rejected, 1u);
}

TEST_F(AsyncBulkheadTest, MaxWaitEndsAWaitAsFull) {
  Pool pool({.name = "p", .max_concurrent = 1, .max_queue = 10, .max_wait = 100ms}, clock);
  auto held = pool.try_acquire();
  std::optional<Result> r;
  start(pool, Ctx(clock, {}, Deadline::after(clock, 10s)), r);
  ASSERT_TRUE(drive(io, clock, [&] { return r.has_value(); }));
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().reason, BulkheadRejectReason::full);
}

TEST_F(AsyncBulkheadTest, AFullQueueRejectsAtOnce) {
  Pool pool({.name = "p", .max_concurrent = 1, .max_queue = 2, .max_wait = 1s}, clock);
  auto held = pool.try_acquire();
  std::optional<Result> a, b, c;
  start(pool, Ctx(clock), a);
  start(pool, Ctx(clock), b);
  start(pool, Ctx(clock), c);
  settle();  // no virtual time passes before c is answered
  EXPECT_FALSE(a.has_value());
  EXPECT_FALSE(b.has_value());
  ASSERT_TRUE(c && !*c);
  EXPECT_EQ(c->error().reason, BulkheadRejectReason::full);
  EXPECT_EQ(pool.queued(), 2u);
  held->release();
  settle();
  ASSERT_TRUE(a && *a);
  a.reset();  // b's turn; nothing may wait once the pool is gone
  settle();
  ASSERT_TRUE(b && *b);
}

TEST_F(AsyncBulkheadTest, ACancelledWaiterLeavesTheQueueAndTakesNoSlot) {
  // failsafe-go's bug: an abandoned waiter kept its permit, and the capacity was lost.
  Pool pool({.name = "p", .max_concurrent = 1, .max_queue = 10, .max_wait = 10s}, clock);
  auto held = pool.try_acquire();
  ::asio::cancellation_signal cancel;
  std::optional<Result> gone, next;
  start(pool, Ctx(clock), gone, &cancel);
  start(pool, Ctx(clock), next);
  settle();
  EXPECT_EQ(pool.queued(), 2u);
  cancel.emit(::asio::cancellation_type::terminal);
  settle();
  ASSERT_TRUE(gone && !*gone);
  EXPECT_EQ(gone->error().reason, BulkheadRejectReason::cancelled);
  EXPECT_EQ(pool.queued(), 1u);
  held->release();
  settle();
  ASSERT_TRUE(next && *next);  // the slot went to the one still waiting
  next.reset();
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_TRUE(pool.try_acquire());  // and the capacity is whole
}

TEST_F(AsyncBulkheadTest, ACancellationRacingTheGrantHandsTheSlotBack) {
  Pool pool({.name = "p", .max_concurrent = 1, .max_queue = 10, .max_wait = 10s}, clock);
  auto held = pool.try_acquire();
  ::asio::cancellation_signal cancel;
  bool resumed = false;
  const Ctx ctx(clock);
  // The pipeline's way: a slot that arrives for a cancelled caller is dropped.
  auto p = bulwark::asio::pipeline(bulwark::asio::bulkhead(pool));
  auto call = []() -> ::asio::awaitable<Expected<int, NetError>> { co_return 1; };
  std::optional<Expected<int, Failure<NetError>>> r;
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        r.emplace(co_await p(ctx, call));
        resumed = true;
      },
      ::asio::bind_cancellation_slot(cancel.slot(), ::asio::detached));
  settle();
  EXPECT_EQ(pool.queued(), 1u);
  held->release();                                   // the grant is posted...
  cancel.emit(::asio::cancellation_type::terminal);  // ...and the cancellation lands first
  settle();
  ASSERT_TRUE(resumed);
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().reason, Reason::cancelled);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(pool.queued(), 0u);
}

TEST_F(AsyncBulkheadTest, AWaiterResumesOnItsOwnExecutor) {
  Pool pool({.name = "p", .max_concurrent = 1, .max_queue = 10, .max_wait = 10s}, clock);
  ::asio::io_context other{1};
  auto other_work = ::asio::make_work_guard(other);
  auto held = pool.try_acquire();
  std::optional<Result> r;
  bool on_other = false;
  ::asio::co_spawn(
      other,
      [&]() -> ::asio::awaitable<void> {
        r.emplace(co_await pool.acquire(Ctx(clock), ::asio::use_awaitable));
        on_other = other.get_executor().running_in_this_thread();
      },
      ::asio::detached);
  other.poll();
  EXPECT_EQ(pool.queued(), 1u);
  ::asio::post(io, [&] { held->release(); });  // given back from another io_context's handler
  settle();
  EXPECT_FALSE(r.has_value());  // not resumed on the releaser's io_context
  other.poll();
  other.poll();
  ASSERT_TRUE(r && *r);
  EXPECT_TRUE(on_other);
}

TEST_F(AsyncBulkheadTest, TenThousandCoroutinesThroughEightySlotsOnOneThread) {
  const long live_before = g_live.load();
  constexpr int kCalls = 10'000;
  int inside = 0;
  int most_inside = 0;
  int completed = 0;
  int frames = 0;  // call coroutines alive
  {
    Pool pool({.name = "p", .max_concurrent = 80, .max_queue = kCalls, .max_wait = 60s}, clock);
    auto p = bulwark::asio::pipeline(bulwark::asio::bulkhead(pool));
    struct Frame {
      int& n;
      explicit Frame(int& c) : n(++c) {}
      ~Frame() { --n; }
    };
    auto call = [&](const Ctx&) -> ::asio::awaitable<Expected<int, NetError>> {
      Frame f(frames);
      ++inside;
      most_inside = std::max(most_inside, inside);
      bulwark::asio::Timer<Clock> t(co_await ::asio::this_coro::executor);
      t.expires_after(1ms);  // holds its slot for a virtual millisecond
      co_await t.async_wait(::asio::use_awaitable);
      --inside;
      co_return 1;
    };
    for (int i = 0; i < kCalls; ++i) {
      ::asio::co_spawn(
          io,
          [&]() -> ::asio::awaitable<void> {
            auto r = co_await p(Ctx(clock), call);
            if (r) ++completed;
          },
          ::asio::detached);
    }
    ASSERT_TRUE(drive(
        io, clock, [&] { return completed == kCalls; }, 10min));
    EXPECT_EQ(most_inside, 80);
    EXPECT_EQ(inside, 0);
    EXPECT_EQ(frames, 0);
    EXPECT_EQ(pool.in_use(), 0u);
    EXPECT_EQ(pool.queued(), 0u);
    EXPECT_EQ(pool.snapshot().rejected, 0u);
  }
  // Every frame, waiter and timer operation went back. Asio keeps a few freed frames
  // in a per-thread cache for reuse; that is all that may remain.
  EXPECT_LE(g_live.load() - live_before, 8);
}

TEST(AsyncBulkheadConfig, EveryFieldIsChecked) {
  using bulwark::asio::AsyncBulkheadConfig;
  EXPECT_FALSE(validate(AsyncBulkheadConfig{.name = ""}));
  EXPECT_FALSE(validate(AsyncBulkheadConfig{.name = "p", .max_concurrent = 0}));
  EXPECT_FALSE(validate(AsyncBulkheadConfig{.name = "p", .max_wait = -1ms}));
  const auto zero_wait = validate(AsyncBulkheadConfig{.name = "p", .max_queue = 5, .max_wait = {}});
  ASSERT_FALSE(zero_wait);
  EXPECT_EQ(zero_wait.error().field, "max_wait");
  EXPECT_TRUE(validate(AsyncBulkheadConfig{.name = "p", .max_queue = 0, .max_wait = {}}));
  EXPECT_THROW(bulwark::asio::AsyncBulkhead({.name = "p", .max_concurrent = 0}), InvalidConfig);
}

}  // namespace
}  // namespace bulwark::testing
