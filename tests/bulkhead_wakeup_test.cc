// A waiter that arrives while a release is in progress is not left asleep, striped or
// not. The bulkhead marks two places with BULWARK_SCHEDULE_POINT: in a release, between
// giving the slot back and reading the waiter count; in a wait, between finding no slot
// (after counting itself as waiting) and going to sleep. This test's schedule_point()
// holds the releasing thread at the first until the waiter has either got its slot or
// reached the second, so the waiter runs its whole arrival inside the release. A
// release that read the waiter count before giving the slot back would see no waiter,
// and the waiter, finding no slot, would sleep through it.
//
// Not the schedule explorer: the waiter sleeps on a condition variable, and the
// explorer's threads must never block. This translation unit defines the points; the
// bulkhead is a template, compiled here with them (the library's compiled code has no
// bulkhead of its own).

#define BULWARK_TEST_SCHEDULE_POINTS 1

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stop_token>
#include <thread>

#include "bulwark/bulkhead.h"
#include "support/patience.h"

namespace bulwark {
namespace {

std::atomic<bool> g_armed{false};          // hold the next release at its point
std::atomic<bool> g_release_held{false};   // a release is being held
std::atomic<bool> g_waiter_asleep{false};  // the waiter reached its sleep point
std::atomic<bool> g_waiter_done{false};    // the waiter's acquire() returned

}  // namespace

namespace detail {
void schedule_point(const char* name) noexcept {
  if (std::strcmp(name, "bulkhead.wait: counted, no slot, going to sleep") == 0) {
    g_waiter_asleep.store(true);
    return;
  }
  if (std::strcmp(name, "bulkhead.give_back: slot back, waiters not read yet") == 0 &&
      g_armed.exchange(false)) {
    g_release_held.store(true);
    const test::Patience patience(std::chrono::seconds(60));
    while (!g_waiter_done.load() && !g_waiter_asleep.load() && !patience.exhausted()) {
      std::this_thread::yield();
    }
  }
}
}  // namespace detail

namespace {

using namespace std::chrono_literals;

void a_waiter_arriving_during_a_release_gets_the_slot(std::uint32_t stripes) {
  g_armed = false;
  g_release_held = false;
  g_waiter_asleep = false;
  g_waiter_done = false;
  Bulkhead pool({.name = "wake", .max_concurrent = 2, .max_wait = 1h, .stripes = stripes});
  std::optional<Bulkhead::Permit> a(*pool.try_acquire());
  std::optional<Bulkhead::Permit> b(*pool.try_acquire());
  ASSERT_FALSE(pool.try_acquire());
  std::stop_source cancel;
  bool got = false;

  g_armed = true;
  std::jthread releaser([&] { a.reset(); });  // held at its point
  std::jthread waiter([&] {
    while (!g_release_held.load()) std::this_thread::yield();
    got = pool.acquire(Context(SteadyClock{}, cancel.get_token())).has_value();
    g_waiter_done = true;
  });
  // The waiter gets the slot at once, or sleeps through the release: then nothing
  // would wake it for an hour, and a minute (which no slow machine explains) is enough.
  const test::Patience patience(std::chrono::seconds(60));
  while (!g_waiter_done.load() && !patience.exhausted()) std::this_thread::yield();
  const bool woke = g_waiter_done.load();
  cancel.request_stop();  // ends a wait that was never woken
  waiter.join();
  releaser.join();
  EXPECT_TRUE(woke) << stripes << " stripes: the waiter slept through a release";
  EXPECT_TRUE(got);
  EXPECT_EQ(pool.in_use(), 1u);  // b; the waiter's permit went back
}

TEST(BulkheadWakeup, AWaiterArrivingDuringAReleaseGetsTheSlot) {
  a_waiter_arriving_during_a_release_gets_the_slot(1);
}

TEST(BulkheadWakeup, AWaiterArrivingDuringAStripedReleaseGetsTheSlot) {
  a_waiter_arriving_during_a_release_gets_the_slot(2);
  a_waiter_arriving_during_a_release_gets_the_slot(8);
}

}  // namespace
}  // namespace bulwark
