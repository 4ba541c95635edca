// The async bulkhead outlives io_contexts: one io_context (lane A) is destroyed while
// its waiter sits at each point an acquire() can be suspended at, and a second one
// (lane B) keeps using the bulkhead. Each point is a test of its own (TEST_P, named by
// the point); run them under ASan: no use of the freed context, no leak. After A is
// gone, every coroutine frame it held is destroyed unrun, a slot given back goes to the
// waiter on B (or stays free), and in_use() and queued() count only what is still
// alive. Lanes come from the deterministic executor (asio/support/deterministic_executor.h)
// so that a handler can be left posted but not run, and time is virtual.
//
// Destroying the bulkhead itself with permits out or waiters queued is a precondition
// violation (an assertion in debug builds), not something these tests do.

#include <gtest/gtest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "asio/support/deterministic_executor.h"
#include "bulwark/asio/bulkhead.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;
using bulwark::asio::BasicAsyncBulkhead;
using bulwark::asio::ManualTimerClock;
using Clock = ManualClock;
using Ctx = BasicContext<Clock>;
using Pool = BasicAsyncBulkhead<Clock>;
using Result = Pool::Result;

// Where lane A's waiter is when A is destroyed.
enum class Point {
  queued,                 // in the queue, nothing posted
  grant_posted,           // granted: its completion (holding the slot) posted, not run
  timer_fired,            // its max_wait timer expired: the timer's handler posted, not run
  cancellation_posted,    // cancelled: the rejection posted, not run
  rejection_posted,       // rejected at once (full queue), the rejection posted, not run
  free_slot_posted,       // a free slot taken at once, the completion posted, not run
  frame_holds_a_permit,   // queued from a coroutine that holds another slot
  two_waiters_one_holds,  // two coroutines on A queued, the older one holding a slot
  callback_queued,        // a plain callback (not a coroutine) in the queue
};

std::string name_of(Point p) {
  switch (p) {
    case Point::queued:
      return "Queued";
    case Point::grant_posted:
      return "GrantPosted";
    case Point::timer_fired:
      return "TimerFired";
    case Point::cancellation_posted:
      return "CancellationPosted";
    case Point::rejection_posted:
      return "RejectionPosted";
    case Point::free_slot_posted:
      return "FreeSlotPosted";
    case Point::frame_holds_a_permit:
      return "FrameHoldsAPermit";
    case Point::two_waiters_one_holds:
      return "TwoWaitersOneHolds";
    case Point::callback_queued:
      return "CallbackQueued";
  }
  return "?";
}

std::string param_name(const ::testing::TestParamInfo<Point>& p) { return name_of(p.param); }

// Counts the coroutine frames (and callbacks) alive on lane A.
struct Alive {
  int* n;
  explicit Alive(int& c) : n(&c) { ++*n; }
  Alive(Alive&& o) noexcept : n(std::exchange(o.n, nullptr)) {}
  Alive& operator=(Alive&&) = delete;
  ~Alive() {
    if (n != nullptr) --*n;
  }
};

class LifetimeTest : public ::testing::TestWithParam<Point> {
 protected:
  Clock clock;
  ManualTimerClock::Binding bind{clock};
  FifoChooser fifo;
  std::optional<Pool> pool;
  // Declared after the pool: destroyed before it.
  std::optional<World> world;
  std::optional<Pool::Permit> held;  // a slot held by another thread
  std::optional<Result> on_b;        // what lane B's waiter got
  int alive_on_a = 0;                // frames and callbacks of lane A
  int resumed_on_a = 0;              // how many of them ran past their acquire()
  ::asio::cancellation_signal cancel_a;

  void SetUp() override { world.emplace(clock, fifo); }
  void TearDown() override {
    on_b.reset();
    held.reset();
    world.reset();
    if (pool) {
      EXPECT_EQ(pool->in_use(), 0u);
      EXPECT_EQ(pool->queued(), 0u);
    }
  }

  void make_pool(std::uint32_t max_concurrent, std::uint32_t max_queue) {
    pool.emplace(bulwark::asio::AsyncBulkheadConfig{.name = "p",
                                                    .max_concurrent = max_concurrent,
                                                    .max_queue = max_queue,
                                                    .max_wait = 100ms},
                 clock);
  }
  void take_held() {
    auto p = pool->try_acquire();
    ASSERT_TRUE(p);
    held.emplace(std::move(*p));
  }

  // A coroutine on lane A: acquire(), then (if it got a slot) `then`.
  void spawn_on_a(bool cancellable = false, int acquires = 1) {
    auto body = [this, cancellable, acquires]() -> ::asio::awaitable<void> {
      Alive alive(alive_on_a);
      std::vector<Pool::Permit> mine;
      for (int i = 0; i < acquires; ++i) {
        // (No co_await inside a conditional expression: GCC 12 destroys its temporaries
        // twice.)
        std::optional<Result> r;
        if (cancellable) {
          r.emplace(co_await pool->acquire(
              Ctx(clock), ::asio::bind_cancellation_slot(cancel_a.slot(), ::asio::use_awaitable)));
        } else {
          r.emplace(co_await pool->acquire(Ctx(clock), ::asio::use_awaitable));
        }
        ++resumed_on_a;
        if (!*r) co_return;
        mine.push_back(std::move(**r));
      }
      // Holds its slots until lane A runs it again (it never does in these tests).
      co_await ::asio::post(co_await ::asio::this_coro::executor, ::asio::use_awaitable);
    };
    ::asio::co_spawn(world->lane(0).executor(), body, ::asio::detached);
  }
  void spawn_on_b() {
    ::asio::co_spawn(
        world->lane(1).executor(),
        [this]() -> ::asio::awaitable<void> {
          on_b.emplace(co_await pool->acquire(Ctx(clock), ::asio::use_awaitable));
        },
        ::asio::detached);
  }
  void run(std::size_t lane) {
    while (world->step_lane(lane)) {
    }
  }
};

TEST_P(LifetimeTest, DestroyingTheWaitersIoContextLeavesTheBulkheadWhole) {
  const Point point = GetParam();
  world->add_lane();    // A
  world->add_lane();    // B
  bool b_waits = true;  // B queues behind A, and gets the slot A's waiter leaves
  switch (point) {
    case Point::queued:
      make_pool(1, 4);
      take_held();
      spawn_on_a();
      run(0);
      break;
    case Point::grant_posted:
      make_pool(1, 4);
      take_held();
      spawn_on_a();
      run(0);
      spawn_on_b();
      run(1);
      held.reset();  // A is granted; its completion waits on lane A
      ASSERT_EQ(world->lane(0).ready().size(), 1u);
      break;
    case Point::timer_fired:
      make_pool(1, 4);
      take_held();
      spawn_on_a();
      run(0);
      world->advance(60ms);
      spawn_on_b();  // B's max_wait ends 60 ms after A's
      run(1);
      world->advance(40ms);
      world->ready();  // A's timer expired: its handler is posted on lane A
      ASSERT_EQ(world->lane(0).ready().size(), 1u);
      ASSERT_EQ(pool->queued(), 2u);
      break;
    case Point::cancellation_posted:
      make_pool(1, 4);
      take_held();
      spawn_on_a(/*cancellable=*/true);
      run(0);
      cancel_a.emit(::asio::cancellation_type::terminal);
      ASSERT_EQ(world->lane(0).ready().size(), 1u);
      ASSERT_EQ(pool->queued(), 0u);
      break;
    case Point::rejection_posted:
      make_pool(1, 1);
      take_held();
      spawn_on_b();  // B fills the queue first
      run(1);
      spawn_on_a();
      world->step_lane(0);  // A's coroutine starts: rejected at once, the rejection posted
      ASSERT_EQ(world->lane(0).ready().size(), 1u);
      b_waits = false;  // already queued
      break;
    case Point::free_slot_posted:
      make_pool(1, 4);
      spawn_on_a();
      world->step_lane(0);  // A takes the free slot; its completion is posted
      ASSERT_EQ(world->lane(0).ready().size(), 1u);
      ASSERT_EQ(pool->in_use(), 1u);
      break;
    case Point::frame_holds_a_permit:
      make_pool(2, 4);
      take_held();
      spawn_on_a(false, /*acquires=*/2);  // gets the second slot, then queues
      run(0);
      ASSERT_EQ(pool->in_use(), 2u);
      ASSERT_EQ(pool->queued(), 1u);
      break;
    case Point::two_waiters_one_holds:
      make_pool(2, 4);
      take_held();
      spawn_on_a(false, 2);  // holds a slot and queues
      run(0);
      spawn_on_a();  // queues behind it
      run(0);
      ASSERT_EQ(pool->queued(), 2u);
      break;
    case Point::callback_queued:
      make_pool(1, 4);
      take_held();
      pool->acquire(Ctx(clock), ::asio::bind_executor(
                                    world->lane(0).executor(),
                                    [alive = Alive(alive_on_a), this](Result) { ++resumed_on_a; }));
      break;
  }
  if (b_waits && point != Point::grant_posted && point != Point::timer_fired) {
    spawn_on_b();
    run(1);
  }
  const std::uint32_t a_held =
      point == Point::frame_holds_a_permit || point == Point::two_waiters_one_holds ||
              point == Point::free_slot_posted || point == Point::grant_posted
          ? 1
          : 0;
  ASSERT_GT(alive_on_a, 0);

  world->destroy_lane(0);  // A's io_context goes, with everything pending on it

  EXPECT_EQ(alive_on_a, 0) << "a frame or callback of the destroyed context is still alive";
  EXPECT_EQ(resumed_on_a,
            point == Point::frame_holds_a_permit || point == Point::two_waiters_one_holds
                ? 1  // its first acquire() completed before
                : 0);
  // A's slot (if it held or was granted one) went back: to B if B waits.
  run(1);
  if (a_held == 1) {
    ASSERT_TRUE(on_b.has_value());
    EXPECT_TRUE(*on_b);
  }
  EXPECT_EQ(pool->queued(), on_b.has_value() ? 0u : 1u);
  EXPECT_EQ(pool->in_use(), (held ? 1u : 0u) + (on_b && *on_b ? 1u : 0u));

  // The other thread gives its slot back: B gets it if it still waits.
  held.reset();
  run(1);
  ASSERT_TRUE(on_b.has_value());
  EXPECT_TRUE(*on_b);
  EXPECT_EQ(pool->in_use(), 1u);
  EXPECT_EQ(pool->queued(), 0u);
  on_b.reset();
  EXPECT_EQ(pool->in_use(), 0u);
  // And the capacity is whole.
  auto again = pool->try_acquire();
  EXPECT_TRUE(again);
}

INSTANTIATE_TEST_SUITE_P(EverySuspensionPoint, LifetimeTest,
                         ::testing::Values(Point::queued, Point::grant_posted, Point::timer_fired,
                                           Point::cancellation_posted, Point::rejection_posted,
                                           Point::free_slot_posted, Point::frame_holds_a_permit,
                                           Point::two_waiters_one_holds, Point::callback_queued),
                         param_name);

// Two bulkheads with waiters on one io_context, and one waiter of each on another: the
// context's shutdown takes its waiters out of both queues.
TEST(Lifetime, OneContextsWaitersLeaveEveryBulkhead) {
  Clock clock;
  ManualTimerClock::Binding bind(clock);
  FifoChooser fifo;
  Pool p1({.name = "p1", .max_concurrent = 1, .max_queue = 4, .max_wait = 1s}, clock);
  Pool p2({.name = "p2", .max_concurrent = 1, .max_queue = 4, .max_wait = 1s}, clock);
  std::optional<Result> b1, b2;
  {
    World world(clock, fifo);
    world.add_lane();
    world.add_lane();
    auto h1 = p1.try_acquire();
    auto h2 = p2.try_acquire();
    int alive = 0;
    for (Pool* p : {&p1, &p2}) {
      ::asio::co_spawn(
          world.lane(0).executor(),
          [p, &clock, &alive]() -> ::asio::awaitable<void> {
            Alive a(alive);
            auto r = co_await p->acquire(Ctx(clock), ::asio::use_awaitable);
            ADD_FAILURE() << "a coroutine of the destroyed context ran";
          },
          ::asio::detached);
    }
    ::asio::co_spawn(
        world.lane(1).executor(),
        [&]() -> ::asio::awaitable<void> {
          b1.emplace(co_await p1.acquire(Ctx(clock), ::asio::use_awaitable));
        },
        ::asio::detached);
    ::asio::co_spawn(
        world.lane(1).executor(),
        [&]() -> ::asio::awaitable<void> {
          b2.emplace(co_await p2.acquire(Ctx(clock), ::asio::use_awaitable));
        },
        ::asio::detached);
    while (world.step_lane(0)) {
    }
    while (world.step_lane(1)) {
    }
    EXPECT_EQ(p1.queued(), 2u);
    EXPECT_EQ(p2.queued(), 2u);
    world.destroy_lane(0);
    EXPECT_EQ(alive, 0);
    EXPECT_EQ(p1.queued(), 1u);
    EXPECT_EQ(p2.queued(), 1u);
    h1->release();
    h2->release();
    while (world.step_lane(1)) {
    }
    ASSERT_TRUE(b1 && *b1);
    ASSERT_TRUE(b2 && *b2);
    b1.reset();
    b2.reset();
  }
  EXPECT_EQ(p1.in_use(), 0u);
  EXPECT_EQ(p2.in_use(), 0u);
}

}  // namespace
}  // namespace bulwark::testing
