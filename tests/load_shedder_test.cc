// The load shedder in virtual time: priority headroom, the controlled-delay queue and
// its switch to LIFO, deadline refusals, the Retry-After hint, counters and metrics.
// Queue tests park waiters on their own threads; the clock is a ManualClock, so every
// expiry happens because the test advanced the clock, never because time passed.

#include "bulwark/load_shedder.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using Shedder = BasicLoadShedder<FixedLimit, ManualClock>;

LoadShedderConfig config() {
  LoadShedderConfig c;
  c.name = "api";
  return c;
}

// Spins (bounded) until `pred` holds; false if it never did.
template <class F>
bool eventually(F pred) {
  for (int i = 0; i < 2'000'000; ++i) {
    if (pred()) return true;
    std::this_thread::yield();
  }
  return pred();
}

// A request waiting in acquire() on its own thread.
struct Waiter {
  std::optional<Shedder::Result> result;
  std::thread thread;
  Waiter(Shedder& s, Priority p, std::optional<Deadline> deadline = std::nullopt,
         const ManualClock* clock = nullptr) {
    thread = std::thread([this, &s, p, deadline, clock] {
      if (deadline) {
        result.emplace(s.acquire(BasicContext<ManualClock>(*clock, {}, *deadline), p));
      } else {
        result.emplace(s.acquire(p));
      }
    });
  }
  ~Waiter() {
    if (thread.joinable()) thread.join();
  }
  Shedder::Result& get() {
    if (thread.joinable()) thread.join();
    return *result;
  }
};

TEST(LoadShedder, SheddableIsRefusedFirstAndCriticalKeepsTheLastSlots) {
  ManualClock clock;
  Shedder s(config(), FixedLimit(10), clock);  // normal 9, sheddable 5
  EXPECT_EQ(s.class_limit(Priority::critical), 10u);
  EXPECT_EQ(s.class_limit(Priority::normal), 9u);
  EXPECT_EQ(s.class_limit(Priority::sheddable), 5u);
  std::vector<Shedder::Permit> held;
  for (int i = 0; i < 5; ++i) {
    auto r = s.try_acquire(Priority::sheddable);
    ASSERT_TRUE(r);
    held.push_back(std::move(*r));
  }
  auto shed = s.try_acquire(Priority::sheddable);
  ASSERT_FALSE(shed);
  EXPECT_EQ(shed.error().reason, ShedReason::priority);
  for (int i = 0; i < 4; ++i) {
    auto r = s.try_acquire(Priority::normal);
    ASSERT_TRUE(r);
    held.push_back(std::move(*r));
  }
  auto normal = s.try_acquire(Priority::normal);
  ASSERT_FALSE(normal);
  EXPECT_EQ(normal.error().reason, ShedReason::priority);
  auto critical = s.try_acquire(Priority::critical);
  ASSERT_TRUE(critical);  // the tenth slot was kept for it
  auto none = s.try_acquire(Priority::critical);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().reason, ShedReason::overloaded);
  EXPECT_EQ(s.in_flight(), 10u);

  const auto snap = s.snapshot();
  EXPECT_EQ(snap.admitted[0], 1u);
  EXPECT_EQ(snap.admitted[1], 4u);
  EXPECT_EQ(snap.admitted[2], 5u);
  EXPECT_EQ(snap.refused[static_cast<int>(ShedReason::priority)], 2u);
  EXPECT_EQ(snap.refused[static_cast<int>(ShedReason::overloaded)], 1u);
  held.clear();
  critical->release();
  EXPECT_EQ(s.in_flight(), 0u);
}

TEST(LoadShedder, SheddableNeverQueues) {
  ManualClock clock;
  Shedder s(config(), FixedLimit(2), clock);  // sheddable 1
  auto a = s.acquire(Priority::sheddable);
  ASSERT_TRUE(a);
  auto b = s.acquire(Priority::sheddable);  // would block if it queued
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().reason, ShedReason::priority);
  EXPECT_EQ(s.snapshot().queued_total, 0u);
}

TEST(LoadShedder, DeadlineShorterThanTheExpectedServiceTimeIsRefusedAtOnce) {
  ManualClock clock;
  auto c = config();
  c.initial_service_time = 100ms;
  Shedder s(c, FixedLimit(4), clock);
  BasicContext<ManualClock> short_ctx(clock, {}, Deadline::after(clock, 50ms));
  auto r = s.try_acquire(short_ctx, Priority::critical);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, ShedReason::deadline_too_short);
  BasicContext<ManualClock> ok_ctx(clock, {}, Deadline::after(clock, 200ms));
  auto p = s.acquire(ok_ctx, Priority::normal);
  ASSERT_TRUE(p);
  // The refusal pulled the estimate towards half the 50ms its caller had: 92.5ms. It
  // follows the service times, lazily: 92.5ms + 0.1 * (1s - 92.5ms).
  EXPECT_EQ(s.service_time(), 92500us);
  clock.advance(1s);
  p->release();
  EXPECT_EQ(s.service_time(), 183250us);
  BasicContext<ManualClock> was_ok(clock, {}, Deadline::after(clock, 150ms));
  auto q = s.try_acquire(was_ok, Priority::normal);
  ASSERT_FALSE(q);
  EXPECT_EQ(q.error().reason, ShedReason::deadline_too_short);
  // A passed deadline is refused even before any estimate exists.
  Shedder fresh(config(), FixedLimit(4), clock);
  BasicContext<ManualClock> passed(clock, {}, Deadline::at(now_ticks(clock)));
  EXPECT_FALSE(fresh.try_acquire(passed, Priority::critical));
}

// Only admitted requests measure the service; refusals must not freeze an estimate that
// rose above every caller's deadline.
TEST(LoadShedder, AnEstimateAboveEveryDeadlineDecaysUntilARequestIsAdmitted) {
  ManualClock clock;
  auto c = config();
  c.initial_service_time = 2s;
  c.service_time_weight = 0.5;
  Shedder s(c, FixedLimit(4), clock);
  int refused = 0;
  for (; refused < 100; ++refused) {
    BasicContext<ManualClock> ctx(clock, {}, Deadline::after(clock, 100ms));
    if (auto p = s.try_acquire(ctx, Priority::normal)) break;
  }
  EXPECT_GT(refused, 0);
  EXPECT_LT(refused, 100);
}

TEST(LoadShedder, RetryAfterIsTheMinimumOrTheTimeToDrainTheQueue) {
  ManualClock clock;
  auto c = config();
  c.initial_service_time = 4s;
  c.max_queue = 0;
  Shedder s(c, FixedLimit(2), clock);
  auto a = s.try_acquire(Priority::critical);
  auto b = s.try_acquire(Priority::critical);
  ASSERT_TRUE(a && b);
  auto r = s.try_acquire(Priority::critical);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().retry_after, 2s);  // 4s per request, 2 at a time, 1 ahead of it
  EXPECT_EQ(retry_after_seconds(r.error().retry_after), 2u);

  Shedder quick(config(), FixedLimit(1), clock);  // no estimate yet: the minimum, 1s
  auto held = quick.try_acquire(Priority::critical);
  auto refused = quick.try_acquire(Priority::critical);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().retry_after, 1s);
  EXPECT_EQ(retry_after_seconds(1500ms), 2u);
  EXPECT_EQ(retry_after_seconds(Nanos::zero()), 1u);
}

TEST(LoadShedder, RetryAfterGrowsWithTheQueueAhead) {
  ManualClock clock;
  auto c = config();
  c.initial_service_time = 4s;
  Shedder s(c, FixedLimit(1), clock);
  auto held = s.try_acquire(Priority::critical);
  ASSERT_TRUE(held);
  EXPECT_EQ(s.try_acquire(Priority::critical).error().retry_after, 4s);
  Waiter w(s, Priority::critical);
  ASSERT_TRUE(eventually([&] { return s.queued() == 1; }));
  EXPECT_EQ(s.try_acquire(Priority::critical).error().retry_after, 8s);  // one ahead
  held->release();
  ASSERT_TRUE(w.get());
}

TEST(LoadShedder, QueueIsFifoWhileItEmptiesWithinTheInterval) {
  ManualClock clock;
  Shedder s(config(), FixedLimit(1), clock);
  auto held = s.try_acquire(Priority::normal);
  ASSERT_TRUE(held);
  Waiter first(s, Priority::normal);
  ASSERT_TRUE(eventually([&] { return s.queued() == 1; }));
  clock.advance(1ms);
  Waiter second(s, Priority::normal);
  ASSERT_TRUE(eventually([&] { return s.queued() == 2; }));
  clock.advance(1ms);
  EXPECT_FALSE(s.snapshot().overloaded);
  held->release();  // FIFO: the oldest is served
  auto& r1 = first.get();
  ASSERT_TRUE(r1);
  EXPECT_EQ(s.queued(), 1u);
  r1->release();
  auto& r2 = second.get();
  ASSERT_TRUE(r2);
  r2->release();
  EXPECT_EQ(s.snapshot().queued_total, 2u);
  EXPECT_EQ(s.in_flight(), 0u);
}

TEST(LoadShedder, CriticalWaitersAreServedBeforeNormalOnes) {
  ManualClock clock;
  Shedder s(config(), FixedLimit(1), clock);
  auto held = s.try_acquire(Priority::critical);
  ASSERT_TRUE(held);
  Waiter normal(s, Priority::normal);
  ASSERT_TRUE(eventually([&] { return s.queued() == 1; }));
  clock.advance(1ms);
  Waiter critical(s, Priority::critical);
  ASSERT_TRUE(eventually([&] { return s.queued() == 2; }));
  held->release();
  auto& rc = critical.get();
  ASSERT_TRUE(rc);
  EXPECT_EQ(s.queued(), 1u);
  rc->release();
  ASSERT_TRUE(normal.get());
}

// The queue stands from t=0. Waiters that joined before t=interval may wait up to the
// interval; after that, a standing queue refuses waiters older than target_delay and
// serves the newest first.
TEST(LoadShedder, StandingQueueSwitchesToTargetDelayAndLifo) {
  ManualClock clock;
  auto c = config();
  c.target_delay = 5ms;
  c.interval = 100ms;
  Shedder s(c, FixedLimit(1), clock);
  auto held = s.try_acquire(Priority::normal);
  ASSERT_TRUE(held);
  Waiter a(s, Priority::normal);  // t=0: may wait until t=100ms
  ASSERT_TRUE(eventually([&] { return s.queued() == 1; }));
  clock.advance(50ms);
  Waiter b(s, Priority::normal);  // t=50ms: the queue stands at t=100ms, so also 100ms
  ASSERT_TRUE(eventually([&] { return s.queued() == 2; }));
  clock.advance(49ms);
  s.poll();
  EXPECT_EQ(s.queued(), 2u);
  clock.advance(2ms);  // t=101ms
  EXPECT_TRUE(s.snapshot().overloaded);
  s.poll();
  ASSERT_FALSE(a.get());
  EXPECT_EQ(a.get().error().reason, ShedReason::queue_timeout);
  ASSERT_FALSE(b.get());
  EXPECT_EQ(b.get().error().reason, ShedReason::queue_timeout);

  // The queue was never empty... it is now; the next waiter starts a new interval.
  Waiter c1(s, Priority::normal);  // t=101ms, queue empty: may wait 100ms
  ASSERT_TRUE(eventually([&] { return s.queued() == 1; }));
  clock.advance(99ms);             // t=200ms
  Waiter c2(s, Priority::normal);  // standing at 201ms: expires at max(201, 205) = 205ms
  ASSERT_TRUE(eventually([&] { return s.queued() == 2; }));
  clock.advance(1ms);  // t=201ms: c1 has waited its interval; the queue now stands
  s.poll();
  ASSERT_FALSE(c1.get());
  EXPECT_EQ(c1.get().error().reason, ShedReason::queue_timeout);
  EXPECT_EQ(s.queued(), 1u);
  clock.advance(1ms);
  Waiter c3(s, Priority::normal);  // t=202ms: expires at 207ms
  ASSERT_TRUE(eventually([&] { return s.queued() == 2; }));
  EXPECT_TRUE(s.snapshot().overloaded);
  held->release();  // LIFO: the newest, c3, is served
  auto& r3 = c3.get();
  ASSERT_TRUE(r3);
  EXPECT_EQ(s.queued(), 1u);
  clock.advance(3ms);  // t=205ms: c2 has waited its target delay
  s.poll();
  ASSERT_FALSE(c2.get());
  EXPECT_EQ(c2.get().error().reason, ShedReason::queue_timeout);
  r3->release();
  const auto snap = s.snapshot();
  EXPECT_EQ(snap.refused[static_cast<int>(ShedReason::queue_timeout)], 4u);
  EXPECT_EQ(snap.queued, 0u);
  EXPECT_EQ(snap.in_flight, 0u);
}

TEST(LoadShedder, WaiterIsRefusedWhenItsDeadlineNoLongerCoversTheServiceTime) {
  ManualClock clock;
  auto c = config();
  c.initial_service_time = 20ms;
  Shedder s(c, FixedLimit(1), clock);
  auto held = s.try_acquire(Priority::normal);
  ASSERT_TRUE(held);
  Waiter w(s, Priority::normal, Deadline::after(clock, 50ms), &clock);
  ASSERT_TRUE(eventually([&] { return s.queued() == 1; }));
  clock.advance(29ms);
  s.poll();
  EXPECT_EQ(s.queued(), 1u);
  clock.advance(1ms);  // 20ms left: no longer more than the 20ms it would take
  s.poll();
  ASSERT_FALSE(w.get());
  EXPECT_EQ(w.get().error().reason, ShedReason::deadline_too_short);
}

TEST(LoadShedder, FullQueueRefusesAtOnce) {
  ManualClock clock;
  auto c = config();
  c.max_queue = 1;
  Shedder s(c, FixedLimit(1), clock);
  auto held = s.try_acquire(Priority::critical);
  Waiter w(s, Priority::critical);
  ASSERT_TRUE(eventually([&] { return s.queued() == 1; }));
  auto r = s.acquire(Priority::critical);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, ShedReason::overloaded);
  held->release();
  ASSERT_TRUE(w.get());
}

TEST(LoadShedder, DropTellsTheLimitSource) {
  struct Recording {
    std::size_t limit() const noexcept { return 2; }
    void on_sample(Nanos rtt, bool dropped) noexcept {
      last_rtt = rtt;
      drops += dropped ? 1 : 0;
      samples += 1;
    }
    Nanos last_rtt{};
    int drops = 0;
    int samples = 0;
  };
  ManualClock clock;
  BasicLoadShedder<Recording, ManualClock> s(config(), Recording{}, clock);
  auto p = s.try_acquire(Priority::normal);
  ASSERT_TRUE(p);
  clock.advance(7ms);
  p->drop();
  p->drop();  // idempotent
  EXPECT_EQ(s.limit_source().samples, 1);
  EXPECT_EQ(s.limit_source().drops, 1);
  EXPECT_EQ(s.limit_source().last_rtt, 7ms);
  { auto q = s.try_acquire(Priority::normal); }
  EXPECT_EQ(s.limit_source().samples, 2);
  EXPECT_EQ(s.limit_source().drops, 1);
}

TEST(LoadShedder, PrometheusFamilies) {
  ManualClock clock;
  Shedder s(config(), FixedLimit(1), clock);
  auto p = s.try_acquire(Priority::critical);
  auto r = s.try_acquire(Priority::critical);
  std::ostringstream out;
  prometheus::write_load_shedder(out, "api", s.snapshot());
  const std::string text = out.str();
  EXPECT_NE(text.find("# TYPE bulwark_load_shedder_admitted_total counter"), std::string::npos);
  EXPECT_NE(
      text.find("bulwark_load_shedder_admitted_total{name=\"api\",priority=\"critical\"} 1\n"),
      std::string::npos);
  EXPECT_NE(text.find("bulwark_load_shedder_refused_total{name=\"api\",reason=\"overloaded\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("bulwark_load_shedder_in_flight{name=\"api\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("bulwark_load_shedder_limit{name=\"api\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("bulwark_load_shedder_service_time_seconds{name=\"api\"} 0\n"),
            std::string::npos);
}

TEST(LoadShedder, ConfigIsValidated) {
  auto c = config();
  EXPECT_TRUE(validate(c));
  c.sheddable_share = 0.95;
  EXPECT_EQ(validate(c).error().field, "sheddable_share");
  c = config();
  c.http_status = 500;
  EXPECT_EQ(validate(c).error().field, "http_status");
  c = config();
  c.interval = 1ms;
  EXPECT_EQ(validate(c).error().field, "interval");
  c = config();
  c.http_status = 429;
  EXPECT_TRUE(validate(c));
}

}  // namespace
}  // namespace bulwark
